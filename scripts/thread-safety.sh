#!/usr/bin/env bash
# Checks the lock discipline of the store and base with Clang's thread-safety analysis: every
# member marked GUARDED_BY(mu) is touched only with mu held, every function marked REQUIRES(mu)
# is called with it held (base/thread-annotations.h, base/mutex.h). Compiles each source with
# -fsyntax-only (no objects, no build directory), in parallel; exits non-zero on any warning.
#   scripts/thread-safety.sh            # from anywhere; CXX=clang++-NN to pick a compiler
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cxx=${CXX_THREAD_SAFETY:-clang++}
if ! command -v "$cxx" >/dev/null; then
  echo "[thread-safety] $cxx not found (install clang)" >&2
  exit 2
fi
# The defines the real build gets from its spdlog package (fmt as a separate library).
flags=(-std=c++20 -fsyntax-only -I. -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DFMT_SHARED -DSPDLOG_SHARED_LIB
       -Wall -Wextra -Wthread-safety -Wthread-safety-reference -Werror)
# Every header's inline code is checked where a source includes it.
srcs=(store/*.cpp base/*.cpp)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "${srcs[@]}" |
  xargs -P "$(nproc)" -I{} sh -c '"$0" "$@" {} 2>&1 || echo "[thread-safety] FAILED: {}"' "$cxx" "${flags[@]}" >"$log"
if [ -s "$log" ]; then
  cat "$log" >&2
  echo "[thread-safety] lock discipline violated (see above)" >&2
  exit 1
fi
echo "[thread-safety] ${#srcs[@]} files clean"
