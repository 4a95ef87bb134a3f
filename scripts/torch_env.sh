#!/usr/bin/env bash
# A venv holding torch VERSION and the packages the tests use, outside the
# checkout (and outside anything CI clones), made the way a user makes one:
# `pip install torch==VERSION` takes the standard wheel (a CUDA build from PyPI,
# which runs without a GPU: about 5.5 GB and 2 minutes; 2.13.0 takes the
# machine's CPU wheel). The pins are requirements.txt's with that torch
# (scripts/torch_requirements.py). Idempotent; prints the venv's path last.
#
#   scripts/torch_env.sh 2.4.0     -> $HIERTAG_TORCH_ENVS/torch-2.4.0 (default ~/.cache/hiertag/venvs)
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-}
[[ "$version" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || { echo "usage: scripts/torch_env.sh VERSION (e.g. 2.4.0)" >&2; exit 2; }
root=${HIERTAG_TORCH_ENVS:-$HOME/.cache/hiertag/venvs}
venv=$root/torch-$version
requirements=$(python3 scripts/torch_requirements.py "$version")
wanted=$(sha256sum <<<"$requirements" | cut -d' ' -f1)
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.requirements.sha256" 2>/dev/null)" != "$wanted" ]; then
  echo "torch_env: making $venv (torch $version)" >&2
  mkdir -p "$root"
  python3.11 -m venv "$venv" 2>/dev/null || python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check -r /dev/stdin <<<"$requirements" 2>&1 |
    grep -v "is ignored: it is neither" >&2 || true
  "$venv/bin/python" -c "import torch, onnx, onnxruntime, transformers" 2>/dev/null ||
    { echo "torch_env: the venv for torch $version does not import its packages" >&2; exit 1; }
  echo "$wanted" >"$venv/.requirements.sha256"
fi
echo "$venv"
