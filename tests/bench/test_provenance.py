"""bench/provenance.py: what a measurement names (the commit, a clean tree) and
builds (build/ brought up to date with the checkout before it runs)."""

import subprocess

import provenance


def test_state_is_the_checkouts_commit_and_cleanliness():
    state = provenance.git_state()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=provenance.ROOT, check=True).stdout.strip()
    assert state["commit"] == head and state["uncommitted_changes"] in (True, False)
    assert provenance.describe(state).startswith(f"commit {head}")
    assert provenance.describe({"commit": None}) == "no commit known"


def test_build_targets_says_in_one_line_what_it_could_not_build(tmp_path, monkeypatch):
    problem = provenance.build_targets("no_such_target")
    assert problem.startswith("building no_such_target failed (exit ") and "\n" not in problem
    monkeypatch.setattr(provenance, "ROOT", tmp_path)  # a checkout never built
    assert provenance.build_targets("hiertag_pass_scaling") == "build/ is not configured: run scripts/build.sh first"


def test_build_targets_brings_what_the_measurements_run_up_to_date():
    assert provenance.build_targets(*provenance.EXPORT_TARGETS, provenance.SCALING_TARGET) is None
    for built in ("libhiertag.so", "libhiertag_python.so", "hiertag", "hiertag_pass_scaling"):
        assert (provenance.ROOT / "build" / built).exists()
