"""bench/provenance.py: what a measurement names (the commit, a clean tree, the
binaries it loaded) and builds (build/ brought up to date with the checkout before
it runs)."""

import hashlib
import shutil
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


def test_state_records_the_hash_of_each_binary_a_measurement_loads(tmp_path):
    """Check that a measurement's state holds the SHA-256 of each binary it loads,
    build/'s after build_targets made them from the checkout, and tells another
    build's binaries (one changed, one missing) from them."""
    assert provenance.build_targets(*provenance.EXPORT_TARGETS) is None
    state = provenance.state()
    build = provenance.ROOT / "build"
    files = {"libhiertag.so": build / "libhiertag.so", "libhiertag_python.so": build / "libhiertag_python.so",
             "_core": next(build.glob("_core.cpython-*.so")), "hiertag": build / "hiertag"}
    assert state["binaries"] == {name: hashlib.sha256(path.read_bytes()).hexdigest()[:12]
                                 for name, path in files.items()}
    assert state["commit"] == provenance.git_state()["commit"] and "binaries_from" not in state
    shutil.copy(files["libhiertag.so"], tmp_path)
    (tmp_path / "hiertag").write_bytes(files["hiertag"].read_bytes() + b"\0")
    other = provenance.state(directory=tmp_path)
    assert other["binaries"]["libhiertag.so"] == state["binaries"]["libhiertag.so"]
    assert other["binaries"]["hiertag"] not in (state["binaries"]["hiertag"], "missing")
    assert other["binaries"]["libhiertag_python.so"] == other["binaries"]["_core"] == "missing"
    assert other["binaries_from"] == str(tmp_path.resolve())


def test_only_the_checkouts_build_is_built_before_a_measurement_loads_it(tmp_path, monkeypatch):
    """Check that the binaries a measurement loads are brought up to date where they
    are build/'s, and left alone where they are another folder's (an installed package)."""
    assert provenance.build_what_loads(provenance.ROOT / "build") is None
    assert provenance.build_what_loads(tmp_path) is None
    monkeypatch.setattr(provenance, "ROOT", tmp_path)  # a checkout never built: build/ is built, and fails
    assert provenance.build_what_loads(tmp_path / "build") == "build/ is not configured: run scripts/build.sh first"
    assert provenance.build_what_loads(tmp_path / "installed") is None


def test_describe_names_the_binaries_and_where_they_came_from():
    state = {"commit": "abc1234", "uncommitted_changes": False,
             "binaries": {"libhiertag.so": "0123456789ab", "hiertag": "missing"}}
    assert provenance.describe(state) == \
        "commit abc1234, clean tree; binaries (sha256) libhiertag.so=0123456789ab hiertag=missing"
    assert provenance.describe({**state, "binaries_from": "build/fuzz"}).endswith("hiertag=missing from build/fuzz")


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
