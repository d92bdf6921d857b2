#!/usr/bin/env bash
# All tests, as CI runs them: set up, check the layout (no build needed), build (Release, then
# ASan+UBSan), run every test in both, the store's concurrency tests under ThreadSanitizer, then
# the fuzzers for a bounded time.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bash "$here/setup.sh"
source "$here/env.sh"
cd "$IMPRESS_ROOT"

echo "=== Layout: include direction, references, file and function sizes"
bash "$here/check-layout.sh"
if [ -f "$here/thread-safety.sh" ]; then
  echo "=== Thread-safety analysis"
  bash "$here/thread-safety.sh"
fi

echo "=== Release build + tests"
bash "$here/build.sh" build -DIMPRESS_WERROR=ON
ctest --test-dir build --output-on-failure -j "$IMPRESS_JOBS" --timeout 900

echo "=== ASan/UBSan build + tests"
bash "$here/build.sh" build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIMPRESS_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$IMPRESS_JOBS" --timeout 1800 -LE no-sanitizer

echo "=== ThreadSanitizer build + store concurrency tests"
bash "$here/build.sh" build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIMPRESS_TSAN=ON --target prefix-store-test uring-io-test
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure -j "$IMPRESS_JOBS" --timeout 900 -R "PrefixStore|UringIo"

if [ -x "$here/fuzz.sh" ]; then
  echo "=== Fuzzers (bounded time)"
  bash "$here/fuzz.sh"
fi
echo "=== all tests passed"
