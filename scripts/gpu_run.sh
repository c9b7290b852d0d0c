#!/usr/bin/env bash
# The GPU suite, run on the GPU machine over the folder staged by scripts/gpu_stage.sh:
# CUDA kernels against the CPU reference (every dtype), whole sessions, the generated
# models on cuda:0 against the CPU, compute-sanitizer, and the benchmarks. Writes
# gpu-results.md (the summary) and one log per part into $OUT.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
# NCCL for the tensor-parallel tests (test_collectives_gpu.cpp reads ONYX_NCCL_LIBRARY): PyTorch's
# copy, the image's only one; never NVLink multicast.
export NCCL_NVLS_ENABLE=0
if [ -z "${ONYX_NCCL_LIBRARY:-}" ]; then
  nccl=$(python3 -c "import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], 'lib', 'libnccl.so.2'))" 2>/dev/null)
  if [ -n "$nccl" ] && [ -e "$nccl" ]; then export ONYX_NCCL_LIBRARY=$nccl; fi
fi
bin=$here/bin
export ONYX_GENAI_FIXTURES="$here/../tests/fixtures/genai" ONYX_GENAI_PRECISION_DIR="$here/genai16"
for z in "$bin"/*.gz; do [ -e "$z" ] && gunzip -f "$z" && chmod +x "${z%.gz}"; done
for z in "$here"/lib/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
res=$out/gpu-results.md
fails=0
note() { echo "$*" | tee -a "$res"; }
part() { echo; echo "== $*"; }
# A figure from the JSON that `onyx run --json` prints: json_get FILE runs.median_ms
json_get() { python3 -c "import json,sys
v=json.load(open(sys.argv[1]))
for k in sys.argv[2].split('.'): v=v[k]
print(f'{v:.3f}' if isinstance(v, float) else v)" "$1" "$2" 2>/dev/null || echo "?"; }

{
  echo "# GPU suite results"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "- commit: $(cat "$here/COMMIT" | tr '\n' ' ')"
  echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
  echo "- suite: scripts/gpu_stage.sh here, then gpu/run.sh on the GPU machine"
  echo
} > "$res"

part "CUDA kernels against the CPU reference"
timeout 300 "$bin/onyx_cuda_tests" > "$out/cuda_tests.log" 2>&1
rc=$?
summary=$(grep -E "cuda kernels:|PASSED|FAILED TEST" "$out/cuda_tests.log" | tail -3 | tr '\n' ' ')
note "- CUDA kernels and GPU sessions (onyx_cuda_tests): exit $rc; $summary"
[ $rc -eq 0 ] || { fails=$((fails+1)); grep -E "^\[  FAILED  \]" "$out/cuda_tests.log" | head -40 | sed 's/^/    /' | tee -a "$res"; }

part "generated models: cuda:0 against cpu"
: > "$out/models.log"
for case_dir in "$here"/inputs/*; do
  case=$(basename "$case_dir"); model=${case%%.*}
  args=(); for f in "$case_dir"/*.npy; do n=$(basename "$f" .npy); args+=(--input "$n=$f"); done
  for dev in cpu cuda:0; do
    d=${dev/:/}
    extra=(); [ "$dev" = cpu ] || extra=(--no-cpu-fallback)
    log=$out/run/$case.$d.json; mkdir -p "$out/run"
    timeout 120 "$bin/onyx" run "$here/models/$model.onnx" "${args[@]}" --device "$dev" "${extra[@]}" \
      --save-outputs "$out/run/$case/$d" --repeat 20 --json > "$log" 2> "$log.err" || echo "onyx run $case on $dev failed: $(tail -2 "$log.err")" >> "$out/timings.txt"
    cat "$log" "$log.err" >> "$out/models.log"
    echo "    $case $dev: median $(json_get "$log" runs.median_ms) ms, min $(json_get "$log" runs.min_ms) ms (20 runs)" >> "$out/timings.txt"
  done
  python3 "$here/compare_npy.py" "$out/run/$case/cuda0" "$out/run/$case/cpu" --tol 1e-4 --label "$case" >> "$out/compare.txt" 2>&1 || fails=$((fails+1))
done
note "- models, cuda:0 vs cpu (float32, max relative difference, tolerance 1e-4, no CPU fallback allowed):"
sed 's/^/    /' "$out/compare.txt" | tee -a "$res"
note "- step latency (onyx run --repeat 20; median includes copying inputs in and outputs out):"
tee -a "$res" < "$out/timings.txt"

part "generation: cuda:0 against cpu"
# The fixtures are the repository's (gpu/ sits in the checkout's root).
timeout 400 python3 "$here/gpu_generate_check.py" "$bin/onyx" "$here/../tests/fixtures/genai" > "$out/generate.log" 2>&1
rc=$?
note "- onyx generate on the genai fixtures (greedy, 40 new tokens), cuda:0 captured and eager against cpu: exit $rc"
sed 's/^/    /' "$out/generate.log" | tee -a "$res"
[ $rc -eq 0 ] || fails=$((fails+1))

part "pipelines on cuda:0"
timeout 400 python3 "$here/gpu_pipeline_check.py" "$bin/onyx" "$here/../tests/fixtures/seq2seq" \
  "$here/../tests/fixtures/speech" "$here/../tests/fixtures/vision" > "$out/pipeline.log" 2>&1
rc=$?
note "- onyx generate on the seq2seq fixtures (T5 split and merged, BART; greedy), the speech fixture (Whisper: its clips, languages given and detected, translation) and the vision fixture (LLaVA: one image, two, none) on cuda:0 against transformers' tokens, every component on cuda:0 by the memory report, a budget below the weights refused at load: exit $rc"
sed 's/^/    /' "$out/pipeline.log" | tee -a "$res"
[ $rc -eq 0 ] || fails=$((fails+1))

part "onyx serve on cuda:0"
timeout 400 python3 "$here/gpu_serve_check.py" --onyx "$bin/onyx" --folder "$ONYX_GENAI_FIXTURES/llama-optimum" \
  --folder "$ONYX_GENAI_FIXTURES/qwen2-builder-fp32" --rounds 3 --vision "$here/../tests/fixtures/vision/llava-genai" \
  > "$out/serve.log" 2>&1
rc=$?
note "- onyx serve, --capture require: 64 concurrent streams (greedy, seeded sampling, stop strings), 3 rounds, each against its answer alone; chats with images on the vision fixture against onyx generate --image: exit $rc"
grep -E "rounds of|differ|FAIL|vision" "$out/serve.log" | sed 's/^/    /' | tee -a "$res"
[ $rc -eq 0 ] || fails=$((fails+1))

part "the Python package on cuda:0"
if bash "$here/build_python.sh" > "$out/python_build.log" 2>&1; then
  PYTHONPATH="$here/pylib" timeout 300 python3 "$here/gpu_python_check.py" "$here/../tests/fixtures/genai" > "$out/python.log" 2>&1
  rc=$?
else
  rc=$?; tail -20 "$out/python_build.log" > "$out/python.log"
fi
note "- Python package (built there for its Python; DLPack with torch, IO binding, captured replays, onyx.genai): exit $rc"
sed 's/^/    /' "$out/python.log" | tee -a "$res"
[ $rc -eq 0 ] || fails=$((fails+1))

part "a device that does not exist"
msg=$("$bin/onyx" run "$here/models/mlp.onnx" --device cuda:1 2>&1); rc=$?
note "- onyx run --device cuda:1: exit $rc: $msg"
[ $rc -eq 1 ] || fails=$((fails+1))

part "compute-sanitizer memcheck"
if command -v compute-sanitizer >/dev/null; then
  # NCCL's group set-up (the collectives tests) asks cudaFuncGetAttributes of kernels it was not
  # built for and takes the error as an answer: 20 such API errors, none of them onyx's calls (which
  # check their own status) and none a memory error. So API errors are not reported here.
  ONYX_STRESS_STEPS=300 timeout 420 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    "$bin/onyx_cuda_tests" > "$out/memcheck_tests.log" 2>&1
  rc=$?
  note "- memcheck, onyx_cuda_tests (stress tests shortened to 300 steps): exit $rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck_tests.log" | tail -1)"
  [ $rc -eq 0 ] || fails=$((fails+1))
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/onyx" generate \
    "$ONYX_GENAI_FIXTURES/llama-builder-int4" --prompt "the quick brown fox" --max-new-tokens 16 --device cuda:0 \
    --capture require > "$out/memcheck_generate.log" 2>&1
  rc=$?
  note "- memcheck, onyx generate (int4 builder fixture, 16 tokens, captured) on cuda:0: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck_generate.log" | tail -1)"
  [ $rc -eq 0 ] || fails=$((fails+1))
  llama=(); for f in "$here"/inputs/llama_layer.decode/*.npy; do llama+=(--input "$(basename "$f" .npy)=$f"); done
  timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$bin/onyx" run "$here/models/llama_layer.onnx" \
    "${llama[@]}" --device cuda:0 > "$out/memcheck_llama.log" 2>&1
  rc=$?
  note "- memcheck, onyx run llama_layer on cuda:0: exit $rc; $(grep -E 'ERROR SUMMARY' "$out/memcheck_llama.log" | tail -1)"
  [ $rc -eq 0 ] || fails=$((fails+1))
else
  note "- compute-sanitizer: not found on this machine"
fi

part "capture under compute-sanitizer"
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck initcheck synccheck; do
    ONYX_STRESS_STEPS=300 timeout 240 compute-sanitizer --tool $tool --error-exitcode 9 "$bin/onyx_cuda_tests" \
      --gtest_filter='Capture.Seed000*:Capture.Interleaved*:Fixtures/GenerateGpu.*' > "$out/capture_$tool.log" 2>&1
    rc=$?
    note "- $tool on capture tests (seed 000 sequence, interleaved stress and batched generation, shortened to 300 steps): exit $rc; $(grep -E 'ERROR SUMMARY' "$out/capture_$tool.log" | tail -1)"
    [ $rc -eq 0 ] || fails=$((fails+1))
  done
fi

part "replay against eager, and where the outputs go"
note "- decoder_large decode step (1 token over a past of 127), onyx run --repeat 100 --json, median ms. host: feeds"
note "  from the host, every output to the host (one synchronization per run); KV on device: the past fed"
note "  from device tensors and the present left there, logits to the host; all on device: logits too."
[ -x "$bin/onyx_baseline" ] && note "  baseline: $(cat "$here/BASELINE" 2>/dev/null) replaying with every output copied to the host (one synchronization each)."
note "    | batch | eager | replay, host | replay, KV on device | replay, all on device | host / KV on device | baseline replay | capture |"
note "    |---:|---:|---:|---:|---:|---:|---:|---:|"
for c in decode:1 decode_b4:4 decode_b16:16; do
  case=${c%%:*}; batch=${c##*:}; dir=$here/inputs/decoder_large.$case
  args=(); for f in "$dir"/*.npy; do args+=(--input "$(basename "$f" .npy)=$f"); done
  model=$here/models/decoder_large.onnx
  kv=$(python3 -c "import onnx,sys; print(','.join(o.name for o in onnx.load(sys.argv[1], load_external_data=False).graph.output if o.name != 'logits'))" "$model")
  r=$out/replay/$case; mkdir -p "$r"
  "$bin/onyx" run "$model" "${args[@]}" --device cuda:0 --repeat 100 --json > "$r/eager.json" 2>> "$out/replay.log"
  "$bin/onyx" run "$model" "${args[@]}" --device cuda:0 --capture require --repeat 100 --json \
    --save-outputs "$r/host" > "$r/host.json" 2>> "$out/replay.log"
  "$bin/onyx" run "$model" "${args[@]}" --device cuda:0 --capture require --repeat 100 --json \
    --device-inputs --keep-on-device "$kv" --save-outputs "$r/kv" > "$r/kv.json" 2>> "$out/replay.log"
  "$bin/onyx" run "$model" "${args[@]}" --device cuda:0 --capture require --repeat 100 --json \
    --device-inputs --keep-on-device all > "$r/all.json" 2>> "$out/replay.log"
  base="-"
  if [ -x "$bin/onyx_baseline" ]; then
    base=$("$bin/onyx_baseline" run "$model" "${args[@]}" --device cuda:0 --capture require --repeat 100 2>&1 | grep -oE "median [0-9.]+" | grep -oE "[0-9.]+")
  fi
  for variant in host kv; do
    python3 "$here/compare_npy.py" "$r/$variant" "$out/run/decoder_large.$case/cuda0" --tol 1e-5 \
      --label "replayed outputs ($variant), batch $batch, against eager on cuda:0" >> "$out/replay_compare.txt" 2>&1 || fails=$((fails+1))
  done
  e=$(json_get "$r/eager.json" runs.median_ms); h=$(json_get "$r/host.json" runs.median_ms)
  k=$(json_get "$r/kv.json" runs.median_ms); a=$(json_get "$r/all.json" runs.median_ms)
  cap=$(json_get "$r/host.json" capture.capture_ms)
  [ "$(json_get "$r/host.json" capture.replays)" = "100" ] || { note "    batch $batch: not every run after the warm-up was a replay"; fails=$((fails+1)); }
  ratio=$(python3 -c "print(f'{$h/$k:.2f}')" 2>/dev/null || echo "?")
  note "    | $batch | $e | $h | $k | $a | $ratio | $base | $cap ms |"
done

note "- replayed outputs against eager outputs:"
sed 's/^/    /' "$out/replay_compare.txt" | tee -a "$res"

part "benchmarks"
timeout 180 "$bin/onyx_cuda_bench" > "$out/bench.log" 2>&1 || fails=$((fails+1))
note "- kernel benchmarks (onyx_cuda_bench; CUDA events, median of 30):"
tee -a "$res" < "$out/bench.log"
dec=$here/inputs/decoder_large.decode
if [ -d "$out/run/decoder_large.decode/cuda0" ]; then
  timeout 180 python3 "$here/torch_decoder.py" "$here/models/decoder_large.onnx" "$dec" \
    --onyx-logits "$out/run/decoder_large.decode/cuda0/logits.npy" > "$out/torch.log" 2>&1 || fails=$((fails+1))
  note "- decoder_large decode step (batch 1, 1 token, past 127), PyTorch eager on the same GPU:"
  sed 's/^/    /' "$out/torch.log" | tail -3 | tee -a "$res"
fi

note ""
note "suite: $fails failing part(s)"
# At most 8 files come back from the GPU machine: the rest travel in one archive.
(cd "$out" && tar czf logs.tgz --exclude=logs.tgz --exclude=gpu-results.md --exclude=cuda_tests.log --exclude='*.npy' . && \
  find . -mindepth 1 -maxdepth 1 ! -name logs.tgz ! -name gpu-results.md ! -name cuda_tests.log -exec rm -rf {} +)
exit $fails
