"""The package's Python API: library_path(), tool_path(), tagging()."""

import io
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
import torch

import hiertag
from hiertag import checks, core
from tests.e2e.exportable import zoo_model


def test_library_and_tool_paths_are_absolute_and_exist():
    for path in (hiertag.library_path(), hiertag.tool_path()):
        assert Path(path).is_absolute() and Path(path).exists(), path


def test_tagging_tags_the_exports_inside_the_block_only(monkeypatch):
    monkeypatch.delenv("HIERTAG", raising=False)
    model, args = zoo_model("called_twice")

    def export():
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=hiertag.OPSET)
        return onnx.load_from_string(buffer.getvalue())

    with hiertag.tagging():
        inside = export()
    outside = export()
    assert core.TABLE_KEY in checks.model_props(inside)
    assert core.TABLE_KEY not in checks.model_props(outside)


def test_tagging_sets_the_flags_given_and_restores_all_of_them(monkeypatch):
    monkeypatch.setenv("HIERTAG", "0")
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "LayerNorm")
    monkeypatch.delenv("HIERTAG_REPORT", raising=False)
    with hiertag.tagging(torch_modules=["LayerNorm", "Embedding"], report=True):
        assert (os.environ["HIERTAG"], os.environ["HIERTAG_TORCH_MODULES"], os.environ["HIERTAG_REPORT"]) == \
            ("1", "LayerNorm,Embedding", "1")
    assert os.environ["HIERTAG"] == "0" and os.environ["HIERTAG_TORCH_MODULES"] == "LayerNorm"
    assert "HIERTAG_REPORT" not in os.environ


def test_tagging_leaves_flags_not_given_as_the_environment_has_them(monkeypatch):
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "1")
    with hiertag.tagging():
        assert os.environ["HIERTAG_TORCH_MODULES"] == "1"
    with hiertag.tagging(torch_modules=False):
        assert os.environ["HIERTAG_TORCH_MODULES"] == "0"
    assert os.environ["HIERTAG_TORCH_MODULES"] == "1"


@pytest.mark.parametrize("torch_modules", ["yes", ["LayerNorm", "true"], "Layer-Norm"])
def test_a_malformed_torch_modules_is_refused_on_entering_the_block(monkeypatch, torch_modules):
    """Check that tagging() parses torch_modules once, as the plugin would at the
    export, and refuses a malformed one before anything runs: ValueError in the
    parser's words, the environment untouched."""
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "1")
    monkeypatch.delenv("HIERTAG", raising=False)
    text = torch_modules if isinstance(torch_modules, str) else ",".join(torch_modules)
    with pytest.raises(ValueError) as refused:
        with hiertag.tagging(torch_modules=torch_modules):
            pytest.fail("the block ran")
    assert str(refused.value) == (f"hiertag.tagging(): torch_modules='{text}' is not valid: use 0 (none), 1 (all) "
                                  "or a comma list of class names, each starting with a capital letter "
                                  "(LayerNorm,Embedding)")
    assert os.environ["HIERTAG_TORCH_MODULES"] == "1" and "HIERTAG" not in os.environ


def test_unknown_torch_modules_are_the_names_no_torch_class_has():
    """Check that the plugin finds the names of a list no torch.nn / torch.ao class
    has (a typo, a class of the user's), and refuses a malformed list."""
    assert hiertag.unknown_torch_modules("Linear,LayerNrom,MyBlock,Conv2d,Quantize") == ["LayerNrom", "MyBlock"]
    assert hiertag.unknown_torch_modules("1") == [] and hiertag.unknown_torch_modules("") == []
    with pytest.raises(ValueError, match="'maybe' is not valid"):
        hiertag.unknown_torch_modules("maybe")


def test_tagging_restores_the_environment_after_an_error(monkeypatch):
    monkeypatch.delenv("HIERTAG", raising=False)
    with pytest.raises(RuntimeError):
        with hiertag.tagging(torch_modules=True):
            raise RuntimeError("export failed")
    assert "HIERTAG" not in os.environ


WITHOUT_PLUGIN = """
import os, torch, hiertag
try:
    with hiertag.tagging():
        torch.onnx.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),), {out!r}, dynamo=False)
except RuntimeError as error:
    print(error)
assert not os.path.exists({out!r}), "an untagged file was written"
assert "HIERTAG" not in os.environ
"""


def test_tagging_without_the_plugin_loaded_refuses_in_one_line(tmp_path):
    # A process that never loaded the plugin (this one did: tests/conftest.py).
    script = WITHOUT_PLUGIN.format(out=str(tmp_path / "m.onnx"))
    environment = {key: value for key, value in os.environ.items() if key != "HIERTAG"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=environment)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout == ("hiertag.tagging(): the plugin is not loaded: call torch.ops.load_library("
                           "hiertag.library_path()) first; no export would be tagged\n")
