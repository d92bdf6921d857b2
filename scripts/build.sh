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
# ccache (installed by setup.sh) keeps compiled objects under the cache directory, so a rebuild
# of unchanged sources (a second clone, a rerun) is quick; paths are made relative to the tree.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$IMPRESS_CACHE_DIR/ccache}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$IMPRESS_ROOT}"
  export CCACHE_NOHASHDIR=1
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$IMPRESS_ROOT" -B "$IMPRESS_ROOT/$dir" -G Ninja -DIMPRESS_PYTHON="$IMPRESS_PYTHON" "${launcher[@]}" "${configure[@]}" >/dev/null
if ((${#targets[@]})); then
  cmake --build "$IMPRESS_ROOT/$dir" -j "$IMPRESS_JOBS" --target "${targets[@]}"
else
  cmake --build "$IMPRESS_ROOT/$dir" -j "$IMPRESS_JOBS"
fi
