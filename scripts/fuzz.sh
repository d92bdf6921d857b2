#!/usr/bin/env bash
# Builds the libFuzzer targets of the model-file readers with clang (in build-fuzz) and runs each
# for a bounded time from a generated seed corpus. Fails if a fuzzer finds a crash, a leak or
# undefined behaviour (the reproducer is left in build-fuzz/artifacts/).
#   scripts/fuzz.sh            # FUZZ_SECONDS (default 60) per target
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
seconds=${FUZZ_SECONDS:-60}
build="$IMPRESS_ROOT/build-fuzz"
src="$IMPRESS_ROOT/tests/fuzz"

cmake -S "$src" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$IMPRESS_JOBS" >/dev/null

seeds="$build/seeds"
rm -rf "$seeds"
python3 "$src/make-seeds.py" "$seeds/gguf" "$seeds/safetensors"
mkdir -p "$build/artifacts"

run() {  # run NAME SEED_DIR DICT
  local name=$1 seed_dir=$2 dict=$3
  local corpus="$build/corpus/$name"
  mkdir -p "$corpus"
  echo "[fuzz] $name for ${seconds}s"
  if ! ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      "$build/$name" "$corpus" "$seed_dir" -dict="$dict" -max_total_time="$seconds" -max_len=65536 \
      -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/$name-" \
      >"$build/$name.log" 2>&1; then
    tail -n 60 "$build/$name.log" >&2
    echo "[fuzz] $name FOUND A PROBLEM (log: $build/$name.log, reproducer in $build/artifacts/)" >&2
    exit 1
  fi
  grep -E "^stat::number_of_executed_units|^Done" "$build/$name.log" | sed "s/^/[fuzz] $name: /" || true
}

run gguf-fuzz "$seeds/gguf" "$src/gguf.dict"
run safetensors-fuzz "$seeds/safetensors" "$src/safetensors.dict"
echo "[fuzz] no findings"
