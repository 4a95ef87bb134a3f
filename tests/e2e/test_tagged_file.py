"""The file layer in process (hiertag._core.TaggedFile, core.run_tool): the
package's verbs read a tagged file through the same C++ calls as the native
`hiertag` binary, opened once, with structured results and one exception type
per refusal, and no subprocess to hiertag's own code."""

import ast
import json
import subprocess
from pathlib import Path

import onnx
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core
from hiertag.models import quiet
from tests.e2e.exportable import zoo_model
from tests.e2e.native_tool import run_tool

PACKAGE = Path(hiertag.__file__).parent


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """A tagged export of a small corner case (same-class siblings: calls of
    several modules), and torch's plain export of it."""
    folder = tmp_path_factory.mktemp("tagged_file")
    model, args = zoo_model("containers")
    with quiet():
        with hiertag.tagging():
            torch.onnx.export(model, args, str(folder / "m.onnx"), dynamo=False, opset_version=OPSET)
        torch.onnx.export(model, args, str(folder / "plain.onnx"), dynamo=False, opset_version=OPSET)
    return folder


def binary(*arguments):
    return subprocess.run([hiertag.tool_path(), *map(str, arguments)], capture_output=True)


def a_layer(path):
    """A module call extract writes: the first non-root tag of the table."""
    table = checks.module_table(onnx.load(path))
    return next(tag for tag in table if core.parent_tag(tag))


def test_the_binary_and_the_package_print_the_same(tagged):
    path = tagged / "m.onnx"
    for arguments in (["validate", path], ["validate", path, "--json"], ["tree", path], ["tree", path, "--csv"],
                      ["tree", path, "--json", "--depth", "1"], ["validate", tagged / "plain.onnx"],
                      ["extract", path, "--module", "/Nope"], ["tree", path, "--depth", "x"], ["frobnicate"]):
        native, mine = binary(*arguments), run_tool(*arguments, text=False)
        assert (mine.returncode, mine.stdout, mine.stderr) == (native.returncode, native.stdout, native.stderr), \
            arguments
    layer = a_layer(path)
    native = binary("extract", path, "--module", layer, "-o", tagged / "a.onnx", "--json")
    mine = run_tool("extract", path, "--module", layer, "-o", tagged / "b.onnx", "--json", text=False)
    assert native.returncode == mine.returncode == 0, (native.stderr, mine.stderr)
    written = [json.loads(done.stdout) for done in (native, mine)]
    assert [{k: v for k, v in result.items() if k != "output"} for result in written] == \
        [{k: v for k, v in written[0].items() if k != "output"}] * 2
    a, b = onnx.load(tagged / "a.onnx"), onnx.load(tagged / "b.onnx")
    assert a.SerializeToString() == b.SerializeToString()


def test_one_opened_file_answers_every_operation_from_its_one_read(tagged, tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes((tagged / "m.onnx").read_bytes())
    opened = core.TaggedFile(str(path))
    path.write_bytes(b"not a model any more")  # what it answers now comes from the one read
    validation = opened.validate()
    assert validation["valid"] and validation["problems"] == [] and validation["nodes"] == opened.node_count > 0
    listed = binary("tree", tagged / "m.onnx", "--json")
    assert [m["tag"] for m in opened.tree()["modules"]] == [m["tag"] for m in json.loads(listed.stdout)["modules"]]
    assert {m["depth"] for m in opened.tree(1)["modules"]} == {0, 1}
    layer = a_layer(tagged / "m.onnx")
    result = opened.extract(layer, out=str(tmp_path / "layer.onnx"), value_types=core.value_types())
    assert result["module"] == layer and result["nodes"] > 0
    onnx.checker.check_model(onnx.load(tmp_path / "layer.onnx"), full_check=True)


def test_each_refusal_raises_its_own_error_with_the_tools_line(tagged, tmp_path):
    path = tagged / "m.onnx"
    opened = core.TaggedFile(str(path))
    layer = a_layer(path)
    calls = checks.call_count(checks.module_table(onnx.load(path)), layer)
    refusals = [
        (core.UnknownModule, ["--module", "/Nope"], dict(module="/Nope", out=str(tmp_path / "x.onnx"))),
        (core.ExtractRefused, ["--module", layer, "--call", str(calls)],
         dict(module=layer, call=calls, out=str(tmp_path / "x.onnx"))),
        (core.OverwritesInput, ["--module", layer, "-o", path], dict(module=layer, out=str(path))),
    ]
    for error_type, arguments, keywords in refusals:
        with pytest.raises(error_type) as raised:
            opened.extract(**keywords)
        assert isinstance(raised.value, core.TaggedFileError) and isinstance(raised.value, ValueError)
        if "out" not in keywords or keywords["out"] != str(path):
            arguments += ["-o", tmp_path / "x.onnx"]
        said = binary("extract", path, *arguments).stderr.decode()
        assert said.removesuffix("\n") == "hiertag extract: " + str(raised.value)
        assert not (tmp_path / "x.onnx").exists()
    for unreadable, why in ((tagged / "plain.onnx", "not tagged"), (tmp_path / "missing.onnx", "")):
        with pytest.raises(core.TaggedFileError) as raised:
            core.TaggedFile(str(unreadable))
        assert str(raised.value).startswith(str(unreadable)) and why in str(raised.value)
        assert "\n" not in str(raised.value)


def test_no_module_of_the_package_starts_a_subprocess():
    # hiertag's own code runs in process: no verb reaches the C++ through a subprocess.
    for source in PACKAGE.rglob("*.py"):
        imported = set()
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module.split(".")[0])
        assert not imported & {"subprocess", "multiprocessing"}, source


def test_an_opened_file_answers_as_its_bytes_do(tagged):
    """The questions the verbs ask of a file they have opened (compare, report,
    export) have the answers the model's bytes give, without serializing it."""
    path = tagged / "rewritten.onnx"  # export passes rewrote across its modules
    model, args = zoo_model("cross_module_rewrites")
    with quiet(), hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    opened, model = core.TaggedFile(str(path)), onnx.load(path)
    initializers = {initializer.name for initializer in model.graph.initializer}
    assert opened.graph_inputs == [i.name for i in model.graph.input if i.name not in initializers]
    assert opened.graph_outputs == [output.name for output in model.graph.output]
    assert opened.opset == OPSET
    answers = {}
    for question in (core.module_boundaries, core.rewritten_boundaries, core.rewrite_records, core.weight_values):
        answers[question.__name__] = question(opened)
        assert answers[question.__name__] == question(model), question.__name__
    assert len(answers["module_boundaries"]) == sum(checks.call_count(checks.module_table(model), tag)
                                                    for tag in checks.module_table(model))
    assert answers["weight_values"] >= initializers
    assert answers["rewritten_boundaries"] and answers["rewrite_records"]
