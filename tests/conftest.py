import os
import re
from pathlib import Path

import pytest
import torch

import hiertag

ROOT = Path(__file__).resolve().parents[1]

# The plugin's lane (`pytest -m plugin`): exports of every bundled model and corner case
# with every check (tags, table, checker, ONNX Runtime, flag-off bytes, stripped bytes,
# module boundaries), extraction, the verifier, loading, failure injection, hostile
# names; and the same on torch's dynamo exporter (test_dynamo.py); the skips each release
# expects (test_expected_skips.py). CI runs it first, and on the oldest and newest supported torch
# (scripts/test.sh, scripts/test_torch.sh --plugin).
PLUGIN_LANE = {"test_export.py", "test_corner_cases.py", "test_extract.py", "test_verifier.py",
               "test_plugin_loading.py", "test_python_api.py", "test_failure_injection.py",
               "test_hostile_names.py", "test_dynamo.py", "test_expected_skips.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "plugin: the plugin's lane (tests/conftest.py PLUGIN_LANE)")


# pytest-xdist's unit of work (scripts/test.sh runs pytest in two processes, `-n 2`): a
# test module, so its module fixtures run once (session fixtures once per process),
# except that a module's tests whose id names a model (`[model=NAME]`, test_export.py's
# `exported`: one model's export and every check of it) make a unit per model, so
# test_export.py's 315 such tests spread over both processes instead of bounding the run
# in one. A `model=` id is for a module-scoped fixture that nothing else in its module
# shares: its tests may run in either process. Units go out in collection order: the
# slowest module first (one started last would run alone), the small per-model units
# last, where they fill in whichever process is free.
FIRST = ("package",)
MODEL = re.compile(r"[\[-](model=[^-\]]+)")


def unit_of_work(nodeid):
    return "::".join([nodeid.split("::")[0], *MODEL.findall(nodeid)])


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == "e2e" and item.path.name in PLUGIN_LANE:
            item.add_marker(pytest.mark.plugin)
    # stable: collection order within each rank
    items.sort(key=lambda item: 0 if item.path.parent.name in FIRST else 2 if MODEL.search(item.nodeid) else 1)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config, log):
    """Under `-n N` (xdist's `--dist load`, the default): hand out unit_of_work's units,
    in collection order."""
    if config.getoption("dist") != "load":
        return None  # --dist loadfile, loadscope, ... keep xdist's own scheduler
    from xdist.scheduler import LoadScopeScheduling

    class ByUnitOfWork(LoadScopeScheduling):
        def _split_scope(self, nodeid):
            return unit_of_work(nodeid)

    config.option.loadscopereorder = False  # collection order, not largest unit first
    return ByUnitOfWork(config, log)


def plugin_path():
    """The plugin the tests load: the hiertag package's (build/libhiertag.so in a
    checkout, the installed package's under scripts/test_torch.sh)."""
    return Path(hiertag.library_path())


def pytest_sessionstart(session):
    """No plugin, no run: one line, before any test (in pytest-xdist's controller,
    where pytest.exit ends the run cleanly, not in its workers)."""
    try:
        plugin_path()
    except FileNotFoundError as error:
        pytest.exit(f"{error}", returncode=2)


@pytest.fixture(scope="session", autouse=True)
def plugin():
    """Every test process loads the plugin, as a user does; HIERTAG decides."""
    torch.ops.load_library(str(plugin_path()))
    yield
    os.environ.pop("HIERTAG", None)
