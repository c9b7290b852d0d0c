#!/usr/bin/env python3
"""Makes a ~100M-parameter random-weight Llama decoder folder for bench/genai_cpu.py.

The same pipeline as tools/make_genai_fixtures.py (whose functions this imports): a Hugging Face
LlamaForCausalLM with fixed-seed random weights, exported by onnxruntime-genai's model builder
(`-e cpu -p fp32|int4`) into a folder with model.onnx, model.onnx.data, genai_config.json and the
tokenizer. Only the size differs from the fixtures, and EOS:

  hidden 768, 16 layers, 12 attention heads over 4 KV heads (head size 64), intermediate 2048,
  vocabulary 1024 (the fixtures' llama3-style tokenizer, copied from
  tests/fixtures/genai/llama-optimum), context_length 2048, untied embeddings, seed 20261301:
  102.3M parameters (100.7M in the 16 layers, 1.6M in embeddings and lm_head).

The fixtures scale lm_head's EOS row by 1.5 so that some prompts stop early; here it is zeroed
(EOS's logit is always 0, far below the top of 1024 logits drawn with std ~5), so that generation
runs to --max-new-tokens and every run times the same number of steps.

int4 is the builder's default for the CPU (block 32, symmetric, accuracy_level 4: onnxruntime
quantizes the activations to int8); --accuracy-level 1 makes the twin that computes in fp32.

Needs torch, transformers and onnxruntime-genai (the fixtures' environment, .venv-fixtures):

  .venv-fixtures/bin/python bench/make_genai_bench_model.py [OUT_DIR] [--precision fp32|int4]
                                                             [--accuracy-level N]

OUT_DIR defaults to build-bench/genai/llama-100m-<precision> (gitignored: /build*/). Takes a
20 seconds on 2 cores; the folder is 410 MB in fp32, 67 MB in int4.
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tools"))
import make_genai_fixtures as fixtures  # noqa: E402  (stdlib imports only; its main() is guarded)

# The fixtures' config (COMMON_CONFIG: initializer_range 0.2, RMSNorm eps 1e-5, RoPE theta 1e4,
# silu, untied embeddings), at a larger size.
BENCH_CONFIG = dict(fixtures.COMMON_CONFIG, hidden_size=768, num_hidden_layers=16,
                    num_attention_heads=12, num_key_value_heads=4, intermediate_size=2048,
                    max_position_embeddings=2048)
BENCH_SEED = 20261301
EOS_ROW_SCALE = 0.0
TOKENIZER_SOURCE = REPO_ROOT / "tests" / "fixtures" / "genai" / "llama-optimum"  # transformers 4.x form


def make_hf(tok_dir: Path, out_dir: Path):
    """fixtures.make_hf_model with the bench config, seed and EOS scale in place of the fixtures'
    (it reads them from module globals, which are restored afterwards)."""
    saved = fixtures.COMMON_CONFIG, fixtures.ARCH_SEEDS, fixtures.EOS_ROW_SCALE
    fixtures.COMMON_CONFIG, fixtures.ARCH_SEEDS, fixtures.EOS_ROW_SCALE = \
        BENCH_CONFIG, {"llama": BENCH_SEED}, EOS_ROW_SCALE
    try:
        return fixtures.make_hf_model("llama", tok_dir, out_dir)
    finally:
        fixtures.COMMON_CONFIG, fixtures.ARCH_SEEDS, fixtures.EOS_ROW_SCALE = saved


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, nargs="?", help="output folder (replaced if it exists)")
    ap.add_argument("--precision", choices=["fp32", "int4"], default="fp32")
    ap.add_argument("--accuracy-level", type=int, choices=[1, 2, 3, 4],
                    help="int4 only: MatMulNBits accuracy_level (the builder's CPU default is 4)")
    args = ap.parse_args()
    try:
        import torch  # noqa: F401
        import onnxruntime_genai  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        sys.exit(f"make_genai_bench_model: {e}; run it with the fixtures' environment "
                 "(.venv-fixtures/bin/python, see tools/make_genai_fixtures.py)")
    import torch
    torch.set_num_threads(1)

    export = f"builder-{args.precision}"
    if args.accuracy_level is not None:
        if args.precision != "int4":
            ap.error("--accuracy-level applies to int4 only")
        export = f"{export}-acc{args.accuracy_level}"
        fixtures.BUILDER_EXPORTS.setdefault(
            export, ["-p", "int4", "--extra_options", f"accuracy_level={args.accuracy_level}"])
    suffix = args.precision + (f"-acc{args.accuracy_level}" if args.accuracy_level else "")
    out = args.out or REPO_ROOT / "build-bench" / "genai" / f"llama-100m-{suffix}"

    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="genai-bench-") as tmp:
        work = Path(tmp)
        tok_dir = work / "tokenizer"
        tok_dir.mkdir()
        for name in fixtures.TOKENIZER_FILES:
            shutil.copy(TOKENIZER_SOURCE / name, tok_dir / name)
        hf_dir = work / "hf"
        model = make_hf(tok_dir, hf_dir)
        n_params = sum(p.numel() for p in model.parameters())
        print(f"make_genai_bench_model: {n_params / 1e6:.1f}M parameters, seed {BENCH_SEED}", flush=True)
        del model
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        try:
            fixtures.export_builder(hf_dir, out, export, work)
        except Exception:
            log = work / f"{out.name}.log"
            if log.exists():
                sys.stderr.write(log.read_text()[-4000:])
            raise
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"make_genai_bench_model: {out} ({size / 1e6:.0f} MB) in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
