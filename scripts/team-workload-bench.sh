#!/usr/bin/env bash
# The multi-document workload with the team KV tier under the local tiers (docs/team-tier.md).
#
#   scripts/team-workload-bench.sh [--out DIR] [--build DIR] [-- ARGS FOR impress bench workload]
#
# Starts a redis-server of its own on 127.0.0.1 (a free port, a temporary directory, nothing
# saved), runs `impress bench workload --team redis://127.0.0.1:PORT` with the arguments after
# `--` (the ingested documents are published to the team tier once; every system then starts from
# an empty local store, so a document's first request reads from the team tier and later ones
# from what the local tiers admitted), draws the plots (scripts/plot-workload.py: TTFT and where
# the KV came from, the team tier included), and stops the server. Results in DIR (default
# results/team-workload).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"

out=$IMPRESS_ROOT/results/team-workload
build=$IMPRESS_ROOT/build
while (($#)); do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "team-workload-bench: unknown argument $1 (arguments for the benchmark go after --)" >&2; exit 2 ;;
  esac
done
die() { echo "team-workload-bench: $*" >&2; exit 1; }
command -v redis-server >/dev/null || die "redis-server not found (scripts/setup.sh installs it)"
impress=$build/bin/impress
[ -x "$impress" ] || die "$impress not built (scripts/build.sh)"

tmp=$(mktemp -d /tmp/impress-team-workload.XXXXXX)
redis_pid=
cleanup() {
  set +e
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null && wait "$redis_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

port=
for _ in $(seq 20); do
  candidate=$((20000 + RANDOM % 20000))
  redis-server --bind 127.0.0.1 --port "$candidate" --dir "$tmp" --save '' --appendonly no \
    --logfile "$tmp/redis.log" >/dev/null &
  redis_pid=$!
  for _ in $(seq 50); do
    redis-cli -p "$candidate" ping >/dev/null 2>&1 && { port=$candidate; break; }
    kill -0 "$redis_pid" 2>/dev/null || break
    sleep 0.1
  done
  [ -n "$port" ] && break
  kill "$redis_pid" 2>/dev/null; wait "$redis_pid" 2>/dev/null || true
  redis_pid=
done
[ -n "$port" ] || die "could not start a redis-server on 127.0.0.1 (see $tmp/redis.log)"

mkdir -p "$out"
echo "# team-workload-bench $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(lscpu | sed -n 's/^Model name: *//p')"
"$impress" bench workload --team "redis://127.0.0.1:$port" --team-namespace workload-bench --out "$out" "$@"
plot_python=${IMPRESS_PYTHON:-python3}
"$plot_python" "$here/plot-workload.py" "$out" || echo "team-workload-bench: plotting failed (matplotlib missing?)" >&2
