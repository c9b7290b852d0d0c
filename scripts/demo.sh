#!/usr/bin/env bash
# onyx's main job on the bundled example: sets up, builds, generates the example
# models, and runs the Llama-style decoder with a KV cache, printing its outputs and timing.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
.venv/bin/python tools/gen_models.py --out models
build/onyx info models/llama_layer.onnx
build/onyx run models/llama_layer.onnx --dim batch=1 --dim sequence=16 --dim past_sequence=32 --dim total_sequence=48 --seed 1 --repeat 20 "$@"
