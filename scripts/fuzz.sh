#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (in build-fuzz) and runs each for a bounded time from a
# generated seed corpus: the model-file readers (GGUF, safetensors), the tokenizer loaders
# (tokenizer.json folders, vocab.json + merges.txt, GGUF vocabularies), the Jinja chat-template
# interpreter and the store's catalog reader (through PrefixStore::Open, and on in-memory images). Prints
# each target's exec count. Fails if a fuzzer finds a crash, a leak, undefined behaviour, a hang
# or an absurd allocation (the reproducer is left in build-fuzz/artifacts/). CI runs this;
# scripts/fuzz-long.sh runs longer.
#   scripts/fuzz.sh                 # FUZZ_SECONDS (default 30) per target
#   scripts/fuzz.sh catalog-fuzz    # only the named targets
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../tests/fuzz/fuzz-common.sh"
seconds=${FUZZ_SECONDS:-30}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${FUZZ_TARGETS[@]}")

fuzz_build
fuzz_seeds
total=0
for name in "${targets[@]}"; do
  echo "[fuzz] $name for ${seconds}s"
  if ! fuzz_run "$name" -max_total_time="$seconds"; then
    echo "[fuzz] $name FOUND A PROBLEM (log: $FUZZ_BUILD/$name.log, reproducer in $FUZZ_BUILD/artifacts/)" >&2
    exit 1
  fi
  total=$((total + FUZZ_EXECS))
done
echo "[fuzz] no findings; $total execs in all"
