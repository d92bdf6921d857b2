#!/usr/bin/env bash
# Configures and builds one build tree: scripts/build.sh [DIR] [extra cmake args...]
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
dir=${1:-build}
shift || true
cmake -S "$IMPRESS_ROOT" -B "$IMPRESS_ROOT/$dir" -G Ninja -DIMPRESS_PYTHON="$IMPRESS_PYTHON" "$@" >/dev/null
cmake --build "$IMPRESS_ROOT/$dir" -j "$IMPRESS_JOBS"
