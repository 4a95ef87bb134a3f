"""bench/provenance.py: what a measurement names (the commit, a clean tree) and
builds (build/ brought up to date with the checkout before it runs)."""

import subprocess

import provenance


def git(*args):
    return subprocess.run(["git", *args], capture_output=True, text=True, cwd=provenance.ROOT,
                          check=True).stdout.rstrip("\n")


def test_state_is_the_checkouts_commit_and_cleanliness():
    state = provenance.git_state()
    head = git("rev-parse", "--short", "HEAD")
    # Tracked files changed anywhere but in the results the measurements write.
    changed = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    assert state == {"commit": head,
                     "uncommitted_changes": any(not path.startswith("bench/results/") for path in changed)}
    assert provenance.describe(state).startswith(f"commit {head}")
    assert provenance.describe({"commit": None}) == "no commit known"
    # A report says which: clean, changed, or (an older run's) not known.
    assert provenance.describe({"commit": "abc1234", "uncommitted_changes": False}) == "commit abc1234, clean tree"
    assert provenance.describe({"commit": "abc1234", "uncommitted_changes": True}) == \
        "commit abc1234 (with uncommitted changes)"
    assert provenance.describe({"commit": "abc1234"}) == "commit abc1234"


def test_build_targets_says_in_one_line_what_it_could_not_build(tmp_path, monkeypatch):
    problem = provenance.build_targets("no_such_target")
    assert problem.startswith("building no_such_target failed (exit ") and "\n" not in problem
    monkeypatch.setattr(provenance, "ROOT", tmp_path)  # a checkout never built
    assert provenance.build_targets("hiertag_pass_scaling") == "build/ is not configured: run scripts/build.sh first"


def test_build_targets_names_targets_the_build_has():
    # cmake refuses a target it does not know: a renamed one fails here, not in a benchmark run.
    assert provenance.build_targets(*provenance.EXPORT_TARGETS, provenance.SCALING_TARGET) is None
    built = {path.name for path in (provenance.ROOT / "build").iterdir()}
    assert {"libhiertag.so", "libhiertag_python.so", "hiertag", "hiertag_pass_scaling"} <= built
    assert any(name.startswith("_core.") for name in built)


def test_versions_name_each_package_and_the_cpu_its_kernels_depend_on():
    import onnx
    found = provenance.versions("onnx", "no-such-package")
    assert found["onnx"] == onnx.__version__ and found["no-such-package"] == "not installed"
    with open("/proc/cpuinfo") as info:
        lines = info.read().splitlines()
    model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    flags = next(line.split(":", 1)[1].split() for line in lines if line.startswith("flags"))
    assert found["cpu"].startswith(model)
    for flag in provenance.VECTOR_EXTENSIONS:
        assert (flag in found["cpu"][len(model):]) == (flag in flags), flag
