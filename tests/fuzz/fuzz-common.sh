# Sourced by scripts/fuzz.sh and scripts/fuzz-long.sh: builds the libFuzzer project
# (tests/fuzz, clang, in FUZZ_BUILD), writes the seed corpora and runs one target with the
# shared limits. After fuzz_run, FUZZ_EXECS holds the target's exec count.
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../scripts" && pwd)/env.sh"
FUZZ_BUILD=${FUZZ_BUILD:-$IMPRESS_ROOT/build-fuzz}
FUZZ_SRC="$IMPRESS_ROOT/tests/fuzz"
FUZZ_TARGETS=(gguf-fuzz safetensors-fuzz tokenizer-fuzz catalog-fuzz catalog-image-fuzz jinja-fuzz)
FUZZ_EXECS=0

fuzz_build() {
  local launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$FUZZ_SRC" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "${launcher[@]}" >/dev/null
  # Quiet when it builds; a failure shows the compiler's messages.
  if ! cmake --build "$FUZZ_BUILD" -j "$IMPRESS_JOBS" >"$FUZZ_BUILD/build.log" 2>&1; then
    tail -n 60 "$FUZZ_BUILD/build.log" >&2
    echo "[fuzz] build failed (full log: $FUZZ_BUILD/build.log)" >&2
    return 1
  fi
  mkdir -p "$FUZZ_BUILD/artifacts"
}

# Seeds: small valid files of every format (make-seeds.py; the tokenizer seeds include the default
# model's vocabulary made small when the model is there), catalogs the store itself wrote and
# real chat templates.
fuzz_seeds() {
  local seeds="$FUZZ_BUILD/seeds"
  rm -rf "$seeds"
  python3 "$FUZZ_SRC/make-seeds.py" "$seeds/gguf-fuzz" "$seeds/safetensors-fuzz" "$seeds/tokenizer-fuzz"
  CATALOG_FUZZ_WRITE_SEEDS="$seeds/catalog-fuzz" "$FUZZ_BUILD/catalog-fuzz" >/dev/null 2>&1
  cp -r "$seeds/catalog-fuzz" "$seeds/catalog-image-fuzz"  # both read an input the same way
  # The chat templates the interpreter is checked against (Llama-3.1, Qwen2.5, a features one).
  mkdir -p "$seeds/jinja-fuzz"
  cp "$IMPRESS_ROOT"/tests/tokenizer/templates/*.jinja "$seeds/jinja-fuzz/"
}

fuzz_dict() {  # the dictionary of a target
  case $1 in
    gguf-fuzz) echo "$FUZZ_SRC/gguf.dict" ;;
    safetensors-fuzz) echo "$FUZZ_SRC/safetensors.dict" ;;
    tokenizer-fuzz) echo "$FUZZ_SRC/tokenizer.dict" ;;
    catalog-fuzz | catalog-image-fuzz) echo "$FUZZ_SRC/catalog.dict" ;;
    jinja-fuzz) echo "$FUZZ_SRC/jinja.dict" ;;
  esac
}

# fuzz_run NAME [libFuzzer flags...]: the corpus grows in FUZZ_BUILD/corpus/NAME; 0 when no finding.
fuzz_run() {
  local name=$1
  shift
  local corpus="$FUZZ_BUILD/corpus/$name" log="$FUZZ_BUILD/$name.log" rc=0
  mkdir -p "$corpus"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$FUZZ_BUILD/$name" "$corpus" "$FUZZ_BUILD/seeds/$name" -dict="$(fuzz_dict "$name")" -max_len=131072 \
    -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$FUZZ_BUILD/artifacts/$name-" "$@" \
    >"$log" 2>&1 || rc=$?
  FUZZ_EXECS=$(grep -h "^stat::number_of_executed_units" "$log" | awk '{s += $2} END {print s + 0}')
  local per_sec
  per_sec=$(grep -h "^stat::average_exec_per_sec" "$log" | awk '{s += $2} END {print s + 0}')
  echo "[fuzz] $name: $FUZZ_EXECS execs ($per_sec/s), corpus $(find "$corpus" -type f | wc -l) inputs"
  if [ $rc -ne 0 ]; then
    tail -n 60 "$log" >&2
    return 1
  fi
}
