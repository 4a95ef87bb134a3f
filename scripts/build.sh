#!/usr/bin/env bash
# Configure and build libhiertag.so, the hiertag tool and the C++ tests into build/.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=$(.venv/bin/python -c "import torch.utils; print(torch.utils.cmake_prefix_path)")
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" \
  -DPython3_EXECUTABLE="$PWD/.venv/bin/python" >build/cmake.log 2>&1 || { mkdir -p build; cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DPython3_EXECUTABLE="$PWD/.venv/bin/python"; }
cmake --build build -j2
