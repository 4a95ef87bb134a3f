import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "build" / "libhiertag.so"


@pytest.fixture(scope="session", autouse=True)
def plugin():
    if not PLUGIN.exists():
        pytest.exit(f"{PLUGIN} is missing: build first (scripts/build.sh)", returncode=2)
    torch.ops.load_library(str(PLUGIN))
    yield
    os.environ.pop("HIERTAG", None)


@pytest.fixture(scope="session")
def never_loaded_exports(tmp_path_factory):
    """{model name: bytes} exported by a process that never loaded hiertag."""
    from tests.models import zoo
    out_dir = tmp_path_factory.mktemp("plain")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG")}
    subprocess.run([sys.executable, str(ROOT / "tests" / "e2e" / "export_plain.py"), str(out_dir), *zoo.ALL],
                   check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return {name: (out_dir / f"{name}.onnx").read_bytes() for name in zoo.ALL}
