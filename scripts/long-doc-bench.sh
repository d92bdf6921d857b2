#!/usr/bin/env bash
# The question path on long documents: `impress bench pipeline` over documents of about 8K, 16K
# and 32K tokens (or the sizes given), every system, with the full KV resident in RAM as the
# reference row. Each document is the GPL-3.0 text (the one the questions ask about) preceded by
# other licence texts Debian ships, cut at a line so that it has the wanted number of tokens of
# the model; documents are kept in the cache directory and reused.
#
#   scripts/long-doc-bench.sh [--model NAME] [--questions N] [--out DIR] [SIZE...]
#   e.g. scripts/long-doc-bench.sh --model qwen2.5-coder-1.5b --out results 8000 16000 31500
#
# Writes DIR/pipeline-SIZE.json per size, prints one line per system and draws
# DIR/long-doc-ttft.png (scripts/plot-long-doc.py). Long: the ingest of a
# 32K-token document is a full prefill of it (minutes to tens of minutes on a few cores).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
model=qwen2.5-coder-1.5b
questions=6
out=long-doc-results
sizes=()
while (($#)); do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --questions) questions=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) sizes+=("$1"); shift ;;
  esac
done
((${#sizes[@]})) || sizes=(8000 16000 31500)
impress="$IMPRESS_ROOT/build/bin/impress"
[ -x "$impress" ] || { echo "build first: scripts/build.sh" >&2; exit 1; }
licenses=/usr/share/common-licenses
[ -r "$licenses/GPL-2" ] || { echo "needs Debian's licence texts in $licenses (package base-files)" >&2; exit 1; }
docs="$IMPRESS_CACHE_DIR/long-docs/$model"
mkdir -p "$docs" "$out"
store=$(mktemp -d "${TMPDIR:-/tmp}/impress-long-doc.XXXXXX")
trap 'rm -rf "$store"' EXIT

count_tokens() {  # tokens of the model in file $1
  "$impress" tokenize --model "$model" --no-special --file "$1" 2>/dev/null | wc -w
}

# make_doc SIZE: the document of about SIZE tokens (within 1%), path on stdout.
make_doc() {
  local size=$1 doc="$docs/doc-$1.txt"
  if [ -s "$doc" ]; then echo "$doc"; return; fi
  local pool="$docs/pool.txt"
  # Other texts first (the question's answers are in the GPL-3.0 text at the end).
  for f in MPL-2.0 LGPL-2.1 GFDL-1.3 GPL-2 Apache-2.0 MPL-1.1 Artistic CC0-1.0 GPL-1 LGPL-3 BSD; do
    cat "$licenses/$f"
    printf '\n\n'
  done >"$pool"
  local gpl_tokens pool_lines lo hi mid have
  gpl_tokens=$(count_tokens "$IMPRESS_ROOT/assets/docs/gpl-3.0.txt")
  pool_lines=$(wc -l <"$pool")
  # The fewest trailing lines of the pool that, with the GPL-3.0 text, reach SIZE tokens.
  lo=0 hi=$pool_lines
  while ((lo < hi)); do
    mid=$(((lo + hi) / 2))
    tail -n "$mid" "$pool" >"$doc.part"
    cat "$IMPRESS_ROOT/assets/docs/gpl-3.0.txt" >>"$doc.part"
    have=$(count_tokens "$doc.part")
    if ((have < size)); then lo=$((mid + 1)); else hi=$mid; fi
  done
  tail -n "$lo" "$pool" >"$doc.part"
  cat "$IMPRESS_ROOT/assets/docs/gpl-3.0.txt" >>"$doc.part"
  have=$(count_tokens "$doc.part")
  if ((have + size / 100 < size)); then
    echo "the licence texts give $have tokens, fewer than $size" >&2
    rm -f "$doc.part"
    return 1
  fi
  mv "$doc.part" "$doc"
  echo "$doc"
}

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
echo "CPU: $cpu; model $model; $(date -u '+%Y-%m-%d %H:%M UTC')"
for size in "${sizes[@]}"; do
  doc=$(make_doc "$size")
  echo "=== $(count_tokens "$doc") tokens: $doc"
  "$impress" bench pipeline --model "$model" --store "$store" --doc "$doc" --n-questions "$questions" --json \
    >"$out/pipeline-$size.json"
  "$IMPRESS_PYTHON" - "$out/pipeline-$size.json" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"document {r['document_tokens']} tokens, ingest {r['ingest_ms'] / 1000:.0f} s, CPU {r['cpu']}")
for s in r["systems"]:
    b = s["breakdown_ms"]
    print(f"  {s['system']:24s} TTFT {s['mean_ttft_ms']:7.0f} ms  compute {b['compute']:6.0f}  io_wait {b['io_wait']:5.0f}"
          f"  probe {s['probe_share']:.2f}  SSD {s['mean_ssd_bytes'] / 1e6:7.1f} MB  first token {s['first_token_agreement']:.2f}"
          f"  KL {s['mean_kl']:.3f}")
EOF
done
"$IMPRESS_PYTHON" "$here/plot-long-doc.py" "$out"
