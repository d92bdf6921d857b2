#!/usr/bin/env bash
# The UI thread's frame time while the worker runs a ~4,000-token prefill, measured in the real
# window under Xvfb.
#
# Usage: bench/gui-prefill-bench.sh [BUILD_DIR]      (BUILD_DIR defaults to "build")
#   needs: xvfb-run, BUILD_DIR/bin/impress, and the default model (IMPRESS_DEFAULT_MODEL, which
#   scripts/env.sh sets; else ~/.cache/impress/models/SmolLM2-135M-Instruct.Q4_1.gguf).
#
# The scripted session: a small document and two questions (so the importance heatmap has a
# request to draw), then a ~4,000-token slice of assets/docs/gpl-3.0.txt is attached and a third
# question prefills it while the window keeps drawing. Printed: the CPU model and load, the
# frame-time statistics during that prefill (frames, max, p99, mean; the target is under 50 ms),
# the frame work (poll to swap), the per-stage frame profile, the heatmap texture uploads, and
# the tokens the third request computed. Nothing is judged against a time: numbers depend on
# the machine and its load. Exits non-zero only when the session itself fails.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-build}
[[ "$build" = /* ]] || build="$root/$build"
impress="$build/bin/impress"
model=${IMPRESS_DEFAULT_MODEL:-${XDG_CACHE_HOME:-$HOME/.cache}/impress/models/SmolLM2-135M-Instruct.Q4_1.gguf}

command -v xvfb-run >/dev/null || { echo "gui-prefill-bench: xvfb-run is not installed" >&2; exit 2; }
[[ -x "$impress" ]] || { echo "gui-prefill-bench: no impress executable at $impress (build the 'impress' target)" >&2; exit 2; }
[[ -f "$model" ]] || { echo "gui-prefill-bench: the default model is missing: $model" >&2; exit 2; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/impress-gui-prefill.XXXXXX")
trap 'rm -rf "$dir"' EXIT

# The first 19,100 bytes of the GPL (~4,050 SmolLM2 tokens), without the last, cut paragraph.
head -c 19100 "$root/assets/docs/gpl-3.0.txt" |
  awk 'BEGIN { RS = "\n\n"; ORS = "\n\n" } { p[NR] = $0 } END { for (i = 1; i < NR; i++) print p[i] }' >"$dir/gpl-4k.txt"

# Every `wait` waits for the worker to finish (the app's hang guard is an hour).
cat >"$dir/prefill.script" <<EOF
doc $root/tests/gui/data/sample.md
wait
ask Who built the lighthouse?
wait
ask When does the museum open?
wait
doc $dir/gpl-4k.txt
wait
ask What does the license say about conveying verbatim copies?
wait
expect-answer
quit
EOF

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
echo "cpu: ${cpu:-unknown} ($(nproc) cores), load average: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
echo "impress: $impress"
echo "model: $model"

status=0
XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" \
  xvfb-run -a -s '-screen 0 1600x900x24' "$impress" gui --model "$model" --store "$dir/store" \
  --config-dir "$dir/config" --max-tokens 8 --width 1600 --height 900 --script "$dir/prefill.script" \
  >"$dir/out.txt" 2>&1 || status=$?
if [[ $status -ne 0 ]]; then
  cat "$dir/out.txt" >&2
  echo "gui-prefill-bench: the scripted session failed (exit status $status)" >&2
  exit 1
fi

out="$dir/out.txt"
# The third request's report: how many prefix tokens it computed (prefix minus what it reused).
computed=$(awk '/^answer 3:/ { getline; print; exit }' "$out" |
  sed -nE 's/.* ([0-9]+) of ([0-9]+) prefix tokens reused.*/\2 \1/p; s/.*computed ([0-9]+) tokens.*/\1 0/p' |
  awk '{ print $1 - $2 }')
echo "third request: ${computed:-unknown} prefix tokens computed"
grep -E '^answer [0-9]+:' "$out" | cut -c1-120
grep -E '^frame time|^frame work|^textures:' "$out"
awk '/^frame profile, during prefill/ { on = 1 } on && /^frame profile, / && !/during prefill/ { on = 0 }
     on && !/^frame (time|work)/ { print } /^  ImGui vertices/ && on { on = 0 }' "$out"
