"""A model folder of the 1.24B Llama-3.2-1B-shaped decoder for `onyx serve` on the GPU machine.

The decoder is bench/llama_decode_gpu.py's (tools/gen_models.py's Llama graph at that shape,
random weights, bfloat16); the folder gets an Optimum-style config.json and a Llama 3
tokenizer.json (128,256 ids, the vocabulary of the model), copied from --tokenizer-dir.
Made once per machine into DIR (skipped when DIR/model.onnx.data exists).

  python3 make_serve_folder.py DIR --tokenizer-dir TOKDIR [--dtype bfloat16] [--layers 16]
"""
import argparse
import json
import os
import shutil
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "tools")]
import llama_decode_gpu  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--layers", type=int, default=16)
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    model = os.path.join(a.dir, "model.onnx")
    if not os.path.isfile(model + ".data"):
        llama_decode_gpu.make_model(model, a.dtype, a.layers)
    c = dict(llama_decode_gpu.LLAMA_1B, layers=a.layers)
    with open(os.path.join(a.dir, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
                   "num_key_value_heads": c["kv_heads"], "hidden_size": c["hidden"], "head_dim": c["head_dim"],
                   "vocab_size": c["vocab"], "max_position_embeddings": c["max_pos"], "bos_token_id": 128000,
                   "eos_token_id": 128001, "tie_word_embeddings": True}, f)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(a.tokenizer_dir, name), os.path.join(a.dir, name))
    print(f"folder: {a.dir}")


if __name__ == "__main__":
    main()
