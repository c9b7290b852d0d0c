#!/usr/bin/env bash
# Configures and builds onyx (Release) into build/: the library, the `onyx` program, the test
# programs and the Python extension; then installs the Python package into .venv (pip install
# ., which reuses build/ and finds nothing left to compile). Extra arguments go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${ONYX_JOBS:-$(nproc)}
py=$PWD/.venv/bin/python
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DONYX_BUILD_TESTS=ON -DONYX_PYTHON_PACKAGE=ON \
      -DPython_EXECUTABLE="$py" "$@" >/dev/null
ninja -C build -j"$jobs"
echo "build: installing the Python package into .venv"
CMAKE_BUILD_PARALLEL_LEVEL=$jobs "$py" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps .
