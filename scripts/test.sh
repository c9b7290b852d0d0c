#!/usr/bin/env bash
# Sets up (if needed), builds, and runs the whole test suite: unit tests, the
# ONNX node-test conformance ratchet, and parity against onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
ctest --test-dir build --output-on-failure "$@"
