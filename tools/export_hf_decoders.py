"""Tiny random Hugging Face decoders exported to ONNX the ways users export them, for
tools/fusion_coverage.py: torch.onnx's TorchScript exporter (dynamo=False, opset 18) and its
torch.export-based exporter (dynamo=True), each over eager and scaled_dot_product_attention
("sdpa") attention. The graph: input_ids, attention_mask, position_ids and past key/values in,
logits and present key/values out (make_genai_fixtures.py's configs and seeds).

Runs in .venv-fixtures (torch, transformers 5; made by tools/make_genai_fixtures.py):
    .venv-fixtures/bin/python tools/export_hf_decoders.py OUT_DIR [--arch llama qwen2 ...]
Writes one folder a model, OUT_DIR/{arch}-{attention}-{exporter}/: model.onnx (the exporters'
per-node metadata dropped), config.json, the llama fixture's tokenizer (its 1,024 ids are the
vocabulary) and reference.json (transformers' greedy tokens for PROMPTS), so onyx.genai loads it
as a user's folder. An export that fails is reported and skipped. tests/fixtures/exports holds two
of them (llama-sdpa-dynamo, llama-sdpa-torchscript), made by this script.
"""
import argparse
import json
import os
import shutil
import sys
import traceback

import torch
import transformers
from transformers import DynamicCache

TOKENIZER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "genai", "llama-optimum")
PROMPTS = [[5, 17, 33, 8], [60, 4, 99, 100, 101, 7, 8], [3]]
NEW_TOKENS = 16


def fixtures():
    """tools/make_genai_fixtures.py (its configs, seeds and tokenizer files), imported on first use."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import make_genai_fixtures
    return make_genai_fixtures


def export(arch, attention, exporter, folder):
    """A tiny random `arch` decoder exported as `exporter` over `attention` into `folder`, with a
    config.json, the llama fixture's tokenizer and transformers' greedy tokens (reference.json)."""
    mgf = fixtures()
    ids = json.load(open(os.path.join(TOKENIZER, "config.json")))
    config_class, model_class, options = mgf.ARCH_MODELS[arch]
    config = getattr(transformers, config_class)(**{**mgf.COMMON_CONFIG, **options}, vocab_size=mgf.TOKENIZER_VOCAB,
                                                 **{k: ids[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")})
    config._attn_implementation = attention
    torch.manual_seed(mgf.ARCH_SEEDS[arch])
    model = getattr(transformers, model_class)(config).eval()
    os.makedirs(folder, exist_ok=True)
    config.to_json_file(os.path.join(folder, "config.json"))
    for name in mgf.TOKENIZER_FILES:
        shutil.copy(os.path.join(TOKENIZER, name), os.path.join(folder, name))
    with torch.no_grad():  # transformers' greedy tokens after each prompt (up to an end of sequence)
        reference = [model.generate(torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                    do_sample=False, max_new_tokens=NEW_TOKENS,
                                    pad_token_id=ids["pad_token_id"])[0, len(p):].tolist() for p in PROMPTS]
    json.dump({"prompts": PROMPTS, "greedy": reference, "transformers": transformers.__version__,
               "torch": torch.__version__, "exporter": exporter, "attention": attention},
              open(os.path.join(folder, "reference.json"), "w"))
    export_model(model, exporter, os.path.join(folder, "model.onnx"))
    strip_metadata(os.path.join(folder, "model.onnx"))


def strip_metadata(path):
    """Drops the exporters' per-node metadata and doc strings (stack traces, module paths): what
    the graph computes stays; a dynamo export is about a third smaller."""
    import onnx
    m = onnx.load(path)
    for n in m.graph.node:
        del n.metadata_props[:]
        n.doc_string = ""
    del m.graph.metadata_props[:]
    m.graph.doc_string = ""
    onnx.save(m, path)


def export_model(model, exporter, path, external_data=False):
    """`model` (a transformers causal LM, its attention implementation set) exported to `path` by
    torch.onnx's TorchScript exporter ("torchscript", opset 18) or its torch.export-based one
    ("dynamo"): input_ids, attention_mask, position_ids and past_key_values.N.key/value in,
    logits and present.N.key/value out, batch and lengths dynamic. With external_data, the weights
    go to files beside it (models past protobuf's 2 GB)."""
    config = model.config
    layers = config.num_hidden_layers

    class Decoder(torch.nn.Module):  # flat past in, flat present out
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, position_ids, past):
            cache = DynamicCache(config=config)
            for i in range(layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.m(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                         past_key_values=cache, use_cache=True)
            res = [out.logits]
            for i in range(layers):
                res += [out.past_key_values.layers[i].keys, out.past_key_values.layers[i].values]
            return tuple(res)

    b, s, p = 2, 3, 5
    kv = config.num_key_value_heads
    hd = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    args = (torch.randint(0, config.vocab_size, (b, s)), torch.ones(b, p + s, dtype=torch.long),
            torch.arange(p, p + s).expand(b, s), tuple(torch.randn(b, kv, p, hd) for _ in range(2 * layers)))
    names_in = ["input_ids", "attention_mask", "position_ids"] + [
        f"past_key_values.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    names_out = ["logits"] + [f"present.{i}.{k}" for i in range(layers) for k in ("key", "value")]
    if exporter == "dynamo":
        d = torch.export.Dim.DYNAMIC
        shapes = {"input_ids": {0: d, 1: d}, "attention_mask": {0: d, 1: d}, "position_ids": {0: d, 1: d},
                  "past": tuple({0: d, 2: d} for _ in range(2 * layers))}
        # Passing the ExportedProgram: the exporter's own torch.export call fails on the guards
        # of a tuple argument in torch 2.9.
        ep = torch.export.export(Decoder(model), args, dynamic_shapes=shapes, strict=False)
        torch.onnx.export(ep, args, path, input_names=names_in, output_names=names_out, dynamo=True,
                          external_data=external_data)
    else:
        axes = {"input_ids": {0: "batch", 1: "sequence"}, "attention_mask": {0: "batch", 1: "total_sequence"},
                "position_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
        axes.update({n: {0: "batch", 2: "past_sequence"} for n in names_in[3:]})
        axes.update({n: {0: "batch", 2: "total_sequence"} for n in names_out[1:]})
        torch.onnx.export(Decoder(model), args, path, input_names=names_in, output_names=names_out,
                          dynamic_axes=axes, opset_version=18, dynamo=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--arch", nargs="*", default=["llama", "qwen2", "mistral", "phi3"])
    ap.add_argument("--attention", nargs="*", default=["eager", "sdpa"])
    ap.add_argument("--exporter", nargs="*", default=["torchscript", "dynamo"])
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for arch in args.arch:
        for attention in args.attention:
            for exporter in args.exporter:
                path = os.path.join(args.out, f"{arch}-{attention}-{exporter}")
                try:
                    export(arch, attention, exporter, path)
                    print(f"{path}: exported", flush=True)
                except Exception as e:  # report and go on
                    traceback.print_exc(limit=2)
                    print(f"{path}: export failed: {type(e).__name__}: {str(e)[:300]}", flush=True)


if __name__ == "__main__":
    main()
