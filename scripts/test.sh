#!/usr/bin/env bash
# Set up (if needed), build, and run every test: the C++ tests (ctest: core,
# tool, passes, plugin loading), the core and the tool built alone without torch,
# the C++ tests under ASan+UBSan (scripts/sanitize.sh), the tool fuzzed for a
# minute per target (scripts/fuzz.sh), and the end-to-end tests (pytest: real
# exports, the verifier, the sweep's fast subset, the pip route).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure)
# The core and the tool alone: configured with no torch and no Python in sight.
env -i PATH=/usr/bin:/bin cmake -S . -B build/tool-only -DHIERTAG_BUILD_PLUGIN=OFF >build/tool-only.log 2>&1 ||
  { cat build/tool-only.log; exit 1; }
cmake --build build/tool-only -j2 >>build/tool-only.log 2>&1 || { tail -40 build/tool-only.log; exit 1; }
(cd build/tool-only && ctest --output-on-failure >>../tool-only.log 2>&1) || { tail -60 build/tool-only.log; exit 1; }
echo "tool-only build (no torch): $(grep -o '[0-9]*% tests passed.*' build/tool-only.log | tail -1)"
# The C++ tests again under ASan+UBSan (build/sanitize), then the tool's reader and
# commands fuzzed for a minute each (build/fuzz): one line each; the logs stay in build/.
scripts/sanitize.sh >build/sanitize-summary.log 2>&1 || { cat build/sanitize-summary.log; exit 1; }
tail -1 build/sanitize-summary.log
scripts/fuzz.sh >build/fuzz.log 2>&1 || { cat build/fuzz.log; exit 1; }
tail -1 build/fuzz.log
.venv/bin/python -m pytest -q tests
