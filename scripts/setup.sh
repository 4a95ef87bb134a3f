#!/usr/bin/env bash
# Idempotent machine set-up: Debian build packages and the pinned .venv.
# Prints nothing when everything is already in place.
set -euo pipefail
cd "$(dirname "$0")/.."

debian_packages=(cmake g++ make libgtest-dev libgmock-dev libbenchmark-dev libonnx-dev libprotobuf-dev)
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
