#!/usr/bin/env bash
# The CUDA backend's checks, on any machine with an NVIDIA GPU, the CUDA toolkit (nvcc, cuBLAS)
# and the project's build dependencies (scripts/setup.sh):
#   1. a Release build with the CUDA backend (IMPRESS_CUDA=ON) in build-cuda;
#   2. the CUDA parity tests: kernels against their CPU emulation, the CUDA backend against the
#      CPU backend (GEMM, attention with importance, a whole forward pass);
#   3. `impress bench engine --backend cuda`: prefill and decode speed on random weights of
#      SmolLM2's and Llama-2-7B's shapes (f16 and fp32 GEMM), and on the default model file;
#   4. `impress bench pipeline --backend cuda`: the five systems on a document held on the SSD.
# Every step's output goes to its own file in the results folder, with a summary (summary.txt)
# and the benchmarks' JSON; the script exits non-zero if a test or benchmark failed.
#
#   scripts/gpu-check.sh [RESULTS_DIR]     # default: build-cuda/gpu-check-<UTC time>
# Environment: GPU_CHECK_BUILD (build directory, default build-cuda), GPU_CHECK_NO_BUILD=1 (use
# that build as it is), IMPRESS_DEFAULT_MODEL (the model the file-based steps use; they are
# skipped, saying so, when it is absent), GPU_CHECK_QUESTIONS (pipeline benchmark, default 20),
# GPU_CHECK_MAX_STEP_S (caps every step's time limit, for a machine lent for a few minutes).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/env.sh"
cd "$IMPRESS_ROOT"

build="$IMPRESS_ROOT/${GPU_CHECK_BUILD:-build-cuda}"
out=${1:-$build/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
: >"$summary"
n_failed=0

say() { echo "$*" | tee -a "$summary"; }

# step NAME SECONDS CMD...: runs CMD with a time limit; its output goes to RESULTS/NAME.log.
step() {
  local name=$1 secs=$2
  shift 2
  local t0 rc
  if [ -n "${GPU_CHECK_MAX_STEP_S:-}" ] && ((secs > GPU_CHECK_MAX_STEP_S)); then secs=$GPU_CHECK_MAX_STEP_S; fi
  t0=$(date +%s)
  echo "=== $name"
  timeout "$secs" "$@" >"$out/$name.log" 2>&1
  rc=$?
  tail -n 25 "$out/$name.log"
  if ((rc == 0)); then
    say "ok     $name ($(($(date +%s) - t0)) s)"
  else
    say "FAILED $name (exit $rc$( ((rc == 124)) && echo ", over ${secs} s"); $out/$name.log)"
    n_failed=$((n_failed + 1))
  fi
}

# bench NAME SECONDS ARGS...: an `impress bench` run with --json; the JSON lands in NAME.json.
bench() {
  local name=$1 secs=$2
  shift 2
  step "$name" "$secs" bash -c '"$@" --json >"$0"' "$out/$name.json" "$build/bin/impress" bench "$@"
}

say "gpu-check $(date -u +%FT%TZ), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git'), results in $out"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1; then
  say "no NVIDIA GPU here (nvidia-smi: $(head -c 200 "$out/gpu.txt"))"
  exit 2
fi
say "GPU: $(cat "$out/gpu.txt")"
say "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores"

if [ "${GPU_CHECK_NO_BUILD:-0}" != 1 ]; then
  step build 1800 bash -c "cmake -S '$IMPRESS_ROOT' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DIMPRESS_CUDA=ON -DIMPRESS_PYTHON='$IMPRESS_PYTHON' && \
    cmake --build '$build' -j '$IMPRESS_JOBS' --target impress cuda-backend-test kernel-emulation-test"
  if ((n_failed)); then
    say "the CUDA build failed; nothing else ran"
    exit 1
  fi
fi

export IMPRESS_SOURCE_DIR="$IMPRESS_ROOT"
step kernel-emulation-test 300 "$build/bin/kernel-emulation-test"
step cuda-backend-test 600 "$build/bin/cuda-backend-test"

bench engine-smollm2-shapes-f16 300 engine --backend cuda --shape smollm2
bench engine-smollm2-shapes-fp32 300 engine --backend cuda --shape smollm2 --gemm fp32 --repeats 2
bench engine-llama2-7b-shapes-f16 600 engine --backend cuda --shape llama2-7b --short 512 --long 2048 \
  --decode 32 --repeats 2
if [ -f "$IMPRESS_DEFAULT_MODEL" ]; then
  bench engine-model-file-f16 300 engine --backend cuda --model "$IMPRESS_DEFAULT_MODEL"
  store=$(mktemp -d "${TMPDIR:-/tmp}/impress-gpu-store.XXXXXX")
  bench pipeline 1200 pipeline --backend cuda --n-questions "${GPU_CHECK_QUESTIONS:-20}" --store "$store" \
    --model "$IMPRESS_DEFAULT_MODEL"
  rm -rf "$store"
else
  say "skipped engine-model-file-f16 and pipeline: no model at $IMPRESS_DEFAULT_MODEL (bash scripts/setup.sh)"
fi

if ((n_failed)); then
  say "$n_failed step(s) failed; results in $out"
  exit 1
fi
say "all steps passed; results in $out"
