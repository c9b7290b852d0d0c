#!/usr/bin/env bash
# CI's fuzzing step (scripts/test.sh calls it): builds the three fuzz targets in build-fuzz/
# (clang, libFuzzer, ASan + UBSan; only the libraries they link), replays every reproducer in
# tests/fixtures/fuzz/ through its target, then fuzzes each target for ONYX_FUZZ_SECONDS
# (default 60) from the seed corpus (fuzz/make_corpus.sh). Any finding (crash, sanitizer report,
# leak, timeout, out of memory) fails; its input is printed in hex so that the log alone
# reproduces it. ONYX_FUZZ_SECONDS=0 builds and replays only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
seconds=${ONYX_FUZZ_SECONDS:-60}
jobs=${ONYX_JOBS:-$(nproc)}
build=$root/build-fuzz
targets=(fuzz_load fuzz_chat_template fuzz_tokenizer)

start=$(date +%s)
if [[ ! -f $build/build.ninja ]]; then
  # -O1 and line tables only: half the compile time of -O2 -g, and reports still name lines.
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DONYX_CUDA=OFF -DONYX_FUZZ=ON -DONYX_BUILD_TESTS=OFF -DONYX_PYTHON_PACKAGE=OFF >/dev/null
fi
ninja -C "$build" -j"$jobs" "${targets[@]}"
echo "fuzz: built in $(( $(date +%s) - start )) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

# Each reproducer names its target by its prefix (chat_template_*, load_*, tokenizer_*).
failed=0
for f in tests/fixtures/fuzz/*; do
  case $(basename "$f") in
    chat_template_*) t=fuzz_chat_template ;;
    load_*) t=fuzz_load ;;
    tokenizer_*) t=fuzz_tokenizer ;;
    *) continue ;;
  esac
  if ! "$build/fuzz/$t" -timeout=10 -rss_limit_mb=2048 "$f" >"$build/replay.log" 2>&1; then
    echo "fuzz: FAILED: $t on the reproducer $f:"; tail -40 "$build/replay.log"; failed=1
  fi
done
((failed)) && exit 1
echo "fuzz: the reproducers of tests/fixtures/fuzz pass"
((seconds > 0)) || exit 0

[[ -n $(ls -A fuzz/corpus/fuzz_load 2>/dev/null) ]] || fuzz/make_corpus.sh
for t in "${targets[@]}"; do
  rm -rf "fuzz/findings/$t"
  if ! NO_BUILD=1 fuzz/run.sh "$t" "$seconds" >"$build/$t.ci.log" 2>&1; then
    echo "fuzz: FAILED: $t found something:"; tail -60 "$build/$t.ci.log"
    for a in "fuzz/findings/$t"/*; do
      [[ $(basename "$a") == run.log ]] && continue
      echo "fuzz: input $(basename "$a") ($(stat -c %s "$a") bytes), in hex:"; head -c 8192 "$a" | od -An -v -tx1
    done
    failed=1
  else
    grep '^== ' "$build/$t.ci.log" | head -1
  fi
done
((failed)) && exit 1
echo "fuzz: no finding in ${seconds} s per target ($(( $(date +%s) - start )) s in all)"
