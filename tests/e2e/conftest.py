import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _export_in_subprocess(out_dir, load_plugin, hiertag):
    """{model name: bytes} exported by a fresh process."""
    from hiertag import zoo
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG")}
    if hiertag is not None:
        env["HIERTAG"] = hiertag
    command = [sys.executable, str(ROOT / "tests" / "e2e" / "export_plain.py"), str(out_dir)]
    command += ["--load-plugin"] if load_plugin else []
    subprocess.run(command + list(zoo.ALL), check=True, env=env, cwd=ROOT,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return {name: (out_dir / f"{name}.onnx").read_bytes() for name in zoo.ALL}


@pytest.fixture(scope="session")
def never_loaded_exports(tmp_path_factory):
    """Exports of a process that never loaded hiertag."""
    return _export_in_subprocess(tmp_path_factory.mktemp("never_loaded"), False, None)


@pytest.fixture(scope="session")
def flag_off_exports(tmp_path_factory):
    """Exports of a process that loaded hiertag, with HIERTAG=0."""
    return _export_in_subprocess(tmp_path_factory.mktemp("flag_off"), True, "0")
