#!/usr/bin/env bash
# The concurrency tests under ThreadSanitizer: builds onyx_unit_tests in build-tsan/ (clang,
# -DONYX_TSAN=ON, CPU only) and runs the tests whose threads share a session, a chat template or
# a tokenizer. Any race report fails (halt_on_error). Extra arguments replace the test filter.
#   scripts/tsan.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-tsan
jobs=${ONYX_JOBS:-$(nproc)}
if [[ ! -f $build/build.ninja ]]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" -DONYX_CUDA=OFF -DONYX_TSAN=ON \
    -DONYX_BUILD_TESTS=ON -DONYX_PYTHON_PACKAGE=OFF >/dev/null
fi
ninja -C "$build" -j"$jobs" onyx_unit_tests
filter=${1:-'Limits.*:ChatTemplate.RendersOnManyThreadsAtOnce:Tokenizer.SharedAcrossThreads'}
# OpenBLAS's own threads are not instrumented: one thread keeps its work on the caller's.
export OPENBLAS_NUM_THREADS=1
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
"$build/tests/onyx_unit_tests" --gtest_filter="$filter"
echo "tsan: no data race in $filter"
