#!/usr/bin/env bash
# Runs on the GPU machine (as gpu/build_python.sh): builds onyx's Python extension for that
# machine's Python (its version differs from the one here) from the engine's static libraries
# built here by scripts/gpu_stage.sh, and puts the package in gpu/pylib/onyx. Only the
# binding and nanobind compile there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$here/..
py=${PYTHON:-python3}
inc=$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
for z in "$here"/py/libs/*.a.gz; do [ -e "$z" ] && gunzip -f "$z"; done
nb=$here/py/nanobind
obj=$here/py/obj
mkdir -p "$obj"
flags=(-std=c++20 -O2 -fPIC -fvisibility=hidden -DNDEBUG -ffunction-sections -fdata-sections)
# Every source of the binding (python/src/*.cpp: module.cpp, options.cpp), and nanobind.
pids=()
for src in "$repo"/python/src/*.cpp; do
  g++ "${flags[@]}" -DONYX_PY_CUDA=1 -I"$repo/include" -I"$repo/src" -I"$repo/python/src" -I"$nb/include" \
      -I"$here/py/inc" -I"$inc" -isystem /usr/local/cuda/include -c "$src" -o "$obj/$(basename "$src" .cpp).o" &
  pids+=($!)
done
g++ "${flags[@]}" -DNB_BUILD -DNB_COMPACT_ASSERTIONS -fno-strict-aliasing -I"$nb/include" \
    -isystem "$nb/ext/robin_map/include" -I"$inc" -c "$nb/src/nb_combined.cpp" -o "$obj/nb.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
binding=()
for src in "$repo"/python/src/*.cpp; do binding+=("$obj/$(basename "$src" .cpp).o"); done
g++ -shared -Wl,--gc-sections -o "$here/pylib/onyx/_onyx$suffix" "${binding[@]}" "$obj/nb.o" \
    -Wl,--start-group "$here"/py/libs/*.a -Wl,--end-group -L"$here/lib" -L/usr/lib/x86_64-linux-gnu \
    -l:libprotobuf.so.32 -l:libblas.so.3 -l:libpcre2-8.so.0 -l:libutf8proc.so.2 -l:libhwy.so.1 \
    -l:libjpeg.so.62 -l:libpng16.so.16 -l:libtiff.so.6 -l:libwebp.so.7 -l:libopenjp2.so.7 \
    -l:libsndfile.so.1 -l:libsoxr.so.0 -l:libkissfft-float.so.131 \
    /usr/local/cuda/lib64/libcudart_static.a -lrt -lpthread -ldl
echo "built $here/pylib/onyx/_onyx$suffix"
