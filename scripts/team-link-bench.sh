#!/usr/bin/env bash
# The team KV tier over a shaped link (docs/team-tier.md, "Over a shaped link"). Root only.
#
#   sudo scripts/team-link-bench.sh [--model PATH] [--doc PATH] [--doc-chars N] [--rates "1gbit 100mbit"]
#                                   [--systems "as as-h2o-lfu impress impress:whole"] [--threads N] [--build DIR]
#                                   [--extra "MORE impress generate OPTIONS FOR DESKTOP B"]
#
# A network namespace with one end of a veth pair runs its own redis-server (a temporary
# directory, a /30 of 10.x addresses on the veth, nothing else); both ends are shaped with tbf to
# each rate in turn. Desktop A (an `impress generate` with a store of its own) reads the document
# once and publishes its KV to the team tier. Then, per rate, the link's real throughput is
# measured with a plain GET of a large value, and desktop B asks a question with each system, each
# from a new empty store of its own, so its whole prefix comes over the link. By default B reads
# per layer only what the system selects (--team-reads selective); SYSTEM:exact reads per layer
# with the publisher's groups (--team-reads exact), SYSTEM:whole fills the whole prefix before the
# request instead. The table gives the time to first token with the team
# lookup or fill (team_ms + ttft_ms of --json), the bytes received from the team tier for it
# (team_bytes), the ratios to AS-like, the request's compute and its wait for the link
# (breakdown_ms compute + probe_compute, io_wait), and the same question asked again on B (its local store,
# which the first process filled in the background before it ended). Everything is removed on exit.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"

model=$IMPRESS_DEFAULT_MODEL
doc=$IMPRESS_ROOT/assets/docs/gpl-3.0.txt
doc_chars=0
rates="1gbit 100mbit"
systems="as as-h2o-lfu impress impress:whole"
threads=$(nproc)
build=$IMPRESS_ROOT/build
extra=
while (($#)); do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --doc) doc=$2; shift 2 ;;
    --doc-chars) doc_chars=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --extra) extra=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "team-link-bench: unknown argument $1" >&2; exit 2 ;;
  esac
done

