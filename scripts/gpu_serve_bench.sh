#!/usr/bin/env bash
# onyx serve's load test on the GPU machine (staged into gpu/ by scripts/gpu_stage.sh): the
# 1.24B Llama-3.2-1B-shaped decoder (bfloat16, random weights) in a folder made once in /tmp,
# served on cuda:0 with captured decode steps, loaded by bench/serve_load.py at 1, 8, 32 and
# 64 concurrent streams. Writes serve_load.md into $OUT.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-$here/out}
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
for z in "$here"/bin/*.gz "$here"/lib/*.gz "$here"/llama3-tokenizer/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
chmod +x "$here"/bin/* 2>/dev/null || true
folder=/tmp/onyx_serve_llama_1b
python3 "$here/make_serve_folder.py" "$folder" --tokenizer-dir "$here/llama3-tokenizer"
python3 "$here/serve_load.py" --onyx "$here/bin/onyx" --model "$folder" --device cuda:0 \
  --serve-arg=--capture --serve-arg=require --max-batch 64 --max-context 1024 --vocab 128000 \
  --concurrency ${CONCURRENCY:-1 8 32 64} --prompt-len ${PROMPT_LEN:-128} --max-tokens ${MAX_TOKENS:-128} \
  --requests ${REQUESTS:-3} --label "onyx serve, 1.24B Llama shape, bfloat16" --commit "$(head -1 "$here/COMMIT")" \
  --out "$out/serve_load.md"
