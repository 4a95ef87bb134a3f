"""Where a measurement ran: the commit, and whether the tree held uncommitted changes
(a committed result names both; issue 17, "figures with provenance")."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_state():
    """{"commit": short hash, "uncommitted_changes": bool}; both None outside a checkout.
    bench/results/ is left out: it holds what the measurements write, not what they ran."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "--short", "HEAD"),
                "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                                  ":(exclude)bench/results"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "uncommitted_changes": None}


# What the exports measured run from build/: the plugin (a loader and the
# passes it loads) and the native tool that scores the files.
EXPORT_TARGETS = ("hiertag_plugin", "hiertag_python", "hiertag_cli")
SCALING_TARGET = "hiertag_pass_scaling"


def build_targets(*targets):
    """Brings build/'s TARGETS up to date with the checkout (`cmake --build`, a
    no-op when they are), so what a measurement runs is what git_state names.
    None when they are; else the one-line reason they could not be."""
    if not (ROOT / "build" / "CMakeCache.txt").exists():
        return "build/ is not configured: run scripts/build.sh first"
    try:
        done = subprocess.run(["cmake", "--build", str(ROOT / "build"), "-j2", "--target", *targets],
                              capture_output=True, text=True, cwd=ROOT)
    except OSError as error:
        return f"cmake could not run: {error}"
    if done.returncode != 0:
        lines = (done.stdout + done.stderr).strip().splitlines()
        return f"building {' '.join(targets)} failed (exit {done.returncode}): {lines[-1] if lines else 'no output'}"
    return None


def describe(state):
    """'commit abc1234', with ' (uncommitted changes)' when the tree had them."""
    if not state.get("commit"):
        return "no commit known"
    return f"commit {state['commit']}" + (" (with uncommitted changes)" if state.get("uncommitted_changes") else "")
