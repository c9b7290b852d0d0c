"""Where a captured session step's time goes, on the GPU machine (as gpu/session_probe.py, beside
llama_decode_gpu.py, whose 1.24B Llama it makes or reuses): the bfloat16 model at batch 1 over a
past of 511 through InferenceSession + IOBinding with CUDA graphs, as the decode bench's "onyx
captured" column runs it. Prints the wall time per step (3 x 50 steps), the time until
run_with_iobinding returns, then three traced steps (torch.profiler, CPU + CUDA): the host's CUDA
runtime calls in order with their durations, the last device events, and the gaps over 20 us
where the device waited for the host. Arguments K=V (SessionOptions attributes, e.g.
overlap_launches=false) add a session so set, timed in turn with the default one."""
import os
import statistics
import sys
import tempfile
import time

import torch
import onyx
from llama_decode_gpu import LLAMA_1B, make_model, timed

path = os.path.join(tempfile.gettempdir(), "onyx_llama_1b_bfloat16_16", "llama_1b.onnx")
if not os.path.isfile(path + ".data"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    make_model(path, "bfloat16", 16)
c = LLAMA_1B
dev = torch.device("cuda")
P, batch = 511, 1
T = P + 1
g = torch.Generator(device="cpu").manual_seed(1)
ids = torch.randint(0, c["vocab"], (batch, 1), generator=g).to(dev)
mask = torch.ones((batch, T), dtype=torch.int64, device=dev)
pos = torch.full((batch, 1), P, dtype=torch.int64, device=dev)
past = [(torch.randn((batch, c["kv_heads"], P, c["head_dim"]), generator=g).to(dev, torch.bfloat16),
         torch.randn((batch, c["kv_heads"], P, c["head_dim"]), generator=g).to(dev, torch.bfloat16))
        for _ in range(c["layers"])]
steps = {}
variants = {"default": {}}
for arg in sys.argv[1:]:
    k, v = arg.split("=", 1)
    variants[arg] = {k: {"true": True, "false": False}.get(v.lower(), v)}
for label, opts in variants.items():
    so = onyx.SessionOptions()
    for k, v in opts.items():
        setattr(so, k, v)
    sess = onyx.InferenceSession(path, so, providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
    b = sess.io_binding()
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    for i, (k, v) in enumerate(past):
        feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
    for n, t in feeds.items():
        b.bind_ortvalue_input(n, onyx.OrtValue.from_dlpack(t))
    outs = {"logits": torch.empty((batch, 1, c["vocab"]), dtype=torch.bfloat16, device=dev)}
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            outs[f"present.{i}.{kind}"] = torch.empty((batch, c["kv_heads"], T, c["head_dim"]), dtype=torch.bfloat16,
                                                      device=dev)
    for n, t in outs.items():
        b.bind_ortvalue_output(n, onyx.OrtValue.from_dlpack(t))
    steps[label] = (sess, b)
    for _ in range(5):
        sess.run_with_iobinding(b)
res = {k: [] for k in steps}
for _ in range(3):
    for label, (sess, b) in steps.items():
        res[label] += timed(lambda: sess.run_with_iobinding(b), 50)
for label in steps:
    print(f"{label}: {statistics.median(res[label]):.3f} ms/step (min {min(res[label]):.3f}); "
          f"{steps[label][0].capture_report()}", flush=True)
# The host side alone: run_with_iobinding's own time, the device idle before it.
for label, (sess, b) in steps.items():
    t = []
    for _ in range(50):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        sess.run_with_iobinding(b)
        t.append((time.perf_counter() - t0) * 1e3)
    print(f"{label}: run_with_iobinding returns after {statistics.median(t):.3f} ms", flush=True)
from torch.profiler import ProfilerActivity, profile as trace


def trace_steps(label, sess, b):
    torch.cuda.synchronize()
    with trace(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(3):
            sess.run_with_iobinding(b)
        torch.cuda.synchronize()
    ev = sorted(((e.time_range.start, e.time_range.end, e.device_type.name, e.name) for e in p.events()),
                key=lambda x: x[0])
    t_first = ev[0][0]
    print(f"{label}: events of the traced steps (us from the first; host calls and device work):")
    host = [e for e in ev if e[2] == "CPU"]
    for s, e, d, n in host[-60:]:
        print(f"  host {s - t_first:10.1f} {e - s:8.1f}  {n[:80]}")
    dev_ev = [e for e in ev if e[2] == "CUDA"]
    print(f"device events: {len(dev_ev)}; first {dev_ev[0][0] - t_first:.1f}, last end {dev_ev[-1][1] - t_first:.1f}")
    for s, e, d, n in dev_ev[-8:]:
        print(f"  dev  {s - t_first:10.1f} {e - s:8.1f}  {n[:80]}")
    gaps = []
    for (s0, e0, _, _), (s1, e1, _, n1) in zip(dev_ev, dev_ev[1:]):
        if s1 - e0 > 20:
            gaps.append((s1 - e0, e0 - t_first, n1[:60]))
    print("device gaps over 20 us (us, at, next kernel):", [(round(a, 1), round(b_, 1), n) for a, b_, n in gaps[:20]])


for label, (sess, b) in steps.items():
    trace_steps(label, sess, b)
