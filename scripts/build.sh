#!/usr/bin/env bash
# Configure and build build/libhiertag.so, build/libhiertag_python.so and the C++ tests.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >build/configure.log 2>&1 || { cat build/configure.log; exit 1; }
cmake --build build -j2 >build/build.log 2>&1 || { tail -40 build/build.log; exit 1; }
