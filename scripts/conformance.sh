#!/usr/bin/env bash
# Runs the ONNX backend tests of the onnx wheel (the node set, then the simple, pytorch-operator
# and pytorch-converted sets) and rewrites docs/conformance.md. Arguments go to the runner
# (e.g. --filter 'test_gather').
set -euo pipefail
cd "$(dirname "$0")/.."
data=$(.venv/bin/python -c "import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), 'backend/test/data'))")
build/tests/onyx_conformance --data "$data/node" --data "$data/simple" --data "$data/pytorch-operator" \
  --data "$data/pytorch-converted" --skips tests/conformance/skips.txt \
  --baseline tests/conformance/baseline.txt --report docs/conformance.md "$@"
