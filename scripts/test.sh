#!/usr/bin/env bash
# Set up (if needed), build, and run every test: a fast lane first, whose
# failures are the cheap ones to find, then the slow one.
#   fast: the lint (ruff) and the C++'s format (clang-format): scripts/lint.sh; the build; the C++ tests (ctest: core, tool, passes, plugin loading);
#         the core and the tool built alone without torch; the plugin's lane of
#         pytest on the venv's torch (tests/conftest.py PLUGIN_LANE)
#   slow: the C++ tests under ASan+UBSan (scripts/sanitize.sh); the tool fuzzed
#         for a minute per target (scripts/fuzz.sh); the rest of pytest (the
#         verbs, carry, the sweep's subset, the pip route, the benchmark
#         harness); the plugin's lane on the oldest and newest supported torch,
#         each installed with pip into a venv of its own (scripts/test_torch.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
# The other torch releases CI tests, besides the venv's 2.13.0: the oldest and the
# newest supported (cmake/HiertagTorch.cmake).
other_torch=(2.4.0 2.14.1)
lane() { echo "== $1 ($((SECONDS / 60)) min)"; }
# pytest in two processes (pytest-xdist); what each takes at a time, and in which order:
# tests/conftest.py, unit_of_work.
parallel=(-n 2)

lane "fast: set-up and build"
scripts/setup.sh
# A plain command, so that set -e stops the script on a finding (one followed by
# `&& echo` would be exempt from it).
scripts/lint.sh
scripts/build.sh
# The C++ tests: their summary line; on a failure their whole output (the log stays in build/).
(cd build && ctest --output-on-failure >ctest.log 2>&1) || { cat build/ctest.log; exit 1; }
grep -o '[0-9]*% tests passed.*' build/ctest.log | tail -1
# The core and the tool alone: configured with no torch and no Python in sight.
env -i PATH=/usr/bin:/bin cmake -S . -B build/tool-only -DHIERTAG_BUILD_PLUGIN=OFF >build/tool-only.log 2>&1 ||
  { cat build/tool-only.log; exit 1; }
cmake --build build/tool-only -j2 >>build/tool-only.log 2>&1 || { cat build/tool-only.log; exit 1; }
(cd build/tool-only && ctest --output-on-failure >>../tool-only.log 2>&1) || { cat build/tool-only.log; exit 1; }
echo "tool-only build (no torch): $(grep -o '[0-9]*% tests passed.*' build/tool-only.log | tail -1)"
lane "fast: the plugin's lane on torch $(.venv/bin/python -c 'import torch; print(torch.__version__)')"
.venv/bin/python -m pytest -q "${parallel[@]}" -m plugin tests/e2e

lane "slow: sanitizers and fuzzing"
# The other torch releases' venvs (scripts/torch_env.sh: downloads, mostly) are made
# meanwhile, in the background, in a process group of their own (setsid), ended with
# this script should a lane fail first; their lanes wait for them.
setsid bash -c 'set -e; for version; do scripts/torch_env.sh "$version"; done' - "${other_torch[@]}" \
  >build/torch-envs.log 2>&1 &
torch_envs=$!
trap 'kill -- -"$torch_envs" 2>/dev/null || true' EXIT
# The C++ tests again under ASan+UBSan (build/sanitize), then the tool's reader and
# commands fuzzed for a minute each (build/fuzz): one line each; the logs stay in build/.
scripts/sanitize.sh >build/sanitize-summary.log 2>&1 || { cat build/sanitize-summary.log; exit 1; }
tail -1 build/sanitize-summary.log
scripts/fuzz.sh >build/fuzz.log 2>&1 || { cat build/fuzz.log; exit 1; }
tail -1 build/fuzz.log
lane "slow: the rest of pytest"
.venv/bin/python -m pytest -q "${parallel[@]}" -m "not plugin" tests
wait "$torch_envs" || { cat build/torch-envs.log; echo "torch_env: a venv could not be made"; exit 1; }
trap - EXIT
for version in "${other_torch[@]}"; do
  lane "slow: the plugin's lane on torch $version"
  scripts/test_torch.sh "$version" --plugin
done
lane "all passed"
