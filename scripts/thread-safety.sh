#!/usr/bin/env bash
# Checks the lock discipline of every production folder (base, engine, store, pipeline, chat, gui,
# app, bench) with Clang's thread-safety analysis: every member marked GUARDED_BY(mu) is touched
# only with mu held, every function marked REQUIRES(mu) is called with it held
# (base/thread-annotations.h, base/mutex.h). Compiles each source with -fsyntax-only (no objects,
# no build directory), in parallel, with the defines and include paths the build gives it; exits
# non-zero on any warning.
#   scripts/thread-safety.sh            # from anywhere; CXX_THREAD_SAFETY=clang++-NN to pick a compiler
#   scripts/thread-safety.sh FILE...    # only these sources (paths from the repository root)
# The CUDA sources (engine/compute/cuda/*.cpp) are checked when the CUDA toolkit's headers are
# found ($CUDA_HOME, else /usr/local/cuda); .cu files are nvcc's and are not checked.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cxx=${CXX_THREAD_SAFETY:-clang++}
if ! command -v "$cxx" >/dev/null; then
  echo "[thread-safety] $cxx not found (install clang)" >&2
  exit 2
fi
pkg_cflags() {  # the compile flags of Debian packages that ship a .pc file
  pkg-config --cflags "$@" 2>/dev/null || {
    echo "[thread-safety] pkg-config finds no $* (bash scripts/setup.sh installs it)" >&2
    exit 2
  }
}
# Defines as CMake sets them: spdlog with fmt as a separate library (its CMake package), imgui
# and stb (libimgui-dev), cpp-httplib's compiled library (its flags must match how it was built).
read -r -a pkg_flags <<<"$(pkg_cflags spdlog imgui cpp-httplib)"
flags=(-std=c++20 -fsyntax-only -march=x86-64-v3 -I. -DFMT_SHARED "${pkg_flags[@]}"
       -DIMPRESS_ASSETS_DIR_DEFAULT='"assets"'
       -Wall -Wextra -Wthread-safety -Wthread-safety-reference -Werror)
avx512=(-mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni)  # *-avx512.cpp, as CMake compiles them
cuda_home=${CUDA_HOME:-/usr/local/cuda}

# Every header's inline code is checked where a source includes it.
shopt -s globstar nullglob
srcs=()
[ $# -gt 0 ] && all=("$@") || all=(base/*.cpp engine/**/*.cpp store/*.cpp pipeline/*.cpp chat/*.cpp gui/*.cpp app/**/*.cpp bench/*.cpp)
for f in "${all[@]}"; do
  case "$f" in
    engine/compute/cuda/cuda-unavailable.cpp) srcs+=("$f") ;;  # the build without CUDA
    engine/compute/cuda/*) [ -f "$cuda_home/include/cuda_runtime_api.h" ] && srcs+=("$f") ;;
    *) srcs+=("$f") ;;
  esac
done
if [ ! -f "$cuda_home/include/cuda_runtime_api.h" ]; then
  echo "[thread-safety] no CUDA headers under $cuda_home: engine/compute/cuda is checked without its CUDA sources" >&2
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Arrays do not cross into the xargs children: they read them back from NUL-separated files.
printf '%s\0' "${flags[@]}" >"$tmp/flags"
printf '%s\0' "${avx512[@]}" >"$tmp/avx512"
export cxx cuda_home
printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -I{} bash -c '
  mapfile -d "" -t flags <"$1"; mapfile -d "" -t avx512 <"$2"; f=$3; extra=()
  case "$f" in
    *-avx512.cpp) extra=("${avx512[@]}") ;;
    engine/compute/cuda/cuda-unavailable.cpp) ;;
    engine/compute/cuda/*) extra=(-DIMPRESS_HAVE_CUDA=1 -isystem "$cuda_home/include") ;;
  esac
  "$cxx" "${flags[@]}" "${extra[@]}" "$f" 2>&1 || echo "[thread-safety] FAILED: $f"' _ "$tmp/flags" "$tmp/avx512" {} >"$tmp/log"
if [ -s "$tmp/log" ]; then
  cat "$tmp/log" >&2
  echo "[thread-safety] lock discipline violated (see above)" >&2
  exit 1
fi
echo "[thread-safety] ${#srcs[@]} files clean"
