"""A failure anywhere in a tagged export leaves torch's exporter as it was:
for every step of the export session, an injected failure (HIERTAG_INJECT_FAILURE)
stops the export with that error and writes nothing, and the next exports in
the same process, tagged and plain, give the same bytes as before it."""

import os

import pytest
import torch

from hiertag import OPSET
from tests.e2e.exportable import zoo_model

STEPS = ["module-map", "trace", "function-substitution", "graph-pass", "cse", "unused-items", "tagging", "plan",
         "write"]


def export(path, flag, inject=None):
    """Exports the bundled model with a script function (every step runs) to `path`."""
    model, args = zoo_model("scripted_loop")
    os.environ["HIERTAG"] = flag
    if inject:
        os.environ["HIERTAG_INJECT_FAILURE"] = inject
    try:
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    finally:
        os.environ.pop("HIERTAG", None)
        os.environ.pop("HIERTAG_INJECT_FAILURE", None)
    return model


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    directory = tmp_path_factory.mktemp("references")
    export(directory / "tagged.onnx", "1")
    export(directory / "plain.onnx", "0")
    return (directory / "tagged.onnx").read_bytes(), (directory / "plain.onnx").read_bytes()


@pytest.mark.parametrize("step", STEPS)
def test_failure_at_a_step_writes_nothing_and_leaves_the_exporter_as_it_was(step, references, tmp_path):
    tagged, plain = references
    failed = tmp_path / "failed.onnx"
    with pytest.raises((RuntimeError, ValueError), match=f"hiertag: injected failure at {step}"):
        export(failed, "1", inject=step)
    assert not failed.exists()
    export(tmp_path / "tagged.onnx", "1")
    export(tmp_path / "plain.onnx", "0")
    assert (tmp_path / "tagged.onnx").read_bytes() == tagged
    assert (tmp_path / "plain.onnx").read_bytes() == plain


@pytest.mark.parametrize("step", ["trace", "tagging"])
def test_no_module_keeps_a_wrapped_forward_after_a_failure(step, tmp_path):
    model, args = zoo_model("scripted_loop")
    os.environ.update(HIERTAG="1", HIERTAG_INJECT_FAILURE=step)
    try:
        with pytest.raises(RuntimeError):
            torch.onnx.export(model, args, str(tmp_path / "m.onnx"), dynamo=False, opset_version=OPSET)
    finally:
        os.environ.pop("HIERTAG", None)
        os.environ.pop("HIERTAG_INJECT_FAILURE", None)
    assert all("forward" not in vars(module) for module in model.modules())


def test_unknown_step_is_an_error_naming_the_steps(tmp_path):
    with pytest.raises(ValueError, match="HIERTAG_INJECT_FAILURE='nowhere' is not a step of the export: use one of "
                                         "module-map, trace"):
        export(tmp_path / "m.onnx", "1", inject="nowhere")
    assert not (tmp_path / "m.onnx").exists()
