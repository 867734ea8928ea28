# Sourced by the scripts that run on the H200 machine (bench/cuda_check.sh, bench/cuda_profile.sh),
# with OUTDIR and DEBS_DIR as $1 and $2: unpacks the Debian packages the build needs into
# /tmp/deps (never into /), points the build at them and at PyTorch's NCCL, and defines `stage`.
out=$(mkdir -p "$1" && cd "$1" && pwd)
debs=${2:-.debs}
deps=/tmp/deps
model=/tmp/qwen3-0.6b
build=build-h200
stage() { echo "== $1 $(date +%T)" | tee -a "$out/stages.log"; }

stage unpack
for f in "$debs"/*.deb; do dpkg -x "$f" "$deps"; done
# Their pkg-config and Gloo CMake files name /usr; point them at the unpacked copy.
sed -i "s|^prefix=/usr|prefix=$deps/usr|" "$deps"/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
sed -i "s|\"/usr/lib/|\"$deps/usr/lib/|g" "$deps"/usr/share/cmake/Gloo/GlooTargets-*.cmake
export PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:$PATH:$deps/usr/bin
export PKG_CONFIG_PATH=$deps/usr/lib/x86_64-linux-gnu/pkgconfig
export LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu:$deps/usr/lib:${LD_LIBRARY_PATH:-}
export CMAKE_POLICY_VERSION_MINIMUM=3.5
# PyTorch's NCCL (header and library) where the system has no nccl.h.
NCCL_HOME=$(python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null) &&
  export NCCL_HOME && echo "NCCL_HOME=$NCCL_HOME" >> "$out/stages.log"
nvidia-smi >> "$out/stages.log" 2>&1


# Configures the Release build for sm_90 against the unpacked packages (with the PJRT backend
# where DEBS_DIR holds pjrt/pjrt_c_api.h), then builds the targets named; the log goes to
# OUTDIR/build.log.
build_targets() {
  local pjrt=()
  [ -f "$debs/pjrt/pjrt_c_api.h" ] && pjrt=(-DTFM_PJRT_INCLUDE="$(cd "$debs/pjrt" && pwd)")
  timeout 200 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$deps/usr" -DCMAKE_CUDA_ARCHITECTURES=90 -DTFM_WERROR=OFF "${pjrt[@]}" \
    > "$out/build.log" 2>&1 &&
    timeout 240 cmake --build "$build" --target "$@" >> "$out/build.log" 2>&1
}

# Makes the Qwen3-0.6B-shaped checkpoint (random bf16 weights, that machine's transformers) in the
# background while the build runs; `wait $checkpoint` before using it.
start_checkpoint() {
  stage checkpoint
  (timeout 120 python3 tools/make_random_checkpoint.py --out "$model" >> "$out/stages.log" 2>&1) &
  checkpoint=$!
}
