#!/usr/bin/env bash
# The CUDA backend's checks on a machine with an NVIDIA GPU, in one go (~10 minutes): parity
# tests against the CPU backend, the GPU engine benchmark, and `impress bench pipeline` on the GPU.
#
# A device machine (the `device` tool) is a bare image: CUDA 13 + cuBLAS, but none of this
# project's Debian libraries, no network, and at most 64 MiB carried per call. So the work is
# split:
#   here (no GPU needed):
#     bash scripts/gpu-check.sh pack     # Release build with CUDA (build-cuda), then the binaries
#                                        # and the shared libraries they need -> .gpu-pack/ (~30 MB),
#                                        # and the default model cut into parts -> .gpu-model/
#   on the GPU machine (device run, carry [".gpu-pack"]):
#     bash scripts/gpu-check.sh run      # tests + benchmarks, numbers on stdout and in $OUT
#   the pipeline benchmark needs the 98 MB model, more than one call carries: stage it first with
#   one call per part, the machine kept warm between them (files outside the repo survive):
#     bash scripts/gpu-check.sh stage .gpu-model/part-00     (carry [".gpu-model/part-00", ".gpu-model/sha256"])
#     bash scripts/gpu-check.sh stage .gpu-model/part-01     (carry [".gpu-model/part-01", ".gpu-model/sha256"])
#   Without the model, `run` still does everything else (random weights of SmolLM2's and
#   Llama-2-7B's shapes for the engine benchmark; the SmolLM2 tests skip).
# On a machine that has the project's libraries, `run` without .gpu-pack builds in build-gpu.
#
# Environment: GPU_CHECK_SECONDS (default 540) bounds the whole `run`; each step has its own
# timeout inside it, and a step that would not fit is skipped with a line saying so.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root"
mode=${1:-run}
model_name=SmolLM2-135M-Instruct.Q4_1.gguf

exclude() {  # keep generated folders out of git
  local f="$root/.git/info/exclude"
  [ -d "$root/.git" ] && ! grep -qx "/$1/" "$f" 2>/dev/null && echo "/$1/" >>"$f"
  return 0
}

