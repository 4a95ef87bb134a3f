import os
from pathlib import Path

import pytest
import torch

import hiertag

ROOT = Path(__file__).resolve().parents[1]

# The plugin's lane (`pytest -m plugin`): exports of every bundled model and corner case
# with every check (tags, table, checker, ONNX Runtime, flag-off bytes, stripped bytes,
# module boundaries), extraction, the verifier, loading, failure injection, hostile
# names. CI runs it first, and on the oldest and newest supported torch
# (scripts/test.sh, scripts/test_torch.sh --plugin).
PLUGIN_LANE = {"test_export.py", "test_corner_cases.py", "test_extract.py", "test_verifier.py",
               "test_plugin_loading.py", "test_python_api.py", "test_failure_injection.py",
               "test_hostile_names.py"}


def pytest_configure(config):
    config.addinivalue_line("markers", "plugin: the plugin's lane (tests/conftest.py PLUGIN_LANE)")


# The modules that take longest, run first: scripts/test.sh runs pytest in two
# processes (pytest-xdist, `-n 2 --dist loadfile --no-loadscope-reorder`), which
# hand out whole modules in collection order; one started last would run alone.
FIRST = ("package",)


def pytest_collection_modifyitems(items):
    for item in items:
        if item.path.parent.name == "e2e" and item.path.name in PLUGIN_LANE:
            item.add_marker(pytest.mark.plugin)
    items.sort(key=lambda item: item.path.parent.name not in FIRST)  # stable: the rest keep their order


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
