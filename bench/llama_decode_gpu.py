"""Decode step of a Llama-3.2-1B-shaped decoder on one GPU: onyx against PyTorch, in one process.

The model: tools/gen_models.py's Llama-style decoder (the graph torch.onnx exports for
HF Llama: decomposed RMSNorm, RoPE by Gather, GQA by Expand, Concat(past, new) caches,
additive mask) at hidden 2048, 16 layers, 32 heads over 8 KV heads (head 64), intermediate
8192, vocabulary 128256, the LM head tied to the embedding through a Transpose; random
weights, converted to bfloat16 (or left float32) by tools/convert_float_precision.py's
rules. 1.24B parameters.

Measured: one decode step, batch B, one new token over a past of P positions (the same
inputs every step), inputs and outputs in device buffers bound once:
- onyx, captured (IOBinding, enable_cuda_graph), as it runs by default and with features off one at a
  time (--ablate: the linear fusions, overlapped launches, all load-time folding and fusion, the
  rotary-cache fusion);
- PyTorch eager and PyTorch replaying a CUDA Graph of the same step (bench/torch_decoder.py's
  Decoder, the ONNX model's own weights);
- with --ort, onnxruntime's CUDA execution provider replaying its CUDA graph of the same model
  file (bench/ort_decode.py: the dimensions fixed per shape, the same bound input buffers);
each as the median of --repeat steps after warm-up, each step timed to its completion; the
rounds alternate between the engines. Also the weight-read floor: weight bytes / the
device-to-device copy bandwidth measured here.

usage (on the GPU machine, onyx importable): python3 llama_decode_gpu.py --dtype bfloat16 --past 511 --batch 1
"""
import argparse
import math
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import onnx
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "tools")]
import gen_models  # noqa: E402

LLAMA_1B = dict(vocab=128256, hidden=2048, heads=32, kv_heads=8, head_dim=64, ffn=8192, layers=16,
                max_pos=8192, rope_theta=500000.0, rms_eps=1e-6, tie=True)


def make_model(path, dtype, layers, bits=0, block=32):
    c = dict(LLAMA_1B, layers=layers)
    t0 = time.time()
    m = gen_models.make_llama_layer(c, "llama_1b", seed=20261201)
    if bits:
        m = quantize_4bit(m, block)
    if dtype != "float32":
        import convert_float_precision as cfp
        to = onnx.TensorProto.BFLOAT16 if dtype == "bfloat16" else onnx.TensorProto.FLOAT16
        cfp.convert(m, to)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".data", size_threshold=1024)
    weights = sum(os.path.getsize(p) for p in (path, path + ".data"))
    print(f"model: {layers} layers, {dtype}{f', {bits}-bit weights in blocks of {block}' if bits else ''}, "
          f"{weights / 1e9:.2f} GB on disk, made in {time.time() - t0:.0f} s", flush=True)
    return c


