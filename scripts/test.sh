#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite: unit tests, the
# ONNX node-test conformance ratchet, and parity against onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
# ctest hides the output of skipped tests: say here why the GPU tests will be skipped.
if [ -x build/tests/onyx_cuda_tests ]; then
  gpu_check=$(build/tests/onyx_cuda_tests --gtest_filter=-* 2>&1) && rc=0 || rc=$?
  [ "$rc" -eq 77 ] && echo "GPU tests: $gpu_check"
fi
ctest --test-dir build --output-on-failure "$@"
