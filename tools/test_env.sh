#!/usr/bin/env bash
# The test command's Python components, in a git-ignored venv (.venv-test): PyPI's XLA CPU PJRT
# plugin (xla-cpu-pjrt, with the PJRT C API header the PJRT backend builds against); numpy, pytest
# and datasets for the Python package's tests (tests/python); openai, tokenizers and jinja2 for
# tfm serve's (tests/serve: a real client, and references for token counts); Debian's libpython,
# which the --device neuron tests start as tfm does for Neuron's plugin.
# Test-time only: `make run` needs none of it. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-test
requirements=tools/test_requirements.txt
libpython=libpython$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
missing=()
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
dpkg-query -W -f='${Status}' "$libpython" 2>/dev/null | grep -q "install ok installed" ||
  missing+=("$libpython")
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  echo "tfm test env: installing ${missing[*]}"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi
stamp=$venv/.requirements
if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then exit 0; fi
echo "tfm test env: installing $(tr '\n' ' ' < "$requirements")into $venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r "$requirements"
cp "$requirements" "$stamp"
