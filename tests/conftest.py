import os
from pathlib import Path

import pytest
import torch

import hiertag

ROOT = Path(__file__).resolve().parents[1]


def plugin_path():
    """The plugin the tests load: the hiertag package's (build/libhiertag.so in a
    checkout, the installed package's under scripts/test_torch.sh)."""
    return Path(hiertag.library_path())


@pytest.fixture(scope="session", autouse=True)
def plugin():
    """Every test process loads the plugin, as a user does; HIERTAG decides."""
    try:
        path = plugin_path()
    except FileNotFoundError as error:
        pytest.exit(f"{error}", returncode=2)
    torch.ops.load_library(str(path))
    yield
    os.environ.pop("HIERTAG", None)
