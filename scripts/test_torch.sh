#!/usr/bin/env bash
# The tests on another torch, as a user would have it: a venv holding torch
# VERSION (scripts/torch_env.sh, outside the checkout), hiertag installed there
# with `pip install --no-build-isolation` of this checkout (built against that
# torch, with the build tools of PyPI and nothing of the system's but the
# compiler), and pytest run against the installed package (its plugin, its
# native tool). One command per version:
#
#   scripts/test_torch.sh 2.4.0                the whole pytest suite
#   scripts/test_torch.sh 2.4.0 --plugin       the plugin's lane: its end-to-end tests and corner cases (CI)
#   scripts/test_torch.sh 2.4.0 -- tests/e2e/test_export.py -k bert
#
# The build stays in build/torch-VERSION (incremental), its log in build/torch-VERSION.log.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: scripts/test_torch.sh VERSION [--plugin] [-- PYTEST_ARGS...]" >&2; exit 2; }
[[ "${1:-}" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] || usage
version=$1
shift
# The whole suite and the plugin's lane run in two processes, as scripts/test.sh runs them.
parallel=(-n 2)
selection=("${parallel[@]}" tests)
while (($#)); do
  case "$1" in
    --plugin) selection=("${parallel[@]}" -m plugin tests/e2e); shift ;;  # the plugin's lane: tests/conftest.py
    --) shift; selection=("$@"); break ;;
    *) usage ;;
  esac
done

start=$SECONDS
venv=$(scripts/torch_env.sh "$version" | tail -1)
mkdir -p build
log=build/torch-$version.log
# CMake looks for no package under /usr: the build takes the venv's torch and PyPI's
# tools (nlohmann-json, nanobind), as a user's pip does (tests/package: the same claim).
if ! "$venv/bin/pip" install --no-build-isolation --no-deps --force-reinstall -C "build-dir=build/torch-$version" \
     -C cmake.define.CMAKE_IGNORE_PREFIX_PATH=/usr . >"$log" 2>&1; then
  tail -40 "$log"; echo "test_torch: pip install of hiertag against torch $version failed (log: $log)"; exit 1
fi
installed=$("$venv/bin/python" -c "import hiertag, torch; print(hiertag.library_path(), torch.__version__)")
echo "torch $version: hiertag installed in $venv ($((SECONDS - start)) s): ${installed}"
# -o pythonpath: the installed package, not the checkout's python/ (bench/ stays for tests/bench).
exec env -u PYTHONPATH "$venv/bin/python" -m pytest -q -o pythonpath=bench "${selection[@]}"
