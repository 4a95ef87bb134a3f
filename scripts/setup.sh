#!/usr/bin/env bash
# Idempotent machine set-up: Debian build packages and the pinned .venv.
# Prints nothing when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev libonnx-dev libprotobuf-dev
                 nlohmann-json3-dev clang libclang-rt-14-dev valgrind time python3-venv git)
missing=()
for package in "${debian_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

stamp=.venv/.requirements.sha256
wanted=$(sha256sum requirements.txt | cut -d' ' -f1)
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$wanted" ]; then
  echo "setup: creating .venv with requirements.txt"
  python3.11 -m venv .venv 2>/dev/null || python3 -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt 2>&1 | grep -v "is ignored: it is neither" || true
  .venv/bin/python -c "import torch, onnx, onnxruntime, transformers" 
  echo "$wanted" > "$stamp"
fi

# The checkout's Python package (python/hiertag) on the venv's path, and the
# `hiertag` command in .venv/bin (a pip install of the checkout does the same
# with the package's own copy; README "Install with pip").
site_packages=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$PWD/python" > "$site_packages/hiertag-checkout.pth"
printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m hiertag "$@"\n' > .venv/bin/hiertag
chmod +x .venv/bin/hiertag
