"""The bundled models torch itself exports on this release. A model that
torch cannot export without hiertag (in a process that never loaded it) is
skipped with torch's error: that is torch's limit on this release, not a
hiertag result (torch 2.4's symbolic for scaled_dot_product_attention cannot
take the float scale transformers 4.57 passes, for one)."""

import functools
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from hiertag import zoo

ROOT = Path(__file__).resolve().parents[2]
# The transformers release the project pins (requirements.txt): what the expected
# results measured on the HuggingFace models hold for. Another release (torch 2.4
# needs transformers 4.57) is other model code.
PINNED_TRANSFORMERS = next(line.split("==")[1] for line in (ROOT / "requirements.txt").read_text().splitlines()
                           if line.startswith("transformers=="))


def export_in_subprocess(names, load_plugin=False, hiertag=None):
    """({name: bytes}, {name: torch's error}) of a fresh process exporting `names`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG") or k == "HIERTAG_NATIVE_DIR"}
    if hiertag is not None:
        env["HIERTAG"] = hiertag
    with tempfile.TemporaryDirectory() as out_dir:
        command = [sys.executable, str(ROOT / "tests" / "e2e" / "export_plain.py"), out_dir]
        command += ["--load-plugin"] if load_plugin else []
        subprocess.run(command + list(names), check=True, env=env, cwd=ROOT,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        files, errors = {}, {}
        for name in names:
            path = Path(out_dir) / f"{name}.onnx"
            if path.exists():
                files[name] = path.read_bytes()
            else:
                errors[name] = path.with_suffix(".error").read_text()
        return files, errors


_known = {}  # name -> torch's error, or None


def note_plain_exports(files, errors):
    """Records what a process that never loaded hiertag exported (conftest's fixture)."""
    _known.update({name: None for name in files})
    _known.update(errors)


@functools.cache
def torch_export_error(name):
    if name not in _known:
        note_plain_exports(*export_in_subprocess([name]))
    return _known[name]


def skip_unless_torch_exports(name):
    error = torch_export_error(name)
    if error is not None:
        pytest.skip(f"torch {torch.__version__} cannot export {name}, without hiertag too: {error[:300]}")


def zoo_model(name):
    """zoo.ALL[name](), or a skip where torch cannot export the model."""
    skip_unless_torch_exports(name)
    return zoo.ALL[name]()
