#!/usr/bin/env python3
"""Exports the CPU suite of bench/cpu_vs_onnxruntime.py: real architectures with random weights.

Needs torch, torchvision and transformers, which onyx itself never needs: install them into a
separate, bench-only environment (not .venv), e.g.

    python3 -m venv ~/bench-venv && ~/bench-venv/bin/pip install torch==2.6.0 torchvision==0.21.0 \
        transformers==4.52.4 onnx onnxscript

(the combination the fifth session's suite was exported with: transformers 4.56 and 4.57 build the
causal masks with vmap, which the TorchScript exporter of torch 2.6 and 2.9 cannot trace, failing
the gpt2 and llama exports with `RuntimeError: unordered_map::at`)

and run ``~/bench-venv/bin/python bench/cpu_suite_models.py --out build-bench/cpu-suite``. No
weights are downloaded: every model is built from its configuration class with randomly
initialised weights (seeded), then exported by torch.onnx's TorchScript exporter at opset 17
with static shapes (batch 1), as a deployment export would be. Each model is written as
NAME.onnx (with external data beside it when over 2 GB) plus NAME.inputs.npz (the feeds).

The suite: bert-base (sequence 128), vit-base (224 x 224), gpt2-small prefill (128 tokens) and
decode (1 token over a past of 128), a 124M-parameter Llama (hidden 768, 12 layers, 12 heads over
4 KV heads, vocabulary 32000) prefill and decode, resnet50 and mobilenet_v3-large (224 x 224).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import torch

SEED = 20261202
OPSET = 17
PROMPT = 128  # prefill tokens, and the past of a decode step


def _export(module, args, names_in, names_out, path):
    module.eval()
    with torch.no_grad():
        torch.onnx.export(module, args, path, input_names=names_in, output_names=names_out, opset_version=OPSET,
                          dynamo=False, do_constant_folding=True)


def _save_inputs(path, feeds):
    np.savez(path, **{k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in feeds.items()})


class _Kwargs(torch.nn.Module):
    """Calls the model with its inputs by name (transformers' forward takes few positionally)."""

    def __init__(self, model, names):
        super().__init__()
        self.model, self.names = model, names

    def forward(self, *args):
        o = self.model(**dict(zip(self.names, args)))
        return tuple(v for v in o.values()) if hasattr(o, "values") else o


def bert(out):
    from transformers import BertConfig, BertModel
    torch.manual_seed(SEED)
    c = BertConfig()
    c._attn_implementation = "eager"
    m = _Kwargs(BertModel(c), ["input_ids", "attention_mask", "token_type_ids"])
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, 30522, (1, PROMPT), generator=g)
    mask = torch.ones(1, PROMPT, dtype=torch.int64)
    types = torch.zeros(1, PROMPT, dtype=torch.int64)
    _export(m, (ids, mask, types), ["input_ids", "attention_mask", "token_type_ids"],
            ["last_hidden_state", "pooler_output"], f"{out}/bert-base.onnx")
    _save_inputs(f"{out}/bert-base.inputs.npz", {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})


def vit(out):
    from transformers import ViTConfig, ViTModel
    torch.manual_seed(SEED)
    c = ViTConfig()
    c._attn_implementation = "eager"
    m = _Kwargs(ViTModel(c, add_pooling_layer=False), ["pixel_values"])
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED))
    _export(m, (x,), ["pixel_values"], ["last_hidden_state"], f"{out}/vit-base.onnx")
    _save_inputs(f"{out}/vit-base.inputs.npz", {"pixel_values": x})


class _Step(torch.nn.Module):
    """A causal LM step with its past as plain tensors: (ids, mask, positions, past...) ->
    (logits, present...), the layout onnxruntime-genai and Optimum exports use."""

    def __init__(self, model, layers):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, ids, mask, pos, *past):
        from transformers import DynamicCache
        cache = DynamicCache()
        for i in range(self.layers if past else 0):
            cache.update(past[2 * i], past[2 * i + 1], i)
        o = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True)
        flat = []
        for i in range(self.layers):
            layer = o.past_key_values.layers[i] if hasattr(o.past_key_values, "layers") else None
            k, v = (layer.keys, layer.values) if layer is not None else o.past_key_values[i]
            flat += [k, v]
        return (o.logits, *flat)


def _causal_lm(out, name, model, layers, kv_heads, head_dim, vocab):
    model.eval()
    step = _Step(model, layers)
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (1, PROMPT), generator=g)
    mask = torch.ones(1, PROMPT, dtype=torch.int64)
    pos = torch.arange(PROMPT).unsqueeze(0)
    present = [f"present.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    _export(step, (ids, mask, pos), ["input_ids", "attention_mask", "position_ids"], ["logits", *present],
            f"{out}/{name}-prefill.onnx")
    _save_inputs(f"{out}/{name}-prefill.inputs.npz", {"input_ids": ids, "attention_mask": mask, "position_ids": pos})
    past = [torch.randn(1, kv_heads, PROMPT, head_dim, generator=g) for _ in range(2 * layers)]
    ids1 = torch.randint(0, vocab, (1, 1), generator=g)
    mask1 = torch.ones(1, PROMPT + 1, dtype=torch.int64)
    pos1 = torch.tensor([[PROMPT]])
    past_names = [f"past_key_values.{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
    _export(step, (ids1, mask1, pos1, *past), ["input_ids", "attention_mask", "position_ids", *past_names],
            ["logits", *present], f"{out}/{name}-decode.onnx")
    feeds = {"input_ids": ids1, "attention_mask": mask1, "position_ids": pos1}
    feeds.update({n: t for n, t in zip(past_names, past)})
    _save_inputs(f"{out}/{name}-decode.inputs.npz", feeds)


def gpt2(out):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(SEED)
    c = GPT2Config()
    c._attn_implementation = "eager"
    _causal_lm(out, "gpt2", GPT2LMHeadModel(c), c.n_layer, c.n_head, c.n_embd // c.n_head, c.vocab_size)


def llama(out):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(SEED)
    c = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                    num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, tie_word_embeddings=False)
    c._attn_implementation = "eager"
    _causal_lm(out, "llama-124m", LlamaForCausalLM(c), c.num_hidden_layers, c.num_key_value_heads,
               c.hidden_size // c.num_attention_heads, c.vocab_size)


def _vision(out, name, model):
    model.eval()
    x = torch.randn(1, 3, 224, 224, generator=torch.Generator().manual_seed(SEED))
    _export(model, (x,), ["input"], ["output"], f"{out}/{name}.onnx")
    _save_inputs(f"{out}/{name}.inputs.npz", {"input": x})


def resnet50(out):
    import torchvision
    torch.manual_seed(SEED)
    _vision(out, "resnet50", torchvision.models.resnet50(weights=None))


def mobilenet(out):
    import torchvision
    torch.manual_seed(SEED)
    _vision(out, "mobilenet_v3-large", torchvision.models.mobilenet_v3_large(weights=None))


MODELS = {"bert-base": bert, "vit-base": vit, "gpt2": gpt2, "llama-124m": llama, "resnet50": resnet50,
          "mobilenet_v3-large": mobilenet}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="build-bench/cpu-suite")
    ap.add_argument("--only", nargs="*", choices=sorted(MODELS))
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    torch.set_num_threads(1)
    for name in a.only or MODELS:
        print(f"exporting {name}", file=sys.stderr, flush=True)
        MODELS[name](a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
