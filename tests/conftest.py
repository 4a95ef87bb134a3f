import os
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "build" / "libhiertag.so"


@pytest.fixture(scope="session", autouse=True)
def plugin():
    """Every test process loads the plugin, as a user does; HIERTAG decides."""
    if not PLUGIN.exists():
        pytest.exit(f"{PLUGIN} is missing: build first (scripts/build.sh)", returncode=2)
    torch.ops.load_library(str(PLUGIN))
    yield
    os.environ.pop("HIERTAG", None)