def quantize_rows(w, block):
    """[N, K] float32 -> (uint8 [N, K / block, block / 2] low nibble first, float32 scales [N, K / block]);
    on the GPU when there is one (a 1.24B model takes seconds there, minutes in numpy)."""
    N, K = w.shape
    if torch.cuda.is_available():
        blocks = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float32)).cuda().reshape(N, K // block, block)
        scale = blocks.abs().amax(dim=2) / 7.0
        scale[scale == 0] = 1.0
        q = torch.clamp(torch.round(blocks / scale[:, :, None]) + 8, 0, 15).to(torch.uint8)
        packed = q[:, :, 0::2] | (q[:, :, 1::2] << 4)
        return packed.cpu().numpy(), scale.cpu().numpy()
    blocks = w.astype(np.float32).reshape(N, K // block, block)
    scale = np.abs(blocks).max(axis=2) / 7.0
    scale[scale == 0] = 1.0
    q = np.clip(np.rint(blocks / scale[:, :, None]) + 8, 0, 15).astype(np.uint8)
    return (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).astype(np.uint8), scale


def quantize_4bit(m, block):
    """Every MatMul by a constant 2-D weight (and the LM head's MatMul by Transpose(embedding))
    becomes com.microsoft MatMulNBits: 4 bits, symmetric blocks of `block` along K (zero point 8,
    the default), scales max|w| / 7, float32 scales (converted with the rest later)."""
    from onnx import helper, numpy_helper
    inits = {t.name: t for t in m.graph.initializer}
    producers = {o: n for n in m.graph.node for o in n.output}
    used = {}
    for n in m.graph.node:
        for i in n.input:
            used[i] = used.get(i, 0) + 1
    drop, nodes = set(), []
    for n in m.graph.node:
        if n.op_type != "MatMul":
            nodes.append(n)
            continue
        b = n.input[1]
        if b in inits and len(inits[b].dims) == 2:
            w = numpy_helper.to_array(inits[b]).T  # [N, K]
            if used[b] == 1:
                drop.add(b)
        elif b in producers and producers[b].op_type == "Transpose" and producers[b].input[0] in inits:
            w = numpy_helper.to_array(inits[producers[b].input[0]])  # already [N, K]
            if used[b] == 1:
                drop.add(producers[b].output[0])
        else:
            nodes.append(n)
            continue
        N, K = w.shape
        packed, scale = quantize_rows(w, block)
        bq, sc = n.name + "_Bq", n.name + "_scales"
        m.graph.initializer.extend([numpy_helper.from_array(packed, bq), numpy_helper.from_array(scale.astype(np.float32), sc)])
        nodes.append(helper.make_node("MatMulNBits", [n.input[0], bq, sc], list(n.output), name=n.name + "_q4",
                                      domain="com.microsoft", K=K, N=N, bits=4, block_size=block))
    keep = [t for t in m.graph.initializer if t.name not in drop]
    del m.graph.initializer[:]
    m.graph.initializer.extend(keep)
    nodes = [n for n in nodes if not (n.op_type == "Transpose" and n.output[0] in drop)]
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    if not any(o.domain == "com.microsoft" for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m


def timed(step, repeat):
    out = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def profile(label, step, n):
    """GPU time per step by kernel (names shortened), from a CUPTI trace of n steps."""
    from torch.profiler import ProfilerActivity, profile as trace
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    with trace(activities=[ProfilerActivity.CUDA]) as p:
        for _ in range(n):
            step()
        torch.cuda.synchronize()
    rows = {}
    for e in p.events():
        if e.device_type.name != "CUDA":
            continue
        name = e.name.replace("(anonymous namespace)::", "").replace("void ", "").replace("onyx::cuda::", "")
        name = name.split("(")[0][:90]
        t, k = rows.get(name, (0.0, 0))
        rows[name] = (t + e.time_range.elapsed_us(), k + 1)
    total = sum(t for t, _ in rows.values())
    print(f"    {label}: GPU busy {total / n / 1e3:.3f} ms/step in {sum(k for _, k in rows.values()) // n} "
          f"kernels/step; by kernel (ms/step, launches/step):", flush=True)
    for name, (t, k) in sorted(rows.items(), key=lambda r: -r[1][0])[:30]:
        print(f"      {t / n / 1e3:7.3f}  {k // n:4d}  {name}", flush=True)
    exposed(label, p, n)


def exposed(label, p, n):
    """The step's time by what it waited on. A kernel launched early (programmatic dependent launch)
    is resident while the one before it runs, so its span overlaps that one's; what each adds to
    the step is its exposed time: from the later of its start and the previous kernel's end to its
    own end. A gap is time with no kernel running (between the previous end and a later start).
    Printed per kernel name, and per position in the step for the first layers and the end."""
    ev = []
    for e in p.events():
        if e.device_type.name != "CUDA":
            continue
        name = e.name.replace("(anonymous namespace)::", "").replace("void ", "").replace("onyx::cuda::", "")
        ev.append((e.time_range.start, e.time_range.end, name.split("(")[0][:60]))
    ev.sort()
    if not ev or len(ev) % n:
        print(f"    {label}: {len(ev)} events over {n} steps, not one sequence per step: no exposed times", flush=True)
        return
    k = len(ev) // n
    pos_exp, pos_gap, by_name = [0.0] * k, [0.0] * k, {}
    for s in range(n):
        step = ev[s * k:(s + 1) * k]
        for i, (t0, t1, name) in enumerate(step):
            prev = step[i - 1][1] if i else t0
            x = max(0.0, t1 - max(prev, t0))
            pos_exp[i] += x / n
            pos_gap[i] += max(0.0, t0 - prev) / n
            by_name[name] = by_name.get(name, 0.0) + x / n
    span = (sum(pos_exp) + sum(pos_gap)) / 1e3
    print(f"    {label}: exposed {sum(pos_exp) / 1e3:.3f} + gaps {sum(pos_gap) / 1e3:.3f} = {span:.3f} ms/step from the "
          f"first kernel's start to the last's end; exposed by kernel (ms/step):", flush=True)
    for name, x in sorted(by_name.items(), key=lambda r: -r[1])[:20]:
        print(f"      {x / 1e3:7.3f}  {name}", flush=True)
    shown = list(range(min(k, 22))) + list(range(max(22, k - 6), k))
    print("      by position (us exposed, us gap before): " + "; ".join(
        f"{i} {ev[i][2].split('<')[0]}{'<' + ev[i][2].split('<')[1][:22] if '<' in ev[i][2] else ''} "
        f"{pos_exp[i]:.1f}/{pos_gap[i]:.1f}" for i in shown), flush=True)


def prefill(args, c, sess, model, sdpa_model, tdt, dev, g):
    """A prompt of N tokens at batch 1 with no past: onyx (eager: a prompt's shape is its own)
    against PyTorch eager (the same attention as the graph) and PyTorch's fused attention. onyx's
    session captures a shape after its first run, so its later runs of the prompt replay."""
    import onyx
    print("\n| prompt | onyx | torch eager | torch SDPA (flash) | onyx / torch SDPA |")
    print("|---:|---:|---:|---:|---:|")
    for n in args.prefill:
        ids = torch.randint(0, c["vocab"], (1, n), generator=g).to(dev)
        mask = torch.ones((1, n), dtype=torch.int64, device=dev)
        pos = torch.arange(n, dtype=torch.int64, device=dev).unsqueeze(0)
        past = [(torch.zeros((1, c["kv_heads"], 0, c["head_dim"]), dtype=tdt, device=dev),
                 torch.zeros((1, c["kv_heads"], 0, c["head_dim"]), dtype=tdt, device=dev)) for _ in range(c["layers"])]
        feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
        for i, (k, v) in enumerate(past):
            feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
        b = sess.io_binding()
        for name, t in feeds.items():
            b.bind_ortvalue_input(name, onyx.OrtValue.from_dlpack(t))
        outs = {"logits": torch.empty((1, n, c["vocab"]), dtype=tdt, device=dev)}
        for i in range(c["layers"]):
            for kind in ("key", "value"):
                outs[f"present.{i}.{kind}"] = torch.empty((1, c["kv_heads"], n, c["head_dim"]), dtype=tdt, device=dev)
        for name, t in outs.items():
            b.bind_ortvalue_output(name, onyx.OrtValue.from_dlpack(t))
        with torch.no_grad():
            ref, _ = model.forward(ids, mask, pos, past)
            fused, _ = sdpa_model.forward(ids, mask, pos, past)
            sess.run_with_iobinding(b)
            for label, got in (("onyx", outs["logits"]), ("torch SDPA", fused)):
                err = float((got.float() - ref.float()).abs().max() / ref.float().abs().max())
                print(f"    prompt {n}: {label} vs torch eager logits: max relative difference {err:.2e}", flush=True)
            res = {"onyx": [], "eager": [], "sdpa": []}
            for _ in range(args.rounds):
                timed(lambda: sess.run_with_iobinding(b), 2)
                res["onyx"] += timed(lambda: sess.run_with_iobinding(b), max(3, args.repeat // 4))
                timed(lambda: model.forward(ids, mask, pos, past), 2)
                res["eager"] += timed(lambda: model.forward(ids, mask, pos, past), max(3, args.repeat // 4))
                timed(lambda: sdpa_model.forward(ids, mask, pos, past), 2)
                res["sdpa"] += timed(lambda: sdpa_model.forward(ids, mask, pos, past), max(3, args.repeat // 4))
        med = {k: statistics.median(v) for k, v in res.items()}
        print(f"| {n} | {med['onyx']:.3f} | {med['eager']:.3f} | {med['sdpa']:.3f} | {med['onyx'] / med['sdpa']:.2f} |",
              flush=True)
        if args.profile:
            profile(f"onyx prompt {n}", lambda: sess.run_with_iobinding(b), 2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    ap.add_argument("--past", type=int, nargs="+", default=[511])
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefill", type=int, nargs="*", default=[],
                    help="also time a prompt of each of these lengths (batch 1, no past): onyx eager against "
                         "PyTorch eager and PyTorch with scaled_dot_product_attention (flash, causal)")
    ap.add_argument("--ablate", nargs="*", default=["no-linear", "no-overlap"],
                    choices=["no-linear", "no-overlap", "no-folding", "no-rotary-cache"],
                    help="also time onyx with each of these off: the linear fusions, overlapped launches, "
                         "all load-time folding and fusion, the rotary-cache fusion")
    ap.add_argument("--int4-block", type=int, nargs="*", default=[],
                    help="also time onyx on the same model with 4-bit weights (MatMulNBits, blocks of this many; "
                         "the LM head too), its logits against the bf16 model's")
    ap.add_argument("--generate", type=int, default=0,
                    help="also time N decode steps of onyx's generation loop (onyx.genai's native Generator on "
                         "a folder holding the same model: the cache written in place, greedy on the device) per "
                         "batch and past; with --int4-block, on each 4-bit model too")
    ap.add_argument("--sample", action="store_true",
                    help="with --generate: also time the loop sampling on the device (temperature 0.6, top-p 0.9: "
                         "Llama 3's generation_config) and with top-k 50 added")
    ap.add_argument("--no-run-ahead-too", action="store_true",
                    help="with --generate: also time each mode of the loop with run_ahead off (each step "
                         "launched once the step before it has given its tokens to the host), in turn")
    ap.add_argument("--only-generate", action="store_true",
                    help="with --generate: time the generation loop alone (no session, no PyTorch; on each "
                         "--int4-block model too), e.g. to compare settings of the environment in several runs on "
                         "the models made by the first")
    ap.add_argument("--int4-only", action="store_true",
                    help="with --only-generate: the --int4-block models' loops alone (not the 16-bit model's)")
    ap.add_argument("--env", nargs="*", default=[], metavar="K=V[,K=V]",
                    help="with --generate: run each mode of the loop once per setting here, in turn, --rounds "
                         "times, with those environment variables set as the step is captured (A/B of a "
                         "measurement knob in one process)")
    ap.add_argument("--options", nargs="*", default=[], metavar="K=V[,K=V]",
                    help="with --generate: run each mode of the loop once per setting here, in turn, --rounds "
                         "times, the model loaded with those session options (onyx.SessionOptions' native keys; "
                         "true/false or a number), e.g. fuse_rotary_attention=false fuse_rotary_attention=true")
    ap.add_argument("--hf-export", nargs="*", default=[], metavar="EXPORTER-ATTENTION",
                    help="with --generate: also time the generation loop on transformers' LlamaForCausalLM at the "
                         "same shape (random weights, tied embeddings) as torch.onnx exports it: dynamo-sdpa, "
                         "dynamo-eager, torchscript-sdpa, torchscript-eager (tools/export_hf_decoders.py; the "
                         "graph a user's export gives, against gen_models' graph; made once per machine)")
    ap.add_argument("--ort", action="store_true",
                    help="also time onnxruntime's CUDA execution provider on the same model file and inputs "
                         "(bench/ort_decode.py: the dimensions fixed per batch and past, IOBinding, CUDA graphs; "
                         "without graphs where a graph cannot be captured); needs onnxruntime-gpu importable "
                         "(scripts/ort_gpu_parts.sh here, scripts/ort_gpu_receive.sh there)")
    ap.add_argument("--profile", type=int, default=0,
                    help="also trace N steps of each (CUPTI through torch.profiler) and print GPU time by kernel")
    args = ap.parse_args()
    import onyx
    import torch_decoder

    tdt = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[args.dtype]
    # Made once per machine (a minute): kept in /tmp for later runs of the same shape.
    path = os.path.join(tempfile.gettempdir(), f"onyx_llama_1b_{args.dtype}_{args.layers}", "llama_1b.onnx")
    if os.path.isfile(path + ".data"):
        c = dict(LLAMA_1B, layers=args.layers)
        print(f"model: {path} (made earlier)", flush=True)
    else:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        c = make_model(path, args.dtype, args.layers)
    dev = torch.device("cuda")

    # The floor: every weight read once per step at the copy bandwidth.
    weight_bytes = os.path.getsize(path + ".data")
    buf = torch.empty(1 << 30, dtype=torch.uint8, device=dev)
    dst = torch.empty_like(buf)
    for _ in range(3):
        dst.copy_(buf)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(10):
        dst.copy_(buf)
    torch.cuda.synchronize()
    bw = 2 * buf.numel() * 10 / (time.perf_counter() - t0)
    del buf, dst
    floor = weight_bytes / bw * 1e3
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s; weights {weight_bytes / 1e9:.2f} GB; floor {floor:.3f} ms/step",
          flush=True)

    int4_paths = int4_models(args, c, bw)
    hf_paths = {}
    for spec in args.hf_export:
        try:
            hf_paths[spec] = make_hf_export(spec, args.dtype, args.layers)
        except Exception as e:  # report and go on
            print(f"export {spec} failed: {type(e).__name__}: {str(e)[:600]}", flush=True)
    if args.only_generate:
        g = torch.Generator(device="cpu").manual_seed(1)
        for P, batch in [(p, b) for p in args.past for b in args.batch]:
            if not args.int4_only:
                generate_modes(args, c, path, P, batch, g)
            for block, qpath in int4_paths.items():
                generate_modes(args, c, qpath, P, batch, g, f"int4 b{block}, ")
            for spec, hpath in hf_paths.items():
                generate_modes(args, c, hpath, P, batch, g, f"transformers {spec}, ")
        return

    # onyx as it runs by default, and with one load-time or launch feature off each (ablations).
    variants = {"onyx": {}}
    for v in args.ablate:
        variants[f"onyx {v}"] = {"no-linear": {"fuse_linear": False}, "no-overlap": {"overlap_launches": False},
                                 "no-rotary-cache": {"fuse_rotary_cache": False},
                                 "no-folding": {"graph_optimization_level":
                                                onyx.GraphOptimizationLevel.ORT_DISABLE_ALL}}[v]
    paths = {label: path for label in variants}
    for block, qpath in int4_paths.items():
        variants[f"onyx int4 b{block}"] = {}
        paths[f"onyx int4 b{block}"] = qpath
    sessions = {}
    for label, opts in variants.items():
        so = onyx.SessionOptions()
        for k, v in opts.items():
            setattr(so, k, v)
        t0 = time.time()
        sessions[label] = onyx.InferenceSession(paths[label], so,
                                                providers=[("CUDAExecutionProvider", {"enable_cuda_graph": "1"})])
        print(f"{label} session loaded in {time.time() - t0:.1f} s", flush=True)
    weights = torch_decoder.load_weights(path)
    model = torch_decoder.Decoder(weights, dev)
    del weights

    g = torch.Generator(device="cpu").manual_seed(1)
    if args.prefill:
        try:
            prefill(args, c, sessions["onyx"], model,
                    torch_decoder.Decoder(torch_decoder.load_weights(path), dev, sdpa=True), tdt, dev, g)
        except Exception as e:  # report and go on to the decode steps
            print(f"prefill failed: {type(e).__name__}: {e}", flush=True)
    labels = list(sessions)
    ort_labels = ["onnxruntime CUDA EP"] if args.ort else []
    print("\n| batch | past | " + " | ".join(f"{l} captured" for l in labels) +
          "".join(f" | {l}" for l in ort_labels) +
          " | torch eager | torch CUDA Graph | floor | onyx / torch graph |" +
          "".join(f" onyx / {l} |" for l in ort_labels) + " onyx weight bandwidth TB/s |")
    print("|---:|---:|" + "---:|" * (len(labels) + 2 * len(ort_labels) + 5))
    for P, batch in [(p, b) for p in args.past for b in args.batch]:
        T = P + 1
        ids = torch.randint(0, c["vocab"], (batch, 1), generator=g).to(dev)
        mask = torch.ones((batch, T), dtype=torch.int64, device=dev)
        pos = torch.full((batch, 1), P, dtype=torch.int64, device=dev)
        past = [(torch.randn((batch, c["kv_heads"], P, c["head_dim"]), generator=g).to(dev, tdt),
                 torch.randn((batch, c["kv_heads"], P, c["head_dim"]), generator=g).to(dev, tdt))
                for _ in range(c["layers"])]
        steps = {}
        for label, sess in sessions.items():
            b = sess.io_binding()
            feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
            for i, (k, v) in enumerate(past):
                feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
            for n, t in feeds.items():
                b.bind_ortvalue_input(n, onyx.OrtValue.from_dlpack(t))
            outs = {"logits": torch.empty((batch, 1, c["vocab"]), dtype=tdt, device=dev)}
            for i in range(c["layers"]):
                for kind in ("key", "value"):
                    outs[f"present.{i}.{kind}"] = torch.empty((batch, c["kv_heads"], T, c["head_dim"]), dtype=tdt,
                                                              device=dev)
            for n, t in outs.items():
                b.bind_ortvalue_output(n, onyx.OrtValue.from_dlpack(t))
            steps[label] = (sess, b, outs)
        ort_step = None
        if args.ort:
            feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
            for i, (k, v) in enumerate(past):
                feeds[f"past_key_values.{i}.key"], feeds[f"past_key_values.{i}.value"] = k, v
            ort_step = ort_session(path, batch, P, feeds, c, tdt, dev)
        with torch.no_grad():
            ref, _ = model.forward(ids, mask, pos, past)
            checked = [(label, lambda sess=sess, b=b: sess.run_with_iobinding(b), outs)
                       for label, (sess, b, outs) in steps.items()]
            if ort_step:
                checked.append((ort_step[0], ort_step[1].run, ort_step[2]))
            for label, run, outs in checked:
                run()
                got, want = outs["logits"].float().flatten(0, 1), ref.float().flatten(0, 1)
                err = float((got - want).abs().max() / want.abs().max())
                l2 = float((got - want).norm() / want.norm())
                top1 = float((got.argmax(-1) == want.argmax(-1)).float().mean())
                print(f"{label} vs torch logits, batch {batch}: max relative difference {err:.2e}, relative L2 "
                      f"{l2:.2e}, top-1 agreement {top1:.3f}", flush=True)
            static = [ids, mask, pos, past]
            graph = torch.cuda.CUDAGraph()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model.forward(*static)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(graph):
                graph_out, _ = model.forward(*static)
            results = {k: [] for k in labels + ["eager", "graph"] + ([ort_step[0]] if ort_step else [])}
            for _ in range(args.rounds):
                for label, run, outs in checked:
                    timed(run, 5)
                    results[label] += timed(run, args.repeat)
                timed(lambda: model.forward(*static), 3)
                results["eager"] += timed(lambda: model.forward(*static), args.repeat)
                timed(graph.replay, 5)
                results["graph"] += timed(graph.replay, args.repeat)
            med = {k: statistics.median(v) for k, v in results.items()}
            rep = steps["onyx"][0].capture_report()
            ort_cells = ([f"{med[ort_step[0]]:.3f} ({ort_step[0]})"] if ort_step else ["failed (above)"]) \
                if args.ort else []
            ort_ratio = ([f"{med['onyx'] / med[ort_step[0]]:.2f}"] if ort_step else [""]) if args.ort else []
            print(f"| {batch} | {P} | " + " | ".join(f"{med[l]:.3f}" for l in labels) +
                  "".join(f" | {x}" for x in ort_cells) +
                  f" | {med['eager']:.3f} | {med['graph']:.3f} | {floor:.3f} | {med['onyx'] / med['graph']:.2f} |" +
                  "".join(f" {x} |" for x in ort_ratio) + f" {weight_bytes / med['onyx'] / 1e9:.2f} |", flush=True)
            print(f"    onyx capture report: {rep}", flush=True)
            if args.profile:
                for label in [l for l in labels if l in ("onyx", "onyx no-rotary-cache") or l.startswith("onyx int4")]:
                    sess, b, _ = steps[label]
                    profile(f"{label} captured, batch {batch}", lambda: sess.run_with_iobinding(b), args.profile)
                profile(f"torch CUDA Graph, batch {batch}", graph.replay, args.profile)
            del graph
            if ort_step:
                if args.profile:
                    profile(f"{ort_step[0]}, batch {batch}", ort_step[1].run, args.profile)
                ort_step = checked = None  # its session and device memory go before the next shape's
            if args.generate:
                generate_modes(args, c, path, P, batch, g)
                for block in args.int4_block:  # the same loop on the 4-bit model (its own folder)
                    generate_modes(args, c, paths[f"onyx int4 b{block}"], P, batch, g, f"int4 b{block}, ")
                for spec, hpath in hf_paths.items():  # and on the transformers exports
                    generate_modes(args, c, hpath, P, batch, g, f"transformers {spec}, ")


def make_hf_export(spec, dtype, layers):
    """transformers' LlamaForCausalLM at the benchmark's shape (random weights, tied embeddings, seeded),
    exported by torch.onnx as `spec` says ("dynamo-sdpa", "torchscript-eager", ...) and converted to
    `dtype` by the rules the main model's conversion follows: the graph a user's own export gives.
    Made once per machine, in /tmp beside the main model; returns its path."""
    import shutil
    import export_hf_decoders
    import transformers
    exporter, attention = spec.split("-", 1)
    if exporter not in ("dynamo", "torchscript") or attention not in ("sdpa", "eager"):
        raise ValueError(f"--hf-export takes dynamo-sdpa, dynamo-eager, torchscript-sdpa or torchscript-eager, not {spec}")
    path = os.path.join(tempfile.gettempdir(), f"onyx_llama_1b_hf_{spec}_{dtype}_{layers}", "llama_1b.onnx")
    if os.path.isfile(path + ".data"):
        print(f"transformers {spec}: {path} (made earlier)", flush=True)
        return path
    t0 = time.time()
    c = dict(LLAMA_1B, layers=layers)
    config = transformers.LlamaConfig(
        vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["ffn"], num_hidden_layers=layers,
        num_attention_heads=c["heads"], num_key_value_heads=c["kv_heads"], head_dim=c["head_dim"],
        max_position_embeddings=c["max_pos"], rope_theta=c["rope_theta"], rms_norm_eps=c["rms_eps"],
        tie_word_embeddings=True, bos_token_id=128000, eos_token_id=128001)
    config._attn_implementation = attention
    torch.manual_seed(20261205)
    model = transformers.LlamaForCausalLM(config).eval()
    raw = os.path.join(os.path.dirname(path), "raw", "model.onnx")
    os.makedirs(os.path.dirname(raw), exist_ok=True)
    with torch.no_grad():
        export_hf_decoders.export_model(model, exporter, raw, external_data=True)
    del model
    m = onnx.load(raw)
    if dtype != "float32":
        import convert_float_precision as cfp
        cfp.convert(m, onnx.TensorProto.BFLOAT16 if dtype == "bfloat16" else onnx.TensorProto.FLOAT16)
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=os.path.basename(path) + ".data", size_threshold=1024)
    shutil.rmtree(os.path.dirname(raw))
    print(f"transformers {spec} (transformers {transformers.__version__}, torch {torch.__version__}): exported, "
          f"{dtype}, in {time.time() - t0:.0f} s", flush=True)
    return path


def ort_session(path, batch, P, feeds, c, tdt, dev):
    """onnxruntime's CUDA execution provider on the model file at this batch and past, bound to the
    same input buffers as onyx's sessions and to output buffers of its own: (label, OrtStep,
    outputs), with CUDA graphs where onnxruntime can capture the step, else without (the reason
    printed); None where neither loads."""
    import ort_decode
    outs = {"logits": torch.empty((batch, 1, c["vocab"]), dtype=tdt, device=dev)}
    for i in range(c["layers"]):
        for kind in ("key", "value"):
            outs[f"present.{i}.{kind}"] = torch.empty((batch, c["kv_heads"], P + 1, c["head_dim"]), dtype=tdt,
                                                      device=dev)
    for graph in (True, False):
        label = "onnxruntime CUDA graph" if graph else "onnxruntime CUDA EP"
        t0 = time.time()
        try:
            step = ort_decode.OrtStep(path, ort_decode.decoder_dims(batch, P), cuda_graph=graph,
                                      device_id=dev.index or 0)
            step.bind(feeds, outs)
            for _ in range(3):  # warm-up; with graphs, the capture
                step.run()
            torch.cuda.synchronize()
        except Exception as e:  # report, and go on without graphs or without onnxruntime
            print(f"{label}, batch {batch}, past {P}: failed: {type(e).__name__}: {str(e)[:600]}", flush=True)
            continue
        import onnxruntime
        print(f"{label} (onnxruntime {onnxruntime.__version__}) session at batch {batch}, past {P} loaded and "
              f"warmed in {time.time() - t0:.1f} s"
              + (f"; {step.rewritten} bfloat16 Reciprocal nodes run as Div(1, x) (no bfloat16 Reciprocal kernel)"
                 if step.rewritten else ""), flush=True)
        return label, step, outs
    return None


def int4_models(args, c, bw):
    """The --int4-block models (made once per machine, kept in /tmp beside the 16-bit one): {block: path}."""
    paths = {}
    for block in args.int4_block:
        qpath = os.path.join(tempfile.gettempdir(), f"onyx_llama_1b_{args.dtype}_{args.layers}_int4_b{block}",
                             "llama_1b.onnx")
        if not os.path.isfile(qpath + ".data"):
            os.makedirs(os.path.dirname(qpath), exist_ok=True)
            make_model(qpath, args.dtype, args.layers, bits=4, block=block)
        paths[block] = qpath
        qbytes = os.path.getsize(qpath + ".data")
        print(f"int4 blocks of {block}: weights {qbytes / 1e9:.3f} GB (packed values, bf16 scales, the embedding table "
              f"for the Gather), floor without the table {(qbytes - c['vocab'] * c['hidden'] * 2) / bw * 1e3:.3f} "
              f"ms/step", flush=True)
    return paths


def generate_modes(args, c, path, P, batch, g, tag=""):
    """The generation loop greedy, and with --sample sampling too; `tag` begins each row's label."""
    modes = [("greedy", {"do_sample": False})]
    if args.sample:
        modes += [("t 0.6, top-p 0.9", {"do_sample": True, "temperature": 0.6, "top_p": 0.9}),
                  ("t 0.6, top-k 50, top-p 0.9", {"do_sample": True, "temperature": 0.6, "top_k": 50, "top_p": 0.9})]
    if args.no_run_ahead_too:
        modes = [m for mode, search in modes
                 for m in ((mode, search), (f"{mode}, no run-ahead", dict(search, run_ahead=False)))]
    settings = [("env", s) for s in args.env] + [("options", s) for s in args.options]
    settings = [s for _ in range(args.rounds) for s in settings] if settings else [(None, None)]
    for kind, setting in settings:
        pairs = [kv.split("=", 1) for kv in setting.split(",")] if setting else []
        options = {}
        for k, v in pairs:
            if kind == "env":
                os.environ[k] = v
            else:
                options[k] = {"true": True, "false": False}.get(v.lower(), None)
                if options[k] is None:
                    options[k] = float(v) if "." in v else int(v)
        for mode, search in modes:
            label = tag + (f"{mode}, {setting}" if setting else mode)
            try:
                generate_steps(args, c, path, P, batch, g, label, search, options)
            except Exception as e:  # report and go on
                print(f"onyx generate ({label}), batch {batch}, past {P} failed: {type(e).__name__}: {e}", flush=True)
        if kind == "env":
            for k, _ in pairs:
                os.environ.pop(k, None)


def generate_steps(args, c, path, P, batch, g, mode="greedy", search=None, options=None):
    """onyx's generation loop on the same model: a folder beside it (the model copied, a
    config.json), prompts of P random ids per row, then args.generate decode steps (greedy, or
    sampling as `search` says), each timed from the call to the tokens on the host (the step's
    graph replay, the sampler on the device, the ids read back): what `onyx generate` and onyx serve pay per token. The first steps (the
    one that captures, and a few after) are left out of the median."""
    import json
    import shutil
    import onyx.genai as og
    from onyx import _onyx
    folder = os.path.join(os.path.dirname(path), "generate")
    os.makedirs(folder, exist_ok=True)
    for f in (os.path.basename(path), os.path.basename(path) + ".data"):
        # A copy: onyx refuses external data outside the folder (so no symbolic link), and onnx
        # refuses a data file with several hard links.
        if not os.path.exists(os.path.join(folder, f)):
            shutil.copyfile(os.path.join(os.path.dirname(path), f), os.path.join(folder, f))
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": c["hidden"], "num_attention_heads": c["heads"],
                   "num_key_value_heads": c["kv_heads"], "head_dim": c["head_dim"], "vocab_size": c["vocab"],
                   "max_position_embeddings": c["max_pos"], "bos_token_id": 128000, "eos_token_id": 128001}, f)
    warm = 8
    budget = warm + args.generate + 3 * (args.profile or 0) + 16  # new tokens, with room to spare
    if P + budget > c["max_pos"]:  # the rotary table ends at max_pos: start the prompt earlier
        P = c["max_pos"] - budget
    t0 = time.time()
    model = og.Model(folder, device="cuda:0", capture="require", session_options=options)
    print(f"onyx generate: {folder} loaded in {time.time() - t0:.1f} s; cache {model.cache_mode}; "
          f"RotaryCacheAttention nodes {model._m.rotary_attention_nodes()}", flush=True)
    rows = [torch.randint(0, c["vocab"], (P,), generator=g).tolist() for _ in range(batch)]
    gen = _onyx.Generator(model._m)
    t0 = time.perf_counter()
    gen.begin(rows, {"max_new_tokens": budget, **(search or {"do_sample": False})}, False)
    gen.next()  # the prompt's step
    prefill = (time.perf_counter() - t0) * 1e3
    times = []
    for _ in range(warm + args.generate):
        if gen.done:
            break
        t0 = time.perf_counter()
        gen.next()
        times.append((time.perf_counter() - t0) * 1e3)
    steady = times[warm:]
    if steady:
        med = statistics.median(steady)
        print(f"| onyx generate ({mode}) | batch {batch} | past {P}-{P + len(times)} | {med:.3f} ms/step "
              f"(min {min(steady):.3f}, {len(steady)} steps) | {batch * 1e3 / med:.0f} tokens/s | prompt of {P} in "
              f"{prefill:.1f} ms (with its first token) |", flush=True)
    else:
        print(f"onyx generate ({mode}), batch {batch}: stopped after {len(times)} steps (EOS)", flush=True)
    print(f"    onyx generate capture report: {model.capture_report()}", flush=True)
    kernels = model._m.step_kernels()
    print(f"    onyx generate step: {sum(kernels.values())} kernels: "
          + ", ".join(f"{k} {v}" for k, v in sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0]))), flush=True)
    if args.profile and not gen.done:
        profile(f"onyx generate ({mode}), batch {batch}", lambda: None if gen.done else gen.next(), args.profile)
    gen.stop()
    del gen, model


if __name__ == "__main__":
    main()
