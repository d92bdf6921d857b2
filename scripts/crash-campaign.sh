#!/usr/bin/env bash
# The crash campaign (not CI): at least KILLS SIGKILLs (default 1000) of a process writing,
# reordering and evicting on one store, each followed by a reopen that verifies every chunk, a
# consistency check and a read-back of every matched prefix against the KV written for it. It
# drives the store's crash test (tests/store/store-crash-test.cpp: one store per round, a fixed
# number of kills per round) round after round until the kills add up, and prints kills, reopen
# checks, verified layer reads and every inconsistency found. Goal: zero inconsistencies.
#   scripts/crash-campaign.sh            # 1000 kills
#   scripts/crash-campaign.sh 50         # a short run (whole rounds: at least one round)
#   CRASH_TEST_BIN=build/bin/store-crash-test scripts/crash-campaign.sh   # an existing binary
#   CRASH_BUILD=build-crash scripts/crash-campaign.sh                     # else built here
# IMPRESS_STORE_TEST_DIR picks the file system the stores live on (default /tmp).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
want=${1:-1000}
bin=${CRASH_TEST_BIN:-}
if [ -z "$bin" ]; then
  build=${CRASH_BUILD:-$IMPRESS_ROOT/build-crash}
  [ -f "$build/CMakeCache.txt" ] ||
    cmake -S "$IMPRESS_ROOT" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPRESS_PYTHON="$IMPRESS_PYTHON" >/dev/null
  cmake --build "$build" -j "$IMPRESS_JOBS" --target store-crash-test >/dev/null
  bin="$build/bin/store-crash-test"
fi
[ -x "$bin" ] || { echo "[crash-campaign] no crash test binary at $bin" >&2; exit 2; }

logdir=$(mktemp -d /tmp/impress-crash-campaign.XXXXXX)
kills=0 early=0 reads=0 tokens=0 rounds=0 bad=0
t0=$(date +%s)
while [ "$kills" -lt "$want" ]; do
  rounds=$((rounds + 1))
  log="$logdir/round-$rounds.log"
  rc=0
  "$bin" --gtest_filter='StoreCrash.*' >"$log" 2>&1 || rc=$?
  # "[crash] N SIGKILLs (E early exits), R verified layer reads, T matched tokens checked, S s"
  line=$(grep -E '^\[crash\] [0-9]+ SIGKILLs' "$log" | tail -n 1 || true)
  if [ -n "$line" ]; then
    read -r k e r t < <(echo "$line" | sed -E 's/^\[crash\] ([0-9]+) SIGKILLs \(([0-9]+) early exits\), ([0-9]+) verified layer reads, ([0-9]+) matched.*/\1 \2 \3 \4/')
    kills=$((kills + k)) early=$((early + e)) reads=$((reads + r)) tokens=$((tokens + t))
  fi
  if [ $rc -ne 0 ] || [ -z "$line" ]; then
    bad=$((bad + 1))
    echo "[crash-campaign] round $rounds: INCONSISTENCY (exit $rc; log $log):" >&2
    grep -E "Failure|after kill|Expected|Which is|error" "$log" | head -n 20 | sed 's/^/[crash-campaign]   /' >&2
    # A failed round stops at its first bad reopen; count what it did up to there.
    k=$(grep -oE "after kill [0-9]+" "$log" | head -n 1 | grep -oE "[0-9]+" || echo 0)
    [ -n "$line" ] || kills=$((kills + k))
  fi
  echo "[crash-campaign] round $rounds: ${line:-failed}; $kills kills so far"
done
secs=$(($(date +%s) - t0))
# Every kill (and every early exit) is followed by one reopen with verify_on_open.
echo "[crash-campaign] $kills SIGKILLs in $rounds round(s), $((kills + early)) reopen checks" \
  "(verify every chunk, consistency, read-back), $reads verified layer reads," \
  "$tokens matched tokens compared with what was written, $bad inconsistent round(s), ${secs}s"
[ "$bad" -eq 0 ] && rm -rf "$logdir"
[ "$bad" -eq 0 ]
