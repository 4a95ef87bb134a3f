"""The bundled models torch itself exports on this release. A model that
torch cannot export without hiertag (in a process that never loaded it) is
skipped with torch's error where tests/e2e/expected_skips.py expects torch to
fail on it so: that is torch's limit on this release, not a hiertag result
(torch 2.4's symbolic for scaled_dot_product_attention cannot take the float
scale transformers 4.57 passes, for one). Any other failure fails the test."""

import functools
import inspect
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from hiertag import zoo
from tests.e2e import expected_skips

ROOT = Path(__file__).resolve().parents[2]


def export_in_subprocess(names, load_plugin=False, hiertag=None):
    """({name: bytes}, {name: failure}) of a fresh process exporting `names` (a failure:
    export_plain.py's record of the error, the stage and the code that raised it)."""
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
                errors[name] = json.loads(path.with_suffix(".error").read_text())
        return files, errors


# torch's dynamo exporter as `hiertag import-dynamo` reads it: torch.onnx.export(...,
# dynamo=True) taking keyword arguments (kwargs=), which writes each node's module
# metadata. torch 2.4's dynamo=True is the older dynamo_export, which writes none.
DYNAMO_EXPORT = "kwargs" in inspect.signature(torch.onnx.export).parameters


def skip_unless_dynamo_export():
    if not DYNAMO_EXPORT:
        pytest.skip(f"torch {torch.__version__} has no dynamo exporter writing module metadata "
                    "(torch.onnx.export(..., dynamo=True, kwargs=...))")


_known = {}  # name -> export_plain.py's record of the failure, or None


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
    """A skip where torch is expected to fail on `name` as it did (expected_skips.py);
    a failure where it failed otherwise."""
    failure = torch_export_error(name)
    if failure is not None:
        expected_skips.skip_or_fail("torchscript", name, failure)


def zoo_model(name):
    """zoo.ALL[name](), or a skip where torch cannot export the model."""
    skip_unless_torch_exports(name)
    return zoo.ALL[name]()


_PLAIN_HF_EXPORT = """
import json, sys, torch
from hiertag import OPSET
from hiertag import models
spec, config, task, inputs, out = json.loads(sys.argv[1])
model, args = models.build(spec, config=config, task=task, inputs=inputs)
try:
    torch.onnx.export(model, args, out, dynamo=False, opset_version=OPSET)
except Exception as error:
    print(f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")
"""


@functools.cache
def hf_export_error(model_spec, config_json, task=None, inputs=()):
    """torch's error exporting `hiertag export`'s model (models.build's) in a
    process that never loaded hiertag, or None when torch exports it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG") or k == "HIERTAG_NATIVE_DIR"}
    with tempfile.TemporaryDirectory() as out_dir:
        arguments = json.dumps([model_spec, json.loads(config_json), task, list(inputs), f"{out_dir}/plain.onnx"])
        done = subprocess.run([sys.executable, "-c", _PLAIN_HF_EXPORT, arguments], capture_output=True, text=True,
                              env=env, cwd=ROOT, check=True)
    return done.stdout.strip() or None
