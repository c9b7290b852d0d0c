#!/usr/bin/env bash
# onyx's main job on the bundled example: sets up, builds, and generates text from the
# bundled tiny Llama (random weights, so the text is noise; an Optimum export, which onyx
# decodes with a static KV cache), streaming it, then the run's figures.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
build/onyx generate tests/fixtures/genai/llama-optimum --prompt "The capital of France is" --max-new-tokens 48 "$@"
