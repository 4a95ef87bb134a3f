"""CI's lint step (scripts/lint.sh, the first step of scripts/test.sh's fast lane) fails on
any ruff finding or clang-format difference, and scripts/test.sh stops there: run in a
scratch copy of the checkout's CI scripts and configuration, with the venv's ruff and
clang-format, on a clean tree and on one with a finding."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CLEAN_PY = 'def double(x):\n    return 2 * x\n'
CLEAN_CPP = 'int Double(int x) { return 2 * x; }\n'
# An unused import: pyflakes' F401.
UNUSED_IMPORT_PY = 'import os\n\n\ndef double(x):\n    return 2 * x\n'
# Not Google style: the brace on its own line, no spaces around the operator.
MISFORMATTED_CPP = 'int Double(int x)\n{\n  return 2*x;\n}\n'


def scratch_checkout(folder, files):
    """A git work tree holding the CI scripts and lint configuration of the checkout,
    its venv (a link), `files` ({path: text}), and stand-ins for the steps around
    the lint: set-up does nothing; the build leaves a mark and fails, so that
    scripts/test.sh stops right after the lint step."""
    for path in ("scripts/test.sh", "scripts/lint.sh", "pyproject.toml", ".clang-format"):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, folder / path)
    (folder / ".venv").symlink_to(ROOT / ".venv")
    stand_ins = {"scripts/setup.sh": "exit 0\n", "scripts/build.sh": "touch build-ran\nexit 3\n"}
    for path, text in {**stand_ins, **files}.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(("#!/usr/bin/env bash\n" if path in stand_ins else "") + text)
        if path in stand_ins:
            (folder / path).chmod(0o755)
    subprocess.run(["git", "init", "-q"], cwd=folder, check=True)
    subprocess.run(["git", "add", "."], cwd=folder, check=True)
    return folder


def run(folder, script):
    return subprocess.run([str(folder / script)], cwd=folder, capture_output=True, text=True, timeout=60)


def test_lint_passes_a_clean_tree(tmp_path):
    folder = scratch_checkout(tmp_path, {"python/clean.py": CLEAN_PY, "core/clean.cpp": CLEAN_CPP})
    result = run(folder, "scripts/lint.sh")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "lint (ruff: pyflakes, bugbear, pycodestyle, isort, pyupgrade): clean" in result.stdout
    assert "format (clang-format, .clang-format): clean" in result.stdout


@pytest.mark.parametrize("finding, files, tool", [
    ("ruff", {"python/bad.py": UNUSED_IMPORT_PY, "core/clean.cpp": CLEAN_CPP}, "ruff"),
    ("clang-format", {"python/clean.py": CLEAN_PY, "core/bad.cpp": MISFORMATTED_CPP}, "clang-format"),
    ("both", {"python/bad.py": UNUSED_IMPORT_PY, "core/bad.cpp": MISFORMATTED_CPP}, "ruff clang-format"),
])
def test_lint_fails_on_a_finding(tmp_path, finding, files, tool):
    folder = scratch_checkout(tmp_path, files)
    result = run(folder, "scripts/lint.sh")
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"lint: {tool} found problems" in result.stderr
    for path in files:
        if "bad" in path:
            assert path in result.stdout + result.stderr  # the finding is shown, naming its file


def test_test_script_stops_at_a_lint_finding(tmp_path):
    folder = scratch_checkout(tmp_path, {"python/bad.py": UNUSED_IMPORT_PY, "core/bad.cpp": MISFORMATTED_CPP})
    result = run(folder, "scripts/test.sh")
    assert result.returncode != 0 and not (folder / "build-ran").exists(), result.stdout + result.stderr


def test_test_script_goes_past_a_clean_lint(tmp_path):
    folder = scratch_checkout(tmp_path, {"python/clean.py": CLEAN_PY, "core/clean.cpp": CLEAN_CPP})
    result = run(folder, "scripts/test.sh")
    # The build's stand-in ran (the lint step passed) and its failure ended the script.
    assert result.returncode == 3 and (folder / "build-ran").exists(), result.stdout + result.stderr
