"""A model over 2 GiB, end to end: torch writes its large initializers as
external data beside the model; the tagged file validates, `tree` reads it, and a
module extracted from it loads and runs in ONNX Runtime, giving the full
model's values (its data written inline, copied beside it, or referenced)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core
from large_model import LargeTable  # bench/large_model.py: the same model, measured
from tests.e2e import native_tool


def tool(*args):
    return native_tool.run_tool(*args)


def hiertag_command(*args):
    return subprocess.run([sys.executable, "-m", "hiertag", *map(str, args)], capture_output=True, text=True)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    directory = tmp_path_factory.mktemp("large")
    torch.manual_seed(0)
    model = LargeTable().eval()
    ids = torch.tensor([[1, 5, 599_999]])
    with hiertag.tagging():
        torch.onnx.export(model, (ids,), str(directory / "large.onnx"), dynamo=False, opset_version=OPSET)
    del model
    return directory, ids.numpy()


def test_the_model_is_over_two_gib_and_keeps_its_weights_outside(large):
    directory, _ = large
    model = onnx.load(str(directory / "large.onnx"), load_external_data=False)
    external = [i.name for i in model.graph.initializer if i.data_location == onnx.TensorProto.EXTERNAL]
    assert "table.weight" in external
    assert (directory / "table.weight").stat().st_size > 2 * 1024 ** 3


def test_the_tagged_file_validates_and_tree_reads_it(large):
    directory, _ = large
    validated = tool("validate", directory / "large.onnx")
    assert validated.returncode == 0, validated.stdout
    tree = json.loads(tool("tree", directory / "large.onnx", "--json").stdout)
    assert [m["tag"] for m in tree["modules"]] == ["/LargeTable", "/LargeTable/Head"]
    assert tree["modules"][0]["bytes_total"] > 2 * 1024 ** 3


@pytest.mark.parametrize("mode", ["auto", "copy", "reference"])
def test_an_extracted_module_runs_in_onnx_runtime(large, mode):
    directory, ids = large
    out = directory / f"head-{mode}.onnx"
    extracted = tool("extract", directory / "large.onnx", "--module", "/LargeTable/Head", "-o", out,
                     "--external-data", mode, "--json")
    assert extracted.returncode == 0, extracted.stderr
    info = json.loads(extracted.stdout)
    assert ("data_file" in info) == (mode == "copy")
    full = onnxruntime.InferenceSession(str(directory / "large.onnx"))
    probe_inputs = {full.get_inputs()[0].name: ids}
    session = onnxruntime.InferenceSession(str(out))
    features = np.random.default_rng(0).standard_normal((1, 3, 1024)).astype(np.float32)
    (head_out,) = session.run(None, {info["inputs"][0]: features})
    assert head_out.shape == (1, 3, 16)
    # The head of the full model on the same features: fed through the table's rows.
    table = onnx.numpy_helper.to_array(next(i for i in onnx.load(str(directory / "large.onnx")).graph.initializer
                                            if i.name == "table.weight"), base_dir=str(directory))
    (full_out,) = full.run(None, probe_inputs)
    (head_on_rows,) = session.run(None, {info["inputs"][0]: table[ids]})
    np.testing.assert_allclose(head_on_rows, full_out, rtol=1e-5, atol=1e-6)


def test_a_copy_beside_the_model_without_its_data_is_reported(large, tmp_path):
    directory, _ = large
    (tmp_path / "moved.onnx").write_bytes((directory / "large.onnx").read_bytes())
    validated = tool("validate", tmp_path / "moved.onnx")
    assert validated.returncode == 1
    assert "initializer 'table.weight': external data file 'table.weight' does not exist next to the model" in \
        validated.stdout
    extracted = tool("extract", tmp_path / "moved.onnx", "--module", "/LargeTable", "-o", tmp_path / "all.onnx")
    assert extracted.returncode == 2 and not (tmp_path / "all.onnx").exists()
    assert extracted.stderr.count("\n") == 1


def outputs_on(path, ids):
    session = onnxruntime.InferenceSession(str(path))
    return session.run(None, {session.get_inputs()[0].name: ids})


def test_explorer_writes_the_weights_beside_its_output(large, tmp_path):
    """Check that `explorer` on a model over 2 GiB writes OUT with its weights in
    OUT.data (protobuf cannot hold them inline), every node given its namespace,
    and that OUT computes what the tagged file computes."""
    directory, ids = large
    out = tmp_path / "explorer.onnx"
    done = hiertag_command("explorer", directory / "large.onnx", "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["explorer.onnx", "explorer.onnx.data"]
    assert Path(f"{out}.data").stat().st_size > 2 * 1024 ** 3 > out.stat().st_size
    assert json.loads(done.stdout)["untagged"] == 0
    assert tool("validate", out).returncode == 0
    for got, want in zip(outputs_on(out, ids), outputs_on(directory / "large.onnx", ids), strict=True):
        np.testing.assert_array_equal(got, want)


def test_carry_tags_a_transformed_copy_over_two_gib(large, tmp_path):
    """Check that `carry` reads a transformed model over 2 GiB (here the tagged
    file with its tags stripped, reading the same weights) and
    writes the tagged result as OUT + OUT.data, every node tagged as before."""
    directory, ids = large
    tagged = onnx.load(str(directory / "large.onnx"), load_external_data=False)
    transformed = directory / "stripped.onnx"  # beside the tagged file: the same weights, not copied
    onnx.save(checks.strip_tags(tagged), str(transformed))
    out = tmp_path / "carried.onnx"
    done = hiertag_command("carry", directory / "large.onnx", transformed, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    assert Path(f"{out}.data").stat().st_size > 2 * 1024 ** 3
    assert tool("validate", out).returncode == 0
    carried = onnx.load(str(out), load_external_data=False)
    tags = [checks.node_props(node)[core.TAG_KEY] for node in carried.graph.node]
    assert tags == [checks.node_props(node)[core.TAG_KEY] for node in tagged.graph.node]
    for got, want in zip(outputs_on(out, ids), outputs_on(directory / "large.onnx", ids), strict=True):
        np.testing.assert_array_equal(got, want)


def test_the_python_checks_take_a_model_read_with_its_weights(large):
    """Check that a ModelProto over 2 GiB (its weights read in: protobuf cannot
    serialize it) still gives the core its graph (the module boundaries equal
    those of the graph read alone) and runs in ONNX Runtime (through a file)."""
    directory, ids = large
    whole = onnx.load(str(directory / "large.onnx"))
    assert checks.module_boundaries(whole) == \
        checks.module_boundaries(onnx.load(str(directory / "large.onnx"), load_external_data=False))
    assert any(len(i.raw_data) > 2 * 1024 ** 3 for i in whole.graph.initializer)
    name = whole.graph.output[0].name
    values = checks.intermediate_values(whole, {whole.graph.input[0].name: ids}, [name])
    # Optimizations off (every node runs) against ONNX Runtime's defaults: float32 rounding apart.
    np.testing.assert_allclose(values[name], outputs_on(directory / "large.onnx", ids)[0], rtol=1e-6, atol=1e-7)
