#!/usr/bin/env bash
# The long fuzz run (not CI): every libFuzzer target (or the named ones) for a time or exec
# budget, on all cores, printing each target's exec count and its findings. The goal is at
# least 10^8 execs per target with no finding; the corpus is kept in build-fuzz/corpus/ and
# grows from run to run, so the budget can be spent over several runs (the counts add up in
# build-fuzz/long-execs.txt).
#   scripts/fuzz-long.sh 3600                    # seconds per target (default 3600)
#   scripts/fuzz-long.sh 100000000 --execs       # an exec budget per target instead (per worker)
#   FUZZ_JOBS=8 scripts/fuzz-long.sh 3600 tokenizer-fuzz catalog-fuzz
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../tests/fuzz/fuzz-common.sh"
budget=${1:-3600}
shift || true
mode=time
if [ "${1:-}" = "--execs" ]; then
  mode=execs
  shift
fi
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${FUZZ_TARGETS[@]}")
jobs=${FUZZ_JOBS:-$IMPRESS_JOBS}
ledger="$FUZZ_BUILD/long-execs.txt"

fuzz_build
fuzz_seeds
touch "$ledger"
findings=0
for name in "${targets[@]}"; do
  limit=(-max_total_time="$budget")
  [ "$mode" = execs ] && limit=(-runs="$budget")
  echo "[fuzz-long] $name: $jobs worker(s), budget $budget ${mode/time/s}"
  marker="$FUZZ_BUILD/.long-start-$name"
  touch "$marker"
  # -fork runs the workers as child processes that share the corpus and survive each other's
  # findings (-ignore_crashes etc.), so one finding does not end the whole budget.
  if [ "$jobs" -gt 1 ]; then
    fuzz_run "$name" "${limit[@]}" -fork="$jobs" -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 || true
    # -fork prints its totals as "#N ... exec/s" lines instead of final stats.
    if [ "$FUZZ_EXECS" = 0 ]; then
      FUZZ_EXECS=$(grep -E "^#[0-9]+" "$FUZZ_BUILD/$name.log" | tail -n 1 | sed -E 's/^#([0-9]+).*/\1/')
      FUZZ_EXECS=${FUZZ_EXECS:-0}
      echo "[fuzz] $name: $FUZZ_EXECS execs (fork mode)"
    fi
  else
    fuzz_run "$name" "${limit[@]}" || true
  fi
  new=$(find "$FUZZ_BUILD/artifacts" -type f -name "$name-*" -newer "$marker" | wc -l)
  findings=$((findings + new))
  echo "$name $FUZZ_EXECS" >>"$ledger"
  so_far=$(awk -v n="$name" '$1 == n {s += $2} END {print s + 0}' "$ledger")
  echo "[fuzz-long] $name: $FUZZ_EXECS execs this run, $so_far in all runs (goal 100000000), $new new finding(s)"
  if [ "$new" -gt 0 ]; then
    find "$FUZZ_BUILD/artifacts" -type f -name "$name-*" -newer "$marker" -printf "[fuzz-long]   %p\n"
  fi
done
echo "[fuzz-long] $findings finding(s) in all (reproducers in $FUZZ_BUILD/artifacts/)"
[ "$findings" -eq 0 ]
