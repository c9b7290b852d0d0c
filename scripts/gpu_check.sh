#!/usr/bin/env bash
# On the GPU machine, over gpu/ as scripts/gpu_stage.sh and scripts/gpu_trim.sh leave it (as
# gpu/check.sh): the whole CUDA kernel table (but the two-GPU collectives), compute-sanitizer
# memcheck over the tests ONYX_MEMCHECK_FILTER picks (default: the products and attention), and
# gpu_fused_check.py over the fixtures and gpu/exp's exports on cuda:0. Logs go to $OUT (or gpu/out).
set -u
here=$(cd "$(dirname "$0")" && pwd); out=${OUT:-$here/out}; mkdir -p "$out"
for z in "$here"/bin/*.xz "$here"/py/libs/*.xz; do [ -e "$z" ] && unxz -f "$z"; done
for z in "$here"/bin/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x "$here"/bin/*
export LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
for z in "$here"/lib/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
export ONYX_GENAI_FIXTURES="$here/../tests/fixtures/genai" ONYX_GENAI_PRECISION_DIR="$here/genai16"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
(bash "$here/build_python.sh" > "$out/build_python.log" 2>&1; echo "python build exit $?" >> "$out/build_python.log") &
t0=$(date +%s)
timeout 240 "$here/bin/onyx_cuda_tests" --gtest_filter='-CollectivesGpu*' > "$out/cuda_tests.log" 2>&1
echo "== onyx_cuda_tests: exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "^\[  FAILED  \]|cuda kernels:|PASSED" "$out/cuda_tests.log" | tail -30
t0=$(date +%s)
timeout 200 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 "$here/bin/onyx_cuda_tests" \
  --gtest_filter="${ONYX_MEMCHECK_FILTER:-*Linear*:*Attention*}" > "$out/memcheck.log" 2>&1
echo "== memcheck (${ONYX_MEMCHECK_FILTER:-*Linear*:*Attention*}): exit $? ($(( $(date +%s) - t0 )) s)"
grep -E "ERROR SUMMARY|PASSED|FAILED|cuda kernels:" "$out/memcheck.log" | tail -5
wait; tail -1 "$out/build_python.log"
export PYTHONPATH="$here/pylib:${PYTHONPATH:-}"
t0=$(date +%s)
exports=(); [ -d "$here/exp" ] && exports=("$here"/exp/*)  # export_hf_decoders.py's folders, where staged
timeout 200 python3 "$here/gpu_fused_check.py" "$here/.." "${exports[@]}" > "$out/fused_check.log" 2>&1
echo "== gpu_fused_check.py: exit $? ($(( $(date +%s) - t0 )) s)"
tail -80 "$out/fused_check.log"
