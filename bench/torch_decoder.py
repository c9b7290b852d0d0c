"""The generated Llama-style decoder, written in PyTorch with the ONNX model's own
weights, for a side-by-side eager step latency against onyx on the same GPU.

It first checks that its logits match onyx's saved logits for the same inputs (so the
two compute the same function), then times decode steps: batch 1, one new token over a
past of --past tokens, median of --repeat steps after warm-up, inputs already on the GPU,
torch.cuda.synchronize() after each step.

usage: python3 torch_decoder.py MODEL.onnx INPUT_DIR [--onyx-logits FILE.npy] [--past N]
"""
import argparse
import math
import statistics
import time

import numpy as np
import onnx
from onnx import numpy_helper
import torch


def load_weights(path):
    """The model's initializers as torch tensors (bfloat16 ones too, which numpy cannot hold)."""
    m = onnx.load(path)
    out = {}
    for t in m.graph.initializer:
        a = numpy_helper.to_array(t)
        if t.data_type == onnx.TensorProto.BFLOAT16:
            out[t.name] = torch.from_numpy(np.ascontiguousarray(a).view(np.uint16).copy()).view(torch.bfloat16)
        else:
            out[t.name] = torch.from_numpy(a.copy())
    return out


class Decoder:
    def __init__(self, w, device, sdpa=False):
        self.sdpa = sdpa  # attention through torch.nn.functional.scaled_dot_product_attention
        self.w = {k: v.to(device) for k, v in w.items()}
        self.layers = sum(1 for k in w if k.endswith("input_layernorm.weight"))
        q = self.w["model.layers.0.self_attn.q_proj.weight"]
        k = self.w["model.layers.0.self_attn.k_proj.weight"]
        self.head_dim = self.w["model.rotary_emb.cos_cached"].shape[1]
        self.heads = q.shape[1] // self.head_dim
        self.kv_heads = k.shape[1] // self.head_dim

    def rms(self, x, name):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.w[name] * (x * torch.reciprocal(torch.sqrt(var + 1e-6)))

    def forward(self, ids, mask, pos, past):
        w, hd = self.w, self.head_dim
        b, s = ids.shape
        h = w["model.embed_tokens.weight"][ids]
        cos = w["model.rotary_emb.cos_cached"][pos].unsqueeze(1)
        sin = w["model.rotary_emb.sin_cached"][pos].unsqueeze(1)
        total = mask.shape[1]
        rows = torch.arange(total - s, total, device=ids.device).unsqueeze(1)
        cols = torch.arange(0, total, device=ids.device).unsqueeze(0)
        blocked = (rows < cols) | (mask == 0).unsqueeze(1).unsqueeze(2)
        # float32's lowest, in the model's type (in bfloat16 it rounds to -inf, as in the converted model)
        low = torch.full((), torch.finfo(torch.float32).min, dtype=torch.float32, device=h.device).to(h.dtype)
        mask_add = torch.where(blocked, low, torch.zeros((), dtype=h.dtype, device=h.device))

        def rope(x):
            half = hd // 2
            rot = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
            return x * cos + rot * sin

        presents = []
        for i in range(self.layers):
            p = f"model.layers.{i}"
            x = self.rms(h, f"{p}.input_layernorm.weight")
            q = (x @ w[f"{p}.self_attn.q_proj.weight"]).view(b, s, -1, hd).transpose(1, 2)
            k = (x @ w[f"{p}.self_attn.k_proj.weight"]).view(b, s, -1, hd).transpose(1, 2)
            v = (x @ w[f"{p}.self_attn.v_proj.weight"]).view(b, s, -1, hd).transpose(1, 2)
            q, k = rope(q), rope(k)
            k = torch.cat([past[i][0], k], dim=2)
            v = torch.cat([past[i][1], v], dim=2)
            presents.append((k, v))
            rep = self.heads // self.kv_heads
            if self.sdpa:  # PyTorch's fused attention (flash for a causal prompt without padding)
                causal = total == s and bool(mask.all())
                ctx = torch.nn.functional.scaled_dot_product_attention(
                    q, k, v, attn_mask=None if causal else mask_add, is_causal=causal, enable_gqa=True)
                ctx = ctx.transpose(1, 2).reshape(b, s, -1)
            else:
                kr = k.unsqueeze(2).expand(b, self.kv_heads, rep, total, hd).reshape(b, self.heads, total, hd)
                vr = v.unsqueeze(2).expand(b, self.kv_heads, rep, total, hd).reshape(b, self.heads, total, hd)
                scores = (q @ kr.transpose(2, 3)) * (1.0 / math.sqrt(hd)) + mask_add
                ctx = (torch.softmax(scores, dim=-1) @ vr).transpose(1, 2).reshape(b, s, -1)
            h = h + ctx @ w[f"{p}.self_attn.o_proj.weight"]
            x = self.rms(h, f"{p}.post_attention_layernorm.weight")
            gate = x @ w[f"{p}.mlp.gate_proj.weight"]
            up = x @ w[f"{p}.mlp.up_proj.weight"]
            h = h + (gate * torch.sigmoid(gate) * up) @ w[f"{p}.mlp.down_proj.weight"]
        h = self.rms(h, "model.norm.weight")
        head = w["lm_head.weight"] if "lm_head.weight" in w else w["model.embed_tokens.weight"].t()  # tied
        return h @ head, presents


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("inputs", help="folder with input_ids.npy, attention_mask.npy, position_ids.npy, past_*.npy")
    ap.add_argument("--onyx-logits", help="onyx's logits for the same inputs (.npy), to check agreement")
    ap.add_argument("--past", type=int, default=127)
    ap.add_argument("--repeat", type=int, default=100)
    args = ap.parse_args()
    dev = torch.device("cuda")
    model = Decoder(load_weights(args.model), dev)

    def npy(name):
        return torch.from_numpy(np.load(f"{args.inputs}/{name}.npy")).to(dev)

    ids, mask, pos = npy("input_ids"), npy("attention_mask"), npy("position_ids")
    past = [(npy(f"past_key_values.{i}.key"), npy(f"past_key_values.{i}.value")) for i in range(model.layers)]
    with torch.no_grad():
        logits, _ = model.forward(ids, mask, pos, past)
        if args.onyx_logits:
            ref = np.load(args.onyx_logits)
            got = logits.float().cpu().numpy()
            rel = float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12))
            print(f"torch vs onyx logits: max relative difference {rel:.3e}")
        for _ in range(10):
            model.forward(ids, mask, pos, past)
        torch.cuda.synchronize()
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            model.forward(ids, mask, pos, past)
            torch.cuda.synchronize()
            times.append((time.perf_counter() - t0) * 1e3)
    print(f"torch eager decode step: median {statistics.median(times):.3f} ms, min {min(times):.3f} ms "
          f"({args.repeat} steps, torch {torch.__version__})")


if __name__ == "__main__":
    main()
