#!/usr/bin/env bash
# Decode on the CPU against the memory floor (docs/cpu-speed.md, "Decode against the memory
# floor"): per round, the read-rate probe (bench/read_bandwidth.c) on 1 and 2 threads, then each
# decode model of the CPU suite through `onyx run` and through onnxruntime (a process of its own,
# the suite's session settings), at 1 and 2 threads. The floor is the model's weight bytes per
# token over the probe's rate of the same round.
#
#   bench/cpu_decode_floor.sh [ROUNDS (default 3)] [REPEAT (default 30)]
#
# Needs build/onyx, the suite's exports in build-bench/cpu-suite (bench/cpu_suite_models.py) and
# the project's .venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
repeat=${2:-30}
suite=build-bench/cpu-suite
work=build-bench/decode-floor
mkdir -p "$work"
cc -O3 -mavx512f -fopenmp bench/read_bandwidth.c -o "$work/read_bandwidth"
models="llama-124m-decode gpt2-decode"
for m in $models; do
  [ -f "$suite/$m.onnx" ] || { echo "no $suite/$m.onnx: run bench/cpu_suite_models.py first" >&2; exit 1; }
  # The inputs as .npy files for onyx run, and the bytes read per token: every initializer but
  # the tables that only a Gather reads (one row of each per token).
  .venv/bin/python - "$suite/$m" "$work/$m" <<'PY'
import os, sys
import numpy as np, onnx
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
args = []
for k, v in np.load(src + ".inputs.npz").items():
    np.save(os.path.join(dst, k + ".npy"), v)
    args.append(f"--input {k}={os.path.join(dst, k + '.npy')}")
open(os.path.join(dst, "args"), "w").write(" ".join(args))
m = onnx.load(src + ".onnx", load_external_data=False)
size = {t.name: int(np.prod(t.dims)) * np.dtype(onnx.helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
        for t in m.graph.initializer}
readers = {}
for n in m.graph.node:
    for i, name in enumerate(n.input):
        readers.setdefault(name, []).append((n.op_type, i))
gathered = sum(b for name, b in size.items()
               if readers.get(name) and all(op == "Gather" and i == 0 for op, i in readers[name]))
open(os.path.join(dst, "bytes"), "w").write(str(sum(size.values()) - gathered))
PY
done
cat > "$work/ort_time.py" <<'PY'
import sys, time
import numpy as np, onnxruntime as ort
model, inputs, threads, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
feeds = dict(np.load(inputs))
o = ort.SessionOptions()
o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
for _ in range(3):
    s.run(None, feeds)
t = []
for _ in range(n):
    t0 = time.perf_counter()
    s.run(None, feeds)
    t.append((time.perf_counter() - t0) * 1e3)
t.sort()
print(f"median {t[n // 2]:.3f} ms  min {t[0]:.3f} ms")
PY
for r in $(seq "$rounds"); do
  echo "round $r $(date -u +%H:%M:%S) UTC, load average $(cut -d' ' -f1-3 /proc/loadavg)"
  probe=$("$work/read_bandwidth" 1024 2)
  echo "$probe"
  for m in $models; do
    bytes=$(cat "$work/$m/bytes")
    for t in 1 2; do
      rate=$(echo "$probe" | awk -v t="$t" '$2 == t":" {print $3}')
      onyx_ms=$(build/onyx run "$suite/$m.onnx" $(cat "$work/$m/args") --repeat "$repeat" --intra-op-threads "$t" 2>&1 |
                awk '/^runs:/ {print $4}')
      ort_line=$(.venv/bin/python "$work/ort_time.py" "$suite/$m.onnx" "$suite/$m.inputs.npz" "$t" "$repeat")
      ort_ms=$(echo "$ort_line" | awk '{print $2}')
      awk -v m="$m" -v t="$t" -v b="$bytes" -v r="$rate" -v o="$onyx_ms" -v x="$ort_ms" 'BEGIN {
        f = b / (r * 1e9) * 1e3
        printf "%s, %d thread(s): %.1f MB a token, read %.2f GB/s, floor %.1f ms; onyx %.1f ms (%.2fx the floor), onnxruntime %.1f ms (%.2fx); 0.7 x onnxruntime = %.1f ms\n",
               m, t, b / 1e6, r, f, o, o / f, x, x / f, 0.7 * x }'
    done
  done
done
