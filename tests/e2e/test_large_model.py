"""A model over 2 GiB, end to end: torch writes its large initializers as
external data beside the model; the tagged file validates, `tree` reads it, and a
module extracted from it loads and runs in ONNX Runtime, giving the full
model's values (its data written inline, copied beside it, or referenced)."""

import json

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from torch import nn

import hiertag
from hiertag import OPSET, native


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1024, 16)

    def forward(self, x):
        return self.proj(x).relu()


class LargeTable(nn.Module):
    """600,000 x 1024 float32 embeddings: 2.46 GB of weights."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(600_000, 1024)
        self.head = Head()

    def forward(self, ids):
        return self.head(self.table(ids))


def tool(*args):
    return native.run_tool(args, capture_output=True, text=True)


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
