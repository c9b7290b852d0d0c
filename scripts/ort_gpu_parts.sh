#!/usr/bin/env bash
# onnxruntime-gpu for the GPU machine, cut into parts that each fit one device call's carry
# beside the working tree: downloads the wheel (CUDA 13 build, for the machine's Python 3.12),
# drops the TensorRT provider (not used), packs the package as tar.xz, splits it into parts of
# ORT_PART_MB MiB (default 40: a part and the working tree within one call's 64 MiB) and writes .ortgpu/MANIFEST (the parts, their count and the
# archive's SHA-256). On the GPU machine, scripts/ort_gpu_receive.sh gathers the parts in its /tmp
# across calls and unpacks the package once all have come. Run from anywhere; about two minutes.
#
#   bash scripts/ort_gpu_parts.sh            # then, one device call per part:
#   carry [".ortgpu/MANIFEST", ".ortgpu/part.00"]   command: bash scripts/ort_gpu_receive.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=${ORT_GPU_VERSION:-1.31.0}
part_mb=${ORT_PART_MB:-40}
out=$root/.ortgpu
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work/wheel" "onnxruntime-gpu==$version"
wheel=$(ls "$work"/wheel/*.whl)
mkdir -p "$work/pkg"
(cd "$work/pkg" && python3 -m zipfile -e "$wheel" .)
rm -f "$work"/pkg/onnxruntime/capi/libonnxruntime_providers_tensorrt.so
rm -f "$out"/part.* "$out"/MANIFEST
(cd "$work/pkg" && tar cf - onnxruntime onnxruntime_gpu-*.dist-info) | xz -T2 -6 > "$work/ort.tar.xz"
sum=$(sha256sum "$work/ort.tar.xz" | cut -d' ' -f1)
split -b "${part_mb}M" -d -a 2 "$work/ort.tar.xz" "$out/part."
parts=$(ls "$out" | grep -c '^part\.')
{
  echo "version $version"
  echo "wheel $(basename "$wheel")"
  echo "sha256 $sum"
  echo "parts $parts"
  (cd "$out" && sha256sum part.*)
} > "$out/MANIFEST"
echo "onnxruntime-gpu $version: $parts parts of at most $part_mb MiB in $out"
ls -la "$out"
