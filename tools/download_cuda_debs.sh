#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages bench/cuda_check.sh unpacks on the GPU
# machine, which reaches no package registry, into DIR (default .debs, git-ignored), and the PJRT
# C API's header from the test environment's xla-cpu-pjrt (tools/test_env.sh), when it is there,
# into DIR/pjrt, so that the build there has the PJRT backend (bench/pjrt_gpu_check.sh).
#   tools/download_cuda_debs.sh [DIR]
set -euo pipefail
header=$(ls "$(dirname "$0")"/../.venv-test/lib/python3*/site-packages/xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h 2>/dev/null | head -1)
dir=${1:-.debs}
if [ -n "$header" ]; then mkdir -p "$dir/pjrt" && cp "$header" "$dir/pjrt/"; fi
mkdir -p "$dir"
cd "$dir"
apt-get download libdnnl-dev libdnnl2 ocl-icd-libopencl1 libgloo-dev libgloo0 libhiredis0.14 \
  libhiredis-dev libibverbs1 libibverbs-dev libnl-3-200 libnl-route-3-200 libsimdjson-dev \
  libsimdjson14 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev \
  pkgconf pkgconf-bin libpkgconf3
