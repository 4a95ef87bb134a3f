#!/usr/bin/env bash
# The benchmark: set up, build, then plain export vs hiertag vs legacy HTP on the
# model suite (bench/suite.py) and the pass scaling, written to bench/results/.
# Arguments go to bench/harness.py (--models, --runs, --out, --no-scaling).
# The full suite at 7 rounds takes about 35 minutes on 2 cores (3 rounds: about 12).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh
exec .venv/bin/python bench/harness.py "$@"
