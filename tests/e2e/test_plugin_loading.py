"""Loading the plugin: more than once is harmless; into a torch it cannot hook, it
fails at once and never lets a tagged export run untagged."""

import shutil
import subprocess
import sys

import onnx
import torch

from hiertag import checks
from tests.conftest import PLUGIN
from tests.e2e.test_export import export
from hiertag import zoo


def assert_tagged_once(model_bytes):
    for node in checks.walk_nodes(onnx.load_from_string(model_bytes).graph):
        keys = [p.key for p in node.metadata_props]
        assert keys.count(checks.TAG_KEY) == 1, f"{node.name}: {keys}"


def test_loading_the_same_library_again_changes_nothing():
    torch.ops.load_library(str(PLUGIN))
    model, args = zoo.ALL["containers"]()
    assert_tagged_once(export(model, args, "1"))


def test_loading_a_copy_from_another_path_installs_nothing_twice(tmp_path):
    for name in ("libhiertag.so", "libhiertag_python.so"):
        shutil.copy(PLUGIN.parent / name, tmp_path / name)
    torch.ops.load_library(str(tmp_path / "libhiertag.so"))
    model, args = zoo.ALL["containers"]()
    assert_tagged_once(export(model, args, "1"))


MISSING_FUNCTION = """
import os, sys, torch
hidden = torch._C._jit_pass_onnx_eval_peephole
del torch._C._jit_pass_onnx_eval_peephole  # a torch whose exporter lacks a hooked function
try:
    torch.ops.load_library({plugin!r})
except OSError as error:
    print("load failed:", error.__cause__.__context__)
else:
    sys.exit("the plugin loaded into a torch it cannot hook")
torch._C._jit_pass_onnx_eval_peephole = hidden  # what torch's own export needs below
assert not hasattr(torch._C, "_hiertag_plugin_installed")
os.environ["HIERTAG"] = "1"
try:
    torch.onnx.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {out!r}, dynamo=False)
except RuntimeError as error:
    print("tagged export refused:", error)
assert not os.path.exists({out!r}), "a file was written"
os.environ["HIERTAG"] = "0"
torch.onnx.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {out!r}, dynamo=False)
assert os.path.exists({out!r}), "a plain export must still run"
"""


def test_torch_lacking_a_hooked_function_fails_at_load_and_refuses_tagged_exports(tmp_path):
    script = MISSING_FUNCTION.format(plugin=str(PLUGIN), out=str(tmp_path / "m.onnx"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    version = torch.__version__
    reason = f"torch {version} has no torch._C._jit_pass_onnx_eval_peephole (hiertag was built for torch {version})"
    assert f"hiertag: plugin not installed: {reason}\n" in done.stderr
    assert f"load failed: hiertag: plugin not installed: {reason}" in done.stdout
    assert f"tagged export refused: hiertag: not installed ({reason}); HIERTAG=1 cannot tag this export" in done.stdout


def test_plugin_without_its_python_side_fails_at_load(tmp_path):
    shutil.copy(PLUGIN, tmp_path / "libhiertag.so")  # libhiertag_python.so left behind
    script = f"""
import torch
try:
    torch.ops.load_library({str(tmp_path / "libhiertag.so")!r})
except OSError as error:
    print("load failed:", error.__cause__.__context__)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("load failed: hiertag: plugin not installed: ")
    assert "libhiertag_python.so" in done.stdout
