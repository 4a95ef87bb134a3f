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


# The dynamo exporter's steps: the capture (a module call), the regions before the
# decompositions, the translation's read, an optimizer pass, the tagging.
DYNAMO_STEPS = ["dynamo-capture", "dynamo-region", "dynamo-translation", "dynamo-pass", "dynamo-tagging"]


def export_dynamo(path, flag, inject=None):
    """Exports the bundled LLaMA (a region torch wraps after the trace, and
    optimizer passes that change the graph) with torch's dynamo exporter."""
    import contextlib
    import io

    from hiertag.checks import dynamo_arguments
    model, args = zoo_model("llama")
    positional, keywords = dynamo_arguments(args)
    os.environ["HIERTAG"] = flag
    if inject:
        os.environ["HIERTAG_INJECT_FAILURE"] = inject
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True)
    finally:
        os.environ.pop("HIERTAG", None)
        os.environ.pop("HIERTAG_INJECT_FAILURE", None)
    return model


def file_bytes(path):
    return path.read_bytes(), path.with_name(path.name + ".data").read_bytes()


@pytest.fixture(scope="module")
def dynamo_references(tmp_path_factory):
    from tests.e2e.test_dynamo import dynamo_incapable
    why = dynamo_incapable()
    if why is not None:
        pytest.skip(why)
    directory = tmp_path_factory.mktemp("dynamo")
    export_dynamo(directory / "tagged" / "model.onnx", "1")
    export_dynamo(directory / "plain" / "model.onnx", "0")
    return file_bytes(directory / "tagged" / "model.onnx"), file_bytes(directory / "plain" / "model.onnx")


@pytest.mark.parametrize("step", DYNAMO_STEPS)
def test_failure_at_a_dynamo_step_writes_nothing_and_leaves_the_exporter_as_it_was(step, dynamo_references,
                                                                                   tmp_path):
    tagged, plain = dynamo_references
    failed = tmp_path / "failed" / "model.onnx"
    with pytest.raises(Exception, match=f"hiertag: injected failure at {step}"):
        export_dynamo(failed, "1", inject=step)
    assert not failed.exists() and not failed.with_name("model.onnx.data").exists()
    model = export_dynamo(tmp_path / "tagged" / "model.onnx", "1")
    # (the zoo's LLaMA has a narrowed forward of its own: no wrapper of hiertag's is left)
    assert not any(type(vars(module).get("forward")).__name__ == "HiertagForward" for module in model.modules())
    export_dynamo(tmp_path / "plain" / "model.onnx", "0")
    assert file_bytes(tmp_path / "tagged" / "model.onnx") == tagged
    assert file_bytes(tmp_path / "plain" / "model.onnx") == plain
