"""Writes input sets (.npy per input) for the generated models: one folder per
model and case under OUT, e.g. OUT/decoder_large.decode/. Values are fresh random
each call (the seed is printed); token ids stay inside the vocabulary and masks are
all ones.

usage: python tools/make_inputs.py MODELS_DIR OUT_DIR
"""
import os
import sys

import numpy as np
import onnx

# (model, case) -> symbolic dimension sizes
CASES = {
    ("mlp", "b4"): dict(batch=4),
    ("bert_layer", "b2s16"): dict(batch=2, sequence=16),
    ("llama_layer", "prefill"): dict(batch=1, sequence=8, past_sequence=0),
    ("llama_layer", "decode"): dict(batch=1, sequence=1, past_sequence=7),
    ("decoder_large", "prefill"): dict(batch=1, sequence=128, past_sequence=0),
    ("decoder_large", "decode"): dict(batch=1, sequence=1, past_sequence=127),
    ("decoder_large", "decode_b4"): dict(batch=4, sequence=1, past_sequence=127),
    ("decoder_large", "decode_b16"): dict(batch=16, sequence=1, past_sequence=127),
    ("encoder24_small", "b1s128"): dict(batch=1, sequence=128),
}


def main():
    models, out = sys.argv[1], sys.argv[2]
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    print(f"make_inputs: seed {seed}")
    for (name, case), dims in CASES.items():
        path = os.path.join(models, name + ".onnx")
        if not os.path.exists(path):
            continue
        m = onnx.load(path, load_external_data=False)
        inits = {i.name: i for i in m.graph.initializer}
        vocab = next((list(i.dims)[0] for n, i in inits.items() if "embed" in n or "word_embeddings" in n), 10)
        dims = dict(dims)
        dims["total_sequence"] = dims.get("past_sequence", 0) + dims.get("sequence", 0)
        folder = os.path.join(out, f"{name}.{case}")
        os.makedirs(folder, exist_ok=True)
        for inp in m.graph.input:
            if inp.name in inits:
                continue
            t = inp.type.tensor_type
            shape = [d.dim_value if d.HasField("dim_value") else dims[d.dim_param] for d in t.shape.dim]
            if t.elem_type == onnx.TensorProto.INT64:
                if "mask" in inp.name:
                    a = np.ones(shape, np.int64)
                elif "position" in inp.name:
                    start = dims.get("past_sequence", 0)
                    a = np.broadcast_to(np.arange(start, start + shape[-1], dtype=np.int64), shape).copy()
                else:
                    a = rng.integers(0, vocab, size=shape, dtype=np.int64)
            else:
                a = rng.standard_normal(shape).astype(onnx.helper.tensor_dtype_to_np_dtype(t.elem_type))
            np.save(os.path.join(folder, inp.name + ".npy"), a)


if __name__ == "__main__":
    main()
