"""What onyx's load-time fusions make of exported decoders (tools/export_hf_decoders.py's), on
the CPU with the CUDA defaults forced on (attention, linear, rotary-cache fusions): for each file,
the largest relative difference from onnxruntime over prefills and decode steps with fresh random
inputs (left padding on one row), unfused and fused, and the nodes one decode step runs, by op.

    .venv/bin/python tools/fusion_coverage.py DIR_OR_FILES...
    .venv/bin/python tools/fusion_coverage.py --generate DIR...   (export_hf_decoders.py's folders:
        onyx.genai's greedy tokens, unfused and fused, against transformers' in reference.json, and
        the kernels the fused loop's decode step runs: its plan's steps, views and folded nodes aside)
"""
import collections
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

import onyx

SHAPES = [(2, 7, 0), (2, 1, 9), (1, 1, 30), (3, 4, 5)]  # batch, new tokens, past


def feeds(m, rng, b, s, p):
    keys = [i for i in m.graph.input if i.name.endswith(".key")]
    dims = keys[0].type.tensor_type.shape.dim
    vocab = next(o for o in m.graph.output if o.name == "logits").type.tensor_type.shape.dim[2].dim_value or 256
    f = {"input_ids": rng.integers(0, vocab, (b, s)), "attention_mask": np.ones((b, p + s), np.int64),
         "position_ids": np.arange(p, p + s)[None].repeat(b, 0).astype(np.int64)}
    f["attention_mask"][0, :2] = 0
    for i in range(len(keys)):
        for k in ("key", "value"):
            f[f"past_key_values.{i}.{k}"] = rng.standard_normal((b, dims[1].dim_value, p, dims[3].dim_value)).astype(
                np.float32)
    return f


def check(path):
    m = onnx.load(path, load_external_data=False)
    rng = np.random.default_rng()
    ref = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    fused_opts = onyx.SessionOptions()
    fused_opts.fuse_attention = fused_opts.fuse_linear = fused_opts.fuse_rotary_cache = True
    engines = {"unfused": onyx.InferenceSession(path, onyx.SessionOptions()),
               "fused": onyx.InferenceSession(path, fused_opts)}
    worst = dict.fromkeys(engines, 0.0)
    profile = onyx.RunOptions()
    profile.profile = True
    hist = {}
    for b, s, p in SHAPES:
        f = feeds(m, rng, b, s, p)
        want = ref.run(None, f)
        for label, sess in engines.items():
            got = sess.run(None, f, profile)
            for x, y in zip(want, got):
                worst[label] = max(worst[label], float(np.abs(x - y).max() / max(1e-6, np.abs(x).max())))
            if label == "fused" and s == 1 and not hist:
                hist = collections.Counter(n["op"] for n in sess.last_run_stats()["nodes"])
    key = ("Attention", "onyx::RotaryCache", "Softmax", "MatMul")
    rest = ", ".join(f"{k.replace('onyx::', '')} {v}" for k, v in sorted(hist.items(), key=lambda kv: -kv[1])
                     if k not in key)
    name = os.path.basename(os.path.dirname(path)) if os.path.basename(path) == "model.onnx" else os.path.basename(path)
    return (f"| {name} | {worst['unfused']:.1e} | {worst['fused']:.1e} | {sum(hist.values())} | " +
            " | ".join(str(hist.get(k, 0)) for k in key) + f" | {rest} |")


def greedy(og, model, prompt, new_tokens):
    """onyx.genai's loop (as onnxruntime-genai's examples write it): the tokens after the prompt."""
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(prompt) + new_tokens)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(prompt, np.int32))
    out = []
    while not gen.is_done():
        gen.generate_next_token()
        out.append(int(gen.get_next_tokens()[0]))
    return out


def generate(folder):
    """A folder of tools/export_hf_decoders.py's: onyx.genai's greedy tokens, unfused and with the
    CUDA path's fusions forced on, against transformers' (reference.json)."""
    import json

    import onyx.genai as og
    ref = json.load(open(os.path.join(folder, "reference.json")))
    plain = og.Model(folder)
    fused = og.Model(folder, session_options={"fuse_attention": True, "fuse_rotary_cache": True,
                                              "fuse_rotary_attention": True, "fuse_linear": True})
    same = {"unfused": 0, "fused": 0}
    for prompt, want in zip(ref["prompts"], ref["greedy"]):
        for label, model in (("unfused", plain), ("fused", fused)):
            same[label] += greedy(og, model, prompt, len(want)) == want
    n = len(ref["prompts"])
    kernels = fused._m.step_kernels()
    shown = ", ".join(f"{k.replace('onyx::', '').replace('onyx.genai::', '')} {v}"
                      for k, v in sorted(kernels.items(), key=lambda kv: (-kv[1], kv[0])))
    return (f"| {os.path.basename(folder)} | {same['unfused']}/{n} | {same['fused']}/{n} | "
            f"{fused._m.rotary_attention_nodes()} | {fused.cache_mode} | {sum(kernels.values())} | {shown} |")


def main():
    if sys.argv[1:2] == ["--generate"]:
        print("| export | greedy = transformers', unfused | fused | RotaryCacheAttention | cache | "
              "fused decode step: kernels | by op |")
        print("|---|---:|---:|---:|---|---:|---|")
        for a in sys.argv[2:]:
            for folder in sorted(glob.glob(os.path.join(a, "*", "reference.json"))) or [os.path.join(a, "x")]:
                folder = os.path.dirname(folder)
                try:
                    print(generate(folder), flush=True)
                except Exception as e:  # report and go on
                    print(f"| {os.path.basename(folder)} | failed: {type(e).__name__}: {str(e)[:300]} | | | | | |", flush=True)
        return
    paths = []
    for a in sys.argv[1:]:
        if os.path.isdir(a):
            paths += sorted(glob.glob(os.path.join(a, "*.onnx")) + glob.glob(os.path.join(a, "*", "model.onnx")))
        else:
            paths.append(a)
    print("| export | max rel. diff, unfused | fused | decode-step nodes | Attention | RotaryCache | Softmax | "
          "MatMul | the other nodes |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for p in paths:
        try:
            print(check(p), flush=True)
        except Exception as e:  # report and go on
            print(f"| {os.path.basename(p)} | failed: {type(e).__name__}: {str(e)[:200]} | | | | | | | |", flush=True)


if __name__ == "__main__":
    main()
