#!/usr/bin/env bash
# Makes the random-weight GGUF models of real shapes that the engine benchmarks use, once, and
# caches them under $IMPRESS_CACHE_DIR/models/random/ (not part of CI: the 8B file is ~4.9 GB
# and takes minutes to write).
#   scripts/make-models.sh [SHAPE...]      default: llama-3.1-8b llama-3.2-1b qwen2.5-0.5b
# Each is written by `impress quantize --random SHAPE --type q4_k_m` with the default model's
# tokenizer copied in (its 49,152 tokens fit every shape's vocabulary), so `impress chat` and
# `impress bench engine --model FILE` run on it. A file already there is kept; delete it to remake.
# Environment: IMPRESS_BUILD (default: build) is the build folder holding bin/impress.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
impress="$IMPRESS_ROOT/${IMPRESS_BUILD:-build}/bin/impress"
[[ -x $impress ]] || { echo "[make-models] $impress not built (bash scripts/build.sh build)" >&2; exit 1; }
out="$IMPRESS_CACHE_DIR/models/random"
mkdir -p "$out"
shapes=("$@")
[[ ${#shapes[@]} -gt 0 ]] || shapes=(llama-3.1-8b llama-3.2-1b qwen2.5-0.5b)
tok=()
[[ -f $IMPRESS_DEFAULT_MODEL ]] && tok=(--tokenizer "$IMPRESS_DEFAULT_MODEL")
for shape in "${shapes[@]}"; do
  file="$out/$shape.q4_k_m.gguf"
  if [[ -f $file ]]; then
    echo "[make-models] $file exists"
    continue
  fi
  echo "[make-models] writing $file"
  "$impress" quantize --random "$shape" --type q4_k_m --threads "$IMPRESS_JOBS" "${tok[@]}" "$file"
done
