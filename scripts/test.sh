#!/usr/bin/env bash
# All tests, as CI runs them: set up, check the layout and the formatting (no build needed), build (Release, then
# ASan+UBSan), run every test in both, the store's concurrency tests under ThreadSanitizer, then
# the fuzzers for a bounded time. After each ctest run, scripts/check-skips.py fails the run on a
# skip that tests/allowed-skips.txt does not allow (skips are for absent hardware only); after the
# Release run, scripts/check-tests-fail.sh shows that a broken model or reference fails tests.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/setup.sh"
source "$here/env.sh"
cd "$IMPRESS_ROOT"

echo "=== Layout: include direction, references, file and function sizes"
bash "$here/check-layout.sh"
echo "=== Format: every C++ file matches .clang-format"
bash "$here/format.sh" --check
echo "=== Thread-safety analysis"
bash "$here/thread-safety.sh"

# ctest with a JUnit report, then the skip check on it: "run_ctest DIR ARGS...".
run_ctest() {
  local dir=$1
  shift
  local junit="$IMPRESS_ROOT/$dir/ctest-junit.xml"
  rm -f "$junit"
  local rc=0
  ctest --test-dir "$dir" --no-tests=error --output-on-failure --output-junit "$junit" "$@" || rc=$?
  "$IMPRESS_PYTHON" "$here/check-skips.py" "$junit" || rc=1
  return "$rc"
}

echo "=== Release build + tests"
bash "$here/build.sh" build -DIMPRESS_WERROR=ON
run_ctest build -j "$IMPRESS_JOBS" --timeout 900

echo "=== The kernel-path tests as on a CPU without AVX-512 (the AVX2 path first-class, AVX-512 skipped by reason)"
IMPRESS_CPU_HIDE=avx512f run_ctest build -j "$IMPRESS_JOBS" --timeout 900 -R "Quant|KeyScores|Gemm|Attention"

echo "=== The chat model answers (Qwen2.5-Coder-1.5B-Instruct, fetched by setup)"
if [ "${IMPRESS_SKIP_CHAT_MODEL:-0}" != 1 ]; then
  answer=$(build/bin/impress generate --model qwen2.5-coder-1.5b --no-store --temperature 0 --max-tokens 12 \
    --prompt "What is the capital of France? Answer in one sentence.")
  echo "$answer"
  grep -q "Paris" <<<"$answer" || { echo "the chat model did not answer 'Paris'" >&2; exit 1; }
fi

echo "=== The suite can fail: a corrupt model and a killed reference script fail tests"
bash "$here/check-tests-fail.sh" build

echo "=== ASan/UBSan build + tests"
# -O1 -g1: the sanitizers find the same bugs, and the build takes about half the time of -O2 -g.
bash "$here/build.sh" build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIMPRESS_SANITIZE=ON \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  run_ctest build-asan -j "$IMPRESS_JOBS" --timeout 1800 -LE no-sanitizer

echo "=== ThreadSanitizer build + store concurrency tests"
bash "$here/build.sh" build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIMPRESS_TSAN=ON --target prefix-store-test read-into-test uring-io-test \
  team-remote-test redis-tls-test
TSAN_OPTIONS=halt_on_error=1 run_ctest build-tsan -j "$IMPRESS_JOBS" --timeout 900 -R "PrefixStore|ReadInto|UringIo|TeamRemote|RedisTls"

echo "=== Fuzzers (bounded time)"
bash "$here/fuzz.sh"
echo "=== all tests passed"