die() { echo "team-link-bench: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "needs root (network namespace, veth, tc)"
for tool in ip tc redis-server redis-cli python3; do
  command -v "$tool" >/dev/null || die "$tool not found (scripts/setup.sh installs iproute2 and redis-server)"
done
impress=$build/bin/impress
[ -x "$impress" ] || die "$impress not built (scripts/build.sh)"
[ -f "$model" ] || die "model $model not found"
[ -f "$doc" ] || die "document $doc not found"

tag=itb$$
ns=$tag
veth_host=${tag}h
veth_ns=${tag}n
net=$((RANDOM % 200 + 20))
host_ip=10.213.$net.1
redis_ip=10.213.$net.2
port=$((20000 + RANDOM % 20000))
tmp=$(mktemp -d /tmp/impress-team-link.XXXXXX)
redis_pid=

cleanup() {
  set +e
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  ip link del "$veth_host" 2>/dev/null
  ip netns del "$ns" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

# --- the link and the server --------------------------------------------------------------------
ip netns add "$ns"
ip link add "$veth_host" type veth peer name "$veth_ns"
ip link set "$veth_ns" netns "$ns"
ip addr add "$host_ip/30" dev "$veth_host"
ip link set "$veth_host" up
ip netns exec "$ns" ip addr add "$redis_ip/30" dev "$veth_ns"
ip netns exec "$ns" ip link set "$veth_ns" up
ip netns exec "$ns" ip link set lo up
mkdir -p "$tmp/redis"
ip netns exec "$ns" redis-server --bind "$redis_ip" --port "$port" --dir "$tmp/redis" --save '' --appendonly no \
  --protected-mode no --maxmemory 4gb --logfile "$tmp/redis/log" >/dev/null &
redis_pid=$!
for _ in $(seq 50); do
  redis-cli -h "$redis_ip" -p "$port" ping >/dev/null 2>&1 && break
  sleep 0.1
done
redis-cli -h "$redis_ip" -p "$port" ping >/dev/null || die "redis-server did not start (see $tmp/redis/log)"

# tbf on both ends (the veth's egress each way), a burst of about 10 ms at the rate.
shape() {
  local rate=$1 bits burst
  bits=$(python3 -c "import re,sys; m=re.fullmatch(r'(\d+)([kmg]?)bit','$rate'); \
print(int(m.group(1))*{'':1,'k':10**3,'m':10**6,'g':10**9}[m.group(2)])") || die "bad rate $rate (e.g. 1gbit, 100mbit)"
  burst=$((bits / 8 / 100))
  ((burst < 65536)) && burst=65536
  tc qdisc replace dev "$veth_host" root tbf rate "$rate" burst "$burst" latency 100ms
  ip netns exec "$ns" tc qdisc replace dev "$veth_ns" root tbf rate "$rate" burst "$burst" latency 100ms
}

# The link's real throughput: a plain GET of a 64 MiB value from the server, in Mbit/s.
link_mbit() {
  head -c $((64 << 20)) /dev/urandom >"$tmp/big"
  redis-cli -h "$redis_ip" -p "$port" -x SET impress-link-probe <"$tmp/big" >/dev/null
  local t0 t1
  t0=$(date +%s%N)
  redis-cli -h "$redis_ip" -p "$port" --raw GET impress-link-probe >/dev/null
  t1=$(date +%s%N)
  redis-cli -h "$redis_ip" -p "$port" DEL impress-link-probe >/dev/null
  python3 -c "print(f'{(64 << 20) * 8 / (($t1 - $t0) / 1e9) / 1e6:.0f}')"
}

doc_name=$(basename "$doc")
if ((doc_chars > 0)); then
  head -c "$doc_chars" "$doc" >"$tmp/doc.txt"
  doc=$tmp/doc.txt
fi
team=(--team "redis://$redis_ip:$port" --team-namespace link-bench)
common=(--model "$model" --threads "$threads" --temperature 0 --max-tokens 1 --json --log-level warn)
ask() {  # store, system[:whole], question
  local sys=${2%%:*} reads=selective
  [ "$2" != "$sys" ] && reads=${2#*:}
  # shellcheck disable=SC2086 # --extra is split into options on purpose
  "$impress" generate "${common[@]}" --store "$1" --system "$sys" "${team[@]}" --team-reads "$reads" --doc "$doc" \
    --prompt "$3" ${4:-}
}

echo "# team-link-bench $(date -u +%Y-%m-%dT%H:%M:%SZ)"
echo "# cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
echo "# model: $(basename "$model"); document: $doc_name ($(wc -c <"$doc") bytes)"
echo "# command: scripts/team-link-bench.sh --model $(basename "$model") --doc $doc_name --doc-chars $doc_chars \
--rates \"$rates\" --systems \"$systems\" --threads $threads${extra:+ --extra \"$extra\"}"
echo "# load (1 min) before: $(cut -d' ' -f1 /proc/loadavg)"

echo "# the veth unshaped: GET throughput $(link_mbit) Mbit/s"

# --- desktop A: reads the document once and publishes it ----------------------------------------
shape "${rates%% *}"
t0=$(date +%s%N)
ask "$tmp/a" impress "Summarise this document in one sentence." >"$tmp/a.json"
t1=$(date +%s%N)
keys=$(redis-cli -h "$redis_ip" -p "$port" dbsize)
used=$(redis-cli -h "$redis_ip" -p "$port" info memory | sed -n 's/^used_memory_human://p' | tr -d '\r')
python3 - "$tmp/a.json" "$(((t1 - t0) / 1000000))" "$keys" "$used" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
rep = r.get("report", r)
print(f"# desktop A: {rep['n_prefix']} prefix tokens computed, TTFT {rep['ttft_ms']:.0f} ms, "
      f"{int(sys.argv[2]) / 1000:.1f} s in all with publishing; the team tier holds {sys.argv[3]} keys ({sys.argv[4]})")
EOF

# --- desktop B, per rate and system -------------------------------------------------------------
question="Who may copy this license document, and may it be changed?"
for rate in $rates; do
  shape "$rate"
  echo
  echo "## link $rate (tbf), measured GET throughput $(link_mbit) Mbit/s"
  for sys in $systems; do
    store=$tmp/b-$rate-$sys
    ask "$store" "$sys" "$question" "$extra" >"$tmp/b-$rate-$sys-1.json"
    ask "$store" "$sys" "$question" "$extra" >"$tmp/b-$rate-$sys-2.json"
  done
  python3 - "$tmp" "$rate" $systems <<'EOF'
import json, sys
tmp, rate, systems = sys.argv[1], sys.argv[2], sys.argv[3:]
def load(sys_, i):
    r = json.load(open(f"{tmp}/b-{rate}-{sys_}-{i}.json"))
    return r.get("report", r)
rows = []
for s in systems:
    first, again = load(s, 1), load(s, 2)
    ttft = first["team_ms"] + first["ttft_ms"]
    b = first.get("breakdown_ms", {})
    rows.append((s, ttft, first["team_ms"], first["team_tokens"], first["team_bytes"], again["ttft_ms"],
                 again["reused_tokens"], first.get("team_remote", False),
                 b.get("compute", 0) + b.get("probe_compute", 0), b.get("io_wait", 0)))
base = next((r for r in rows if r[0] == "as"), rows[0])
print(f"| system | reads | TTFT ms (team lookup or fill + prefill) | lookup or fill ms | team tokens | "
      f"bytes over the link | TTFT vs AS-like | bytes vs AS-like | compute ms | waiting on the link ms | "
      f"TTFT ms asked again (local) |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for s, ttft, fill, tokens, nbytes, again, reused, remote, compute, wait in rows:
    rb = nbytes / base[4] if base[4] else float("nan")
    mode = "whole fill"
    if remote:
        mode = "per layer, the publisher's groups" if s.endswith(":exact") else "per layer"
    print(f"| {s.split(':')[0]} | {mode} | {ttft:.0f} | {fill:.0f} | {tokens} | {nbytes / 1e6:.1f} MB | "
          f"{base[1] / ttft:.2f}x faster | {rb:.2f} | {compute:.0f} | {wait:.0f} | {again:.0f} |")
EOF
done
echo
echo "# load (1 min) after: $(cut -d' ' -f1 /proc/loadavg)"
