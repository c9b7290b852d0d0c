#!/usr/bin/env bash
# Here, after scripts/gpu_stage.sh: makes gpu/ fit one device call beside the checkout (64 MiB
# together) for gpu/check.sh and gpu/decode.sh: the binaries and the Python package's libraries
# recompressed with xz (those scripts unpack them), and what neither reads left out (the
# generated models and inputs of gpu/run.sh, the serve benchmark's tokenizer, onyx and
# onyx_cuda_bench). The precision fixtures (gpu/genai16, 5.5 MiB) stay: three kernel tests read
# them. gpu/run.sh needs the untrimmed folder: stage again for it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d gpu/bin ] || { echo "gpu_trim: no gpu/ (run scripts/gpu_stage.sh first)" >&2; exit 1; }
rm -rf gpu/models gpu/inputs gpu/llama3-tokenizer gpu/bin/onyx.gz gpu/bin/onyx_cuda_bench.gz
for z in gpu/bin/*.gz gpu/py/libs/*.gz; do [ -e "$z" ] && gunzip -f "$z"; done
xz -f -T"${ONYX_JOBS:-$(nproc)}" -6 gpu/bin/onyx_cuda_tests gpu/py/libs/*.a
tracked=$(git ls-files -z | du -cb --files0-from=- | tail -1 | cut -f1)
staged=$(du -sb gpu | cut -f1)
echo "gpu/: $((staged / 1048576)) MiB; with the checkout $(((staged + tracked) / 1048576)) MiB of the 64 a call carries"
