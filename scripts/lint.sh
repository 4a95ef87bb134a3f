#!/usr/bin/env bash
# The fast lane's first step (scripts/test.sh): the Python's lint (ruff: pyflakes,
# bugbear, pycodestyle, isort and pyupgrade rules, pyproject.toml) and the C++'s format
# (clang-format against .clang-format, over the files git tracks). Both run; any
# finding of either exits 1.
set -euo pipefail
cd "$(dirname "$0")/.."
failed=()
if .venv/bin/ruff check --quiet .; then
  echo "lint (ruff: pyflakes, bugbear, pycodestyle, isort, pyupgrade): clean"
else
  failed+=(ruff)
fi
if git ls-files -z '*.cpp' '*.h' | xargs -0 --no-run-if-empty .venv/bin/clang-format --dry-run --Werror; then
  echo "format (clang-format, .clang-format): clean"
else
  failed+=(clang-format)
fi
if ((${#failed[@]})); then
  echo "lint: ${failed[*]} found problems (above)" >&2
  exit 1
fi
