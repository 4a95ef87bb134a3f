#!/usr/bin/env bash
# The main job on a built-in default: set up, build, export the bundled BERT
# (2 layers, hidden 128, random weights) with HIERTAG=1 and print its module tree.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
mkdir -p out
HIERTAG=1 .venv/bin/python scripts/export_model.py bert out/bert.onnx
build/hiertag validate out/bert.onnx
build/hiertag tree out/bert.onnx --depth 3
