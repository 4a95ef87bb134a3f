"""Loading the plugin: more than once is harmless; into a torch it cannot hook, it
fails at once and never lets a tagged export run untagged."""

import shutil
import subprocess
import sys

import onnx
import torch

from hiertag import checks, core
from tests.conftest import plugin_path
from tests.e2e.exportable import zoo_model
from tests.e2e.test_export import export


def assert_tagged_once(model_bytes):
    for node in checks.walk_nodes(onnx.load_from_string(model_bytes).graph):
        keys = [p.key for p in node.metadata_props]
        assert keys.count(core.TAG_KEY) == 1, f"{node.name}: {keys}"


def test_loading_the_same_library_again_changes_nothing():
    torch.ops.load_library(str(plugin_path()))
    model, args = zoo_model("containers")
    assert_tagged_once(export(model, args, "1"))


def test_loading_a_copy_from_another_path_installs_nothing_twice(tmp_path):
    for name in ("libhiertag.so", "libhiertag_python.so"):
        shutil.copy(plugin_path().parent / name, tmp_path / name)
    torch.ops.load_library(str(tmp_path / "libhiertag.so"))
    model, args = zoo_model("containers")
    assert_tagged_once(export(model, args, "1"))


# torch.ops.load_library wraps what the library's loader raised (OSError from
# SystemError from our ImportError; older torch: SystemError from ImportError).
LOAD_ERROR = """
def load_error(error):
    while error is not None and not isinstance(error, ImportError):
        error = error.__cause__ or error.__context__
    return error
"""

MISSING_FUNCTION = LOAD_ERROR + """
import os, sys, torch
hidden = torch._C._jit_pass_onnx_eval_peephole
del torch._C._jit_pass_onnx_eval_peephole  # a torch whose exporter lacks a hooked function
try:
    torch.ops.load_library({plugin!r})
except Exception as error:
    print("load failed:", load_error(error))
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
import hiertag
try:
    with hiertag.tagging():
        pass
except RuntimeError as error:
    print("tagging refused:", error)
os.environ["HIERTAG"] = "0"
torch.onnx.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {out!r}, dynamo=False)
assert os.path.exists({out!r}), "a plain export must still run"
"""


def test_torch_lacking_a_hooked_function_fails_at_load_and_refuses_tagged_exports(tmp_path):
    script = MISSING_FUNCTION.format(plugin=str(plugin_path()), out=str(tmp_path / "m.onnx"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    version = torch.__version__
    reason = f"torch {version} has no torch._C._jit_pass_onnx_eval_peephole (hiertag was built for torch {version})"
    assert f"hiertag: plugin not installed: {reason}\n" in done.stderr
    assert f"load failed: hiertag: plugin not installed: {reason}" in done.stdout
    assert f"tagged export refused: hiertag: not installed ({reason}); HIERTAG=1 cannot tag this export" in done.stdout
    assert f"tagging refused: hiertag.tagging(): the plugin is not installed ({reason}); no export would be tagged\n" \
        in done.stdout


def test_plugin_without_its_python_side_fails_at_load(tmp_path):
    shutil.copy(plugin_path(), tmp_path / "libhiertag.so")  # libhiertag_python.so left behind
    script = LOAD_ERROR + f"""
import torch
try:
    torch.ops.load_library({str(tmp_path / "libhiertag.so")!r})
except Exception as error:
    print("load failed:", load_error(error))
import hiertag
print("recorded:", hiertag.install_failure())
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    failed, recorded = done.stdout.splitlines()
    assert failed.startswith("load failed: hiertag: plugin not installed: ")
    assert "libhiertag_python.so" in failed
    # The reason is on torch._C for the package to read, not only on stderr.
    assert recorded == "recorded: " + failed.removeprefix("load failed: hiertag: plugin not installed: ")


OTHER_TORCH = LOAD_ERROR + """
import os, torch
built_for = torch.__version__
torch.__version__ = "2.99.0+cpu"  # a torch other than the one the plugin was built against
try:
    torch.ops.load_library({plugin!r})
except Exception as error:
    print("load failed:", load_error(error))
else:
    raise SystemExit("the plugin loaded into another torch")
assert not hasattr(torch._C, "_hiertag_plugin_installed"), "hooks installed"
import hiertag
try:
    with hiertag.tagging():
        pass
except RuntimeError as error:
    print("tagging refused:", error)
"""


def test_plugin_built_for_another_torch_fails_at_load_naming_both_versions(tmp_path):
    done = subprocess.run([sys.executable, "-c", OTHER_TORCH.format(plugin=str(plugin_path()))],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    message = (f"hiertag: plugin not installed: it was built for torch {torch.__version__}, and this is torch "
               "2.99.0+cpu; build hiertag against this torch (pip install --no-build-isolation <hiertag source>)")
    reason = message.removeprefix("hiertag: plugin not installed: ")
    assert done.stdout == (f"load failed: {message}\n"
                           f"tagging refused: hiertag.tagging(): the plugin is not installed ({reason}); "
                           "no export would be tagged\n")
    assert done.stderr.count(message) == 1
