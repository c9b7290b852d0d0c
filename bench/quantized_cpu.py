"""Latency of quantized models on the CPU, onyx against onnxruntime, in one process.

A BERT-style encoder and a Llama-style decoder (tools/gen_models.py, at a size where the
products matter: hidden 256) are quantized by onnxruntime's quantize_dynamic (int8 weights,
DynamicQuantizeLinear + MatMulInteger) and quantize_static (QDQ, per channel, calibrated on
random inputs); each engine then runs the same inputs, alternating, with the same thread count
(intra_op_num_threads of both; onyx's BLAS threads, for what still calls BLAS, through
OPENBLAS_NUM_THREADS, set before onyx loads). Prints the median of --runs after --warmup runs, in milliseconds.

    .venv/bin/python bench/quantized_cpu.py [--threads 1] [--runs 20] [--seq 128]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import numpy as np
    import onnxruntime as ort
    from onnxruntime import quantization as q

    import onyx
    sys.path.insert(0, str(REPO / "tools"))
    import gen_models

    bert = dict(gen_models.BERT, hidden=256, heads=4, ffn=1024, layers=4, max_pos=512, vocab=1000)
    llama = dict(gen_models.LLAMA, hidden=256, heads=8, kv_heads=4, head_dim=32, ffn=1024, layers=4, max_pos=512,
                 vocab=1000)
    rng = np.random.default_rng(0)
    B, S = args.batch, args.seq

    def bert_feeds():
        return {"input_ids": rng.integers(0, bert["vocab"], (B, S), dtype=np.int64),
                "attention_mask": np.ones((B, S), np.int64)}

    def llama_feeds():
        f = {"input_ids": rng.integers(0, llama["vocab"], (B, S), dtype=np.int64),
             "attention_mask": np.ones((B, S), np.int64),
             "position_ids": np.tile(np.arange(S, dtype=np.int64), (B, 1))}
        for i in range(llama["layers"]):
            for kind in ("key", "value"):
                f[f"past_key_values.{i}.{kind}"] = np.zeros((B, llama["kv_heads"], 0, llama["head_dim"]), np.float32)
        return f

    class Reader(q.CalibrationDataReader):
        def __init__(self, make):
            self.feeds = iter([make() for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    tmp = Path(tempfile.mkdtemp(prefix="onyx_qbench_"))
    models = {"bert": (gen_models.make_bert_layer(bert), bert_feeds),
              "llama": (gen_models.make_llama_layer(llama), llama_feeds)}
    print(f"threads {args.threads}, batch {B}, tokens {S}; median of {args.runs} runs (ms)")
    print(f"{'model':<22}{'onnxruntime':>12}{'onyx':>10}{'onyx/ort':>10}")
    for name, (model, make_feeds) in models.items():
        src = tmp / f"{name}.onnx"
        gen_models.save(model, str(src), quiet=True)
        variants = {"float": src}
        dyn = tmp / f"{name}_dynamic.onnx"
        q.quantize_dynamic(str(src), str(dyn), weight_type=q.QuantType.QInt8)
        variants["dynamic int8"] = dyn
        qdq = tmp / f"{name}_qdq.onnx"
        q.quantize_static(str(src), str(qdq), Reader(make_feeds), quant_format=q.QuantFormat.QDQ, per_channel=True)
        variants["qdq per-channel"] = qdq
        feeds = make_feeds()
        for label, path in variants.items():
            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            xo = onyx.SessionOptions()
            xo.intra_op_num_threads = args.threads
            engines = {"ort": ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]),
                       "onyx": onyx.InferenceSession(str(path), xo, providers=["CPUExecutionProvider"])}
            times = {k: [] for k in engines}
            for i in range(args.warmup + args.runs):
                for k, sess in engines.items():
                    t = time.perf_counter()
                    sess.run(None, feeds)
                    if i >= args.warmup:
                        times[k].append((time.perf_counter() - t) * 1e3)
            o, x = statistics.median(times["ort"]), statistics.median(times["onyx"])
            print(f"{name + ' ' + label:<22}{o:>12.2f}{x:>10.2f}{x / o:>10.2f}")


if __name__ == "__main__":
    main()
