#!/usr/bin/env bash
# Installs the Debian 12 packages tfm builds with, only those missing. Safe to run again.
set -euo pipefail
packages=(build-essential cmake pkg-config libdnnl-dev libpcre2-dev libutf8proc-dev
          nlohmann-json3-dev libsimdjson-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev libgloo-dev
          libcpp-httplib-dev
          python3-dev python3-venv pybind11-dev)
[ "${TFM_SETUP_CLANG:-0}" = 1 ] && packages+=(clang libclang-rt-14-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tfm setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
