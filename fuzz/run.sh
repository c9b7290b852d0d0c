#!/usr/bin/env bash
# Builds one fuzz target in build-fuzz/ (clang, ASan + UBSan + libFuzzer) and runs it for a
# bounded time on fuzz/corpus/<target>/ (seeded by fuzz/make_corpus.sh when empty).
#   fuzz/run.sh fuzz_load 300
#   fuzz/run.sh fuzz_load 36000 -runs=1000000     (further arguments go to libFuzzer)
# Crash, leak and timeout inputs are written to fuzz/findings/<target>/; the last lines of
# the run say how many executions it made and list what it found. NO_BUILD=1 runs the
# binary already in build-fuzz/ (while another build is running there).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
target=${1:?usage: fuzz/run.sh TARGET SECONDS [LIBFUZZER_ARGS...]}
seconds=${2:?usage: fuzz/run.sh TARGET SECONDS [LIBFUZZER_ARGS...]}
shift 2
case $target in
  fuzz_load) max_len=131072 ;;
  fuzz_chat_template) max_len=8192 ;;
  fuzz_tokenizer) max_len=4096 ;;
  *) echo "unknown target '$target' (fuzz_load, fuzz_chat_template, fuzz_tokenizer)" >&2; exit 2 ;;
esac
build=$root/build-fuzz
if [[ ! -f $build/build.ninja ]]; then
  # As scripts/fuzz_ci.sh configures it (either may make build-fuzz/ first).
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DONYX_CUDA=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DONYX_FUZZ=ON -DONYX_BUILD_TESTS=OFF -DONYX_PYTHON_PACKAGE=OFF
fi
[[ -n ${NO_BUILD:-} ]] || ninja -C "$build" -j"${JOBS:-2}" "$target"
corpus=$root/fuzz/corpus/$target
[[ -n $(ls -A "$corpus" 2>/dev/null) ]] || "$root/fuzz/make_corpus.sh"
findings=$root/fuzz/findings/$target
mkdir -p "$findings"
log=$findings/run.log
# A UBSan report stops the process (-fno-sanitize-recover); print stacks for every report.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
set +e
"$build/fuzz/$target" -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$findings/" "$@" "$corpus" 2>&1 | tee "$log" | grep -E '^#[0-9]+ .*(INITED|DONE|pulse)|ERROR|SUMMARY|Test unit written|stat::' 
rc=${PIPESTATUS[0]}
set -e
echo "== $target: exit $rc; executions: $(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | awk '{print $NF}'); exec/s: $(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | awk '{print $NF}')"
echo "== findings in $findings:"; ls "$findings" | grep -v '^run.log$' || echo "   none"
exit "$rc"
