#!/usr/bin/env bash
# Decode speed when another program takes a core: `impress bench engine` decode with 1 and 2
# threads, alone and next to a busy loop pinned to one core (as when the hypervisor or a build
# takes it), rounds interleaved so that drifting load hits every case alike. Prints each run's
# decode tok/s and CPU ms per token, then the median of each case and the ratios that matter:
# 2 threads over 1 with the competitor (>= 1 means a second thread never hurts) and without.
# With --compare OTHER (another build's impress binary, e.g. of the previous commit), every
# round runs both, so that the two are measured under the same load.
#
# Usage: scripts/decode-contention.sh [--rounds N] [--core C] [--decode-ctx N] [--bin PATH]
#        [--compare PATH] [-- extra bench engine options, e.g. --model FILE]
# The competitor runs at this script's niceness (wrap the whole script in nice to lower both).
set -euo pipefail

rounds=3
core=1
decode_ctx=0
bin=""
other=""
extra=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --core) core="$2"; shift 2 ;;
    --decode-ctx) decode_ctx="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    --compare) other="$2"; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
root="$(cd "$(dirname "$0")/.." && pwd)"
[[ -n "$bin" ]] || bin="$root/build/bin/impress"
[[ -x "$bin" ]] || { echo "no $bin: build the impress target first" >&2; exit 1; }
[[ -z "$other" || -x "$other" ]] || { echo "no $other" >&2; exit 1; }
bins=("$bin")
[[ -z "$other" ]] || bins+=("$other")
command -v taskset > /dev/null || { echo "taskset is needed (util-linux)" >&2; exit 1; }

competitor=""
stop_competitor() {
  if [[ -n "$competitor" ]]; then
    kill "$competitor" 2> /dev/null || true
    wait "$competitor" 2> /dev/null || true
    competitor=""
  fi
}
trap stop_competitor EXIT

# One bench run of binary $1 with $2 threads; prints "tok_s cpu_ms" (with --decode-ctx, the
# long-context decode instead).
run_bench() {
  local json
  json="$("$1" bench engine --json --short 64 --long 64 --repeats 1 --decode 128 \
    --decode-ctx "$decode_ctx" --threads "$2" "${extra[@]}" 2> /dev/null)"
  python3 - "$json" "$decode_ctx" << 'EOF'
import json, sys
j = json.loads(sys.argv[1])
if int(sys.argv[2]) > 0:
    print(f"{j['decode_tok_s_long_ctx']:.1f} -")
else:
    print(f"{j['decode_tok_s']:.1f} {j['decode_cpu_ms_per_token']:.2f}")
EOF
}

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A results
for ((r = 1; r <= rounds; ++r)); do
  for comp in none busy; do
    if [[ "$comp" == busy ]]; then
      taskset -c "$core" bash -c 'while :; do :; done' &
      competitor=$!
      sleep 0.2
    fi
    for b in "${!bins[@]}"; do
      for t in 1 2; do
        read -r tok cpu < <(run_bench "${bins[$b]}" "$t")
        echo "round $r binary=$b competitor=$comp threads=$t: decode $tok tok/s, cpu $cpu ms/token"
        results[$b,$comp,$t]+="$tok "
      done
    done
    stop_competitor
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for b in "${!bins[@]}"; do
  echo "binary $b: ${bins[$b]}"
  python3 - "${results[$b,none,1]}" "${results[$b,none,2]}" "${results[$b,busy,1]}" "${results[$b,busy,2]}" << 'EOF'
import statistics, sys
n1, n2, b1, b2 = (statistics.median(float(x) for x in a.split()) for a in sys.argv[1:5])
print(f"  median decode tok/s  alone: 1 thread {n1:.1f}, 2 threads {n2:.1f}  (2/1 = {n2 / n1:.2f})")
print(f"  median decode tok/s  busy core: 1 thread {b1:.1f}, 2 threads {b2:.1f}  (2/1 = {b2 / b1:.2f})")
EOF
done
