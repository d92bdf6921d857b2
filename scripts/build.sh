#!/usr/bin/env bash
# Configures and builds one build tree:
#   scripts/build.sh [DIR] [cmake configure args...] [--target T...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
dir=${1:-build}
shift || true
configure=()
targets=()
while (($#)); do
  if [ "$1" = "--target" ]; then
    shift
    targets=("$@")
    break
  fi
  configure+=("$1")
  shift
done
cmake -S "$IMPRESS_ROOT" -B "$IMPRESS_ROOT/$dir" -G Ninja -DIMPRESS_PYTHON="$IMPRESS_PYTHON" "${configure[@]}" >/dev/null
if ((${#targets[@]})); then
  cmake --build "$IMPRESS_ROOT/$dir" -j "$IMPRESS_JOBS" --target "${targets[@]}"
else
  cmake --build "$IMPRESS_ROOT/$dir" -j "$IMPRESS_JOBS"
fi
