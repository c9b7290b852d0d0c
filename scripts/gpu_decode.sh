#!/usr/bin/env bash
# The decode-speed run, on the GPU machine over the folder staged by scripts/gpu_stage.sh (as
# gpu/decode.sh): the CUDA kernel tests (ONYX_TEST_FILTER picks some), the few-row product
# microbenchmark (bench/cuda_bench.cpp), then bench/llama_decode_gpu.py with this script's
# arguments (--ort: onnxruntime-gpu too, once scripts/ort_gpu_receive.sh has put it in /tmp). Logs go to $OUT (or gpu/out).
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
# NCCL for the tensor-parallel tests (test_collectives_gpu.cpp reads ONYX_NCCL_LIBRARY): PyTorch's
# copy, the image's only one; never NVLink multicast.
export NCCL_NVLS_ENABLE=0
if [ -z "${ONYX_NCCL_LIBRARY:-}" ]; then
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  if [ -n "$nccl" ] && [ -e "$nccl" ]; then export ONYX_NCCL_LIBRARY=$nccl; fi
fi
for z in "$here"/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"; done
# scripts/gpu_trim.sh's xz-compressed binaries and libraries
for z in "$here"/bin/*.xz "$here"/py/libs/*.xz; do [ -e "$z" ] && unxz -f "$z" && chmod +x "${z%.xz}"; done
for z in "$here"/lib/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
bash "$here/build_python.sh" > "$out/build_python.log" 2>&1 || { echo "the Python package did not build:"; tail -20 "$out/build_python.log"; }
export PYTHONPATH="$here/pylib:${PYTHONPATH:-}"
# onnxruntime-gpu for --ort, where scripts/ort_gpu_receive.sh has unpacked it on this machine
# (ahead of the image's CPU-only onnxruntime).
[ -d /tmp/ortgpu/site/onnxruntime ] && export PYTHONPATH="$here/pylib:/tmp/ortgpu/site:${PYTHONPATH#$here/pylib:}"
export ONYX_GENAI_FIXTURES="$here/../tests/fixtures/genai" ONYX_GENAI_PRECISION_DIR="$here/genai16"
echo "== CUDA kernel tests"
timeout 420 "$here/bin/onyx_cuda_tests" ${ONYX_TEST_FILTER:+--gtest_filter=$ONYX_TEST_FILTER} > "$out/cuda_tests.log" 2>&1
echo "exit $?"
grep -E "^\[  FAILED  \]|cuda kernels:" "$out/cuda_tests.log" | tail -30
if [ -z "${ONYX_SKIP_MICRO:-}" ]; then
  echo "== few-row products"
  timeout 240 "$here/bin/onyx_cuda_bench" > "$out/cuda_bench.log" 2>&1
  echo "exit $?"
  tail -28 "$out/cuda_bench.log"
fi
echo "== decode"
cd "$here" && PYTHONUNBUFFERED=1 timeout 1200 python3 llama_decode_gpu.py "$@" 2>&1 | tee "$out/decode.log"