case "$mode" in
pack)
  source "$here/env.sh"
  set -e
  build=${GPU_CHECK_BUILD:-build-cuda}
  cmake -S "$root" -B "$root/$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPRESS_CUDA=ON \
    -DIMPRESS_PYTHON="$IMPRESS_PYTHON" >/dev/null
  cmake --build "$root/$build" -j "$IMPRESS_JOBS" --target cuda-backend-test kernel-emulation-test \
    impress-cuda-bench impress
  rm -rf .gpu-pack && mkdir -p .gpu-pack/bin .gpu-pack/lib && exclude .gpu-pack
  for b in cuda-backend-test kernel-emulation-test impress-cuda-bench impress; do
    cp "$root/$build/bin/$b" .gpu-pack/bin/
    strip --strip-unneeded .gpu-pack/bin/$b
  done
  # Shared libraries the image lacks: everything but glibc, the C++ runtime and CUDA's own.
  ldd .gpu-pack/bin/* | awk '/=> \// {print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
      libcuda.so*|libcublas*|libcudart*|libnvidia*) ;;
      *) cp -L "$lib" .gpu-pack/lib/ ;;
    esac
  done
  echo "$(git -C "$root" rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)" >.gpu-pack/built
  du -sh .gpu-pack
  model="${IMPRESS_DEFAULT_MODEL}"
  if [ -f "$model" ]; then
    rm -rf .gpu-model && mkdir -p .gpu-model && exclude .gpu-model
    split -b 50000000 -d -a 2 "$model" .gpu-model/part-
    sha256sum "$model" | awk '{print $1}' >.gpu-model/sha256
    ls -la .gpu-model
  fi
  echo "packed; on the GPU machine run: bash scripts/gpu-check.sh run (carry .gpu-pack)"
  ;;

stage)
  part=${2:?usage: gpu-check.sh stage .gpu-model/part-NN}
  dest="$HOME/.cache/impress/models"
  mkdir -p "$dest"
  n=$(basename "$part" | sed 's/part-//')
  cp "$part" "$dest/$model_name.part-$n"
  ls "$dest"/"$model_name".part-* 2>/dev/null
  cat "$dest"/"$model_name".part-* >"$dest/$model_name.tmp"
  if [ -f .gpu-model/sha256 ] && [ "$(sha256sum "$dest/$model_name.tmp" | awk '{print $1}')" = "$(cat .gpu-model/sha256)" ]; then
    mv "$dest/$model_name.tmp" "$dest/$model_name"
    echo "model complete: $dest/$model_name"
  else
    rm -f "$dest/$model_name.tmp"
    echo "model not complete yet (stage the other parts)"
  fi
  ;;

run)
  start=$(date +%s)
  budget=${GPU_CHECK_SECONDS:-540}
  out=${OUT:-/tmp/gpu-check-out}
  mkdir -p "$out"
  log="$out/gpu-check.log"
  : >"$log"
  say() { echo "$*" | tee -a "$log"; }
  left() { echo $((budget - ($(date +%s) - start))); }
  # step NAME SECONDS CMD...: runs with a timeout, unless less than SECONDS are left.
  step() {
    local name=$1 secs=$2
    shift 2
    if [ "$(left)" -lt "$secs" ]; then
      say "=== $name: SKIPPED (only $(left) s of the budget left, needs $secs)"
      return 0
    fi
    say "=== $name"
    local t0=$(date +%s)
    timeout "$secs" "$@" 2>&1 | tee -a "$log"
    local rc=${PIPESTATUS[0]}
    say "=== $name: exit $rc in $(($(date +%s) - t0)) s"
    return 0
  }
  say "gpu-check $(date -u +%FT%TZ) in $root"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | tee -a "$log"
  export IMPRESS_SOURCE_DIR="$root" IMPRESS_ASSETS_DIR="$root/assets"
  export IMPRESS_DEFAULT_MODEL="${IMPRESS_DEFAULT_MODEL:-$HOME/.cache/impress/models/$model_name}"
  if [ -d .gpu-pack/bin ]; then
    bin="$root/.gpu-pack/bin"
    cuda_libs=""
    for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(ls -d /usr/local/cuda-*/lib64 2>/dev/null); do
      [ -e "$d/libcublas.so.13" ] && cuda_libs="$cuda_libs:$d"
    done
    if [ -z "$cuda_libs" ]; then  # pip wheels (nvidia-cublas) of the image's Python
      d=$(find / -xdev -name 'libcublas.so.13' -printf '%h\n' 2>/dev/null | head -1)
      [ -n "$d" ] && cuda_libs=":$d"
    fi
    export LD_LIBRARY_PATH="$root/.gpu-pack/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    say "using the packed binaries ($(cat .gpu-pack/built 2>/dev/null)); cuBLAS from ${cuda_libs#:}"
    ldd "$bin/cuda-backend-test" | grep "not found" | tee -a "$log"
  else
    say "no .gpu-pack: building here (needs the project's libraries)"
    step build 420 bash -c "cmake -S '$root' -B '$root/build-gpu' -G Ninja -DCMAKE_BUILD_TYPE=Release -DIMPRESS_CUDA=ON >/dev/null && cmake --build '$root/build-gpu' -j \$(nproc) --target cuda-backend-test kernel-emulation-test impress-cuda-bench impress"
    bin="$root/build-gpu/bin"
  fi
  [ -f "$IMPRESS_DEFAULT_MODEL" ] && say "model: $IMPRESS_DEFAULT_MODEL" || say "model: absent (SmolLM2 tests skip; pipeline benchmark skipped)"

  step "kernel emulation test" 60 "$bin/kernel-emulation-test" --gtest_brief=1
  step "CUDA backend parity tests" 240 "$bin/cuda-backend-test" --gtest_brief=0
  step "engine bench, SmolLM2 shapes, f16 GEMM" 90 "$bin/impress-cuda-bench" --shape smollm2 --json
  [ -f "$IMPRESS_DEFAULT_MODEL" ] &&
    step "engine bench, SmolLM2 file, f16 GEMM" 90 "$bin/impress-cuda-bench" --model "$IMPRESS_DEFAULT_MODEL" --json
  step "engine bench, SmolLM2 shapes, fp32 GEMM" 60 "$bin/impress-cuda-bench" --shape smollm2 --gemm fp32 --repeats 2
  step "engine bench, Llama-2-7B shapes, f16 GEMM" 150 "$bin/impress-cuda-bench" --shape llama2-7b --short 512 \
    --long 2048 --decode 32 --repeats 2 --json
  if [ -f "$IMPRESS_DEFAULT_MODEL" ]; then
    store=$(mktemp -d /tmp/impress-gpu-store.XXXXXX)
    step "pipeline bench (five systems, document on the SSD), --backend cuda" 200 \
      "$bin/impress" bench pipeline --backend cuda --n-questions 20 --store "$store" --model "$IMPRESS_DEFAULT_MODEL"
    rm -rf "$store"
  else
    say "=== pipeline bench: SKIPPED (no model; stage it with 'gpu-check.sh stage', see the top of this script)"
  fi
  say "=== done in $(($(date +%s) - start)) s; log: $log"
  ;;

*)
  echo "usage: gpu-check.sh pack|stage PART|run" >&2
  exit 2
  ;;
esac
