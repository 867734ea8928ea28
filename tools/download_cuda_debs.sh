#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages bench/cuda_check.sh unpacks on the GPU
# machine, which reaches no package registry, into DIR (default .debs, git-ignored).
#   tools/download_cuda_debs.sh [DIR]
set -euo pipefail
dir=${1:-.debs}
mkdir -p "$dir"
cd "$dir"
apt-get download libdnnl-dev libdnnl2 ocl-icd-libopencl1 libgloo-dev libgloo0 libhiredis0.14 \
  libhiredis-dev libibverbs1 libibverbs-dev libnl-3-200 libnl-route-3-200 libsimdjson-dev \
  libsimdjson14 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
  libutf8proc-dev libutf8proc2 nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev \
  pkgconf pkgconf-bin libpkgconf3
