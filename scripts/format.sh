#!/usr/bin/env bash
# Formats the tracked C++ sources with the repository's .clang-format.
#   scripts/format.sh            # rewrite the files in place
#   scripts/format.sh --check    # change nothing; list the files that differ, exit 1 if any do
#   scripts/format.sh [--check] FILE...   # only these files
# Generated files (engine/tokenizer/unicode-tables.cpp, from scripts/gen-unicode-tables.py) are
# left as the generator wrote them. CLANG_FORMAT names the binary (default: clang-format).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
clang_format=${CLANG_FORMAT:-clang-format}
if ! command -v "$clang_format" >/dev/null; then
  echo "format: $clang_format not found (Debian: apt-get install clang-format)" >&2
  exit 2
fi

check=0
if [ "${1:-}" = "--check" ]; then
  check=1
  shift
fi

generated='^engine/tokenizer/unicode-tables\.cpp$'
if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh' | grep -Ev "$generated" |
    while read -r f; do [ -f "$f" ] && echo "$f"; done)
fi

if ((check == 0)); then
  printf '%s\0' "${files[@]}" | xargs -0 -r -n 16 "$clang_format" -i --style=file
  echo "format: ${#files[@]} files formatted"
  exit 0
fi

bad=0
for f in "${files[@]}"; do
  if ! "$clang_format" --style=file "$f" | diff -q "$f" - >/dev/null; then
    n=$("$clang_format" --style=file "$f" | diff "$f" - | grep -c '^>' || true)
    echo "format: $f: $n line(s) would change"
    bad=$((bad + 1))
  fi
done
if ((bad)); then
  echo "format: $bad of ${#files[@]} files differ from .clang-format (run: bash scripts/format.sh)" >&2
  exit 1
fi
echo "format: all ${#files[@]} files match .clang-format"
