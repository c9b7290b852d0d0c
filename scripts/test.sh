#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite: unit tests, the
# ONNX node-test conformance ratchet, parity against onnxruntime, and bounded fuzzing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# ONYX_CUDA=ON, OFF or AUTO (CMake's default: build the CUDA backend where nvcc is found) picks
# whether the CUDA backend and its tests are built; .ci/run sets OFF (no GPU there to run them).
cuda_args=()
[[ -n ${ONYX_CUDA:-} ]] && cuda_args=(-DONYX_CUDA="$ONYX_CUDA")
scripts/build.sh "${cuda_args[@]}"
# ctest hides the output of skipped tests: say here why the GPU tests will be skipped.
if [[ ${ONYX_CUDA:-} == OFF ]]; then
  echo "GPU tests: not built (ONYX_CUDA=OFF)"
elif [ -x build/tests/onyx_cuda_tests ]; then
  gpu_check=$(build/tests/onyx_cuda_tests --gtest_filter=-* 2>&1) && rc=0 || rc=$?
  [ "$rc" -eq 77 ] && echo "GPU tests: $gpu_check"
fi
ctest --test-dir build --output-on-failure "$@"
# The fuzz targets (fuzz/README.md): built with clang under ASan and UBSan, the reproducers of
# tests/fixtures/fuzz replayed, then each target fuzzed for ONYX_FUZZ_SECONDS (60). Skipped when
# the arguments pick tests for ctest.
if (($# == 0)); then
  scripts/fuzz_ci.sh
else
  echo "fuzz: skipped (ctest arguments given)"
fi
