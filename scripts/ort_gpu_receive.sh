#!/usr/bin/env bash
# On the GPU machine, from the repository's root: keep the onnxruntime-gpu parts this call
# carried (.ortgpu/part.NN, made by scripts/ort_gpu_parts.sh, with .ortgpu/MANIFEST) in
# /tmp/ortgpu/parts, where earlier calls' parts wait while the machine stays warm; once every
# part is there and each matches its checksum, join them, check the archive's checksum and unpack
# the package into /tmp/ortgpu/site (gpu/decode.sh puts it first on PYTHONPATH). Says which parts
# are still missing. Exit 0 when the package is in place and imports with its CUDA provider.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
store=/tmp/ortgpu
manifest=$root/.ortgpu/MANIFEST
[ -f "$manifest" ] || { echo "no .ortgpu/MANIFEST in this call's carry"; exit 2; }
mkdir -p "$store/parts"
# A new MANIFEST (another build of the parts) starts the gathering again.
if ! cmp -s "$manifest" "$store/MANIFEST"; then
  rm -rf "$store/parts" "$store/site"
  mkdir -p "$store/parts"
  cp "$manifest" "$store/MANIFEST"
fi
check() {
  PYTHONPATH=$store/site python3 -c "
import onnxruntime as ort
p = ort.get_available_providers()
print('onnxruntime', ort.__version__, 'from', ort.__file__, 'providers', p)
raise SystemExit(0 if 'CUDAExecutionProvider' in p else 3)"
}
if [ -d "$store/site/onnxruntime" ]; then check; exit; fi
for p in "$root"/.ortgpu/part.*; do
  [ -e "$p" ] || continue
  name=$(basename "$p")
  want=$(awk -v n="$name" '$2 == n {print $1}' "$manifest")
  got=$(sha256sum "$p" | cut -d' ' -f1)
  if [ "$want" != "$got" ]; then echo "$name: checksum $got, the manifest says $want: not kept"; continue; fi
  cp "$p" "$store/parts/$name" && echo "$name: kept"
done
missing=()
for name in $(awk 'NF == 2 && $2 ~ /^part\./ {print $2}' "$manifest"); do
  [ -f "$store/parts/$name" ] || missing+=("$name")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "still missing: ${missing[*]}"
  exit 1
fi
sum=$(cat "$store"/parts/part.* | sha256sum | cut -d' ' -f1)
want=$(awk '$1 == "sha256" {print $2}' "$manifest")
[ "$sum" = "$want" ] || { echo "joined parts: checksum $sum, the manifest says $want"; exit 1; }
mkdir -p "$store/site.tmp" && cat "$store"/parts/part.* | xz -d | tar xf - -C "$store/site.tmp" && \
  mv "$store/site.tmp" "$store/site" || { echo "unpacking failed"; rm -rf "$store/site.tmp"; exit 1; }
rm -rf "$store/parts"
check
