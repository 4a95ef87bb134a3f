#!/usr/bin/env bash
# Set up (if needed), build, and run every test: C++ pass tests (ctest) and the
# end-to-end exports (pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
(cd build && ctest --output-on-failure)
.venv/bin/python -m pytest -q tests
