"""End-to-end: `hiertag carry` on real exports run through the tools that
usually come next, called as scripts/carry_matrix.py calls them (that script
runs the whole matrix, six models by eight tools; here BERT and ResNet with
every tool, GPT-2 with two). The counts are exact as measured with ONNX
Runtime 1.31.1, onnxsim 0.8.1, onnxslim 0.1.98, onnxconverter-common 1.16.0
and onnx 1.23.2: a new version of a tool may leave, fuse or rename other
nodes, and change them. ResNet under ONNX Runtime's level "all" is converted
to the blocked (NCHWc) layout, which ONNX Runtime does on CPUs with AVX2."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest

from hiertag import carry, checks
from hiertag.hf_export import quiet
from tests.e2e.test_export import run_tool

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("carry_matrix", ROOT / "scripts" / "carry_matrix.py")
matrix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(matrix)

# (model, tool) -> (nodes, nodes the tool left tagged, exact, shared, span, rule,
#                   boundary calls checked, (no boundary: fused, renamed, export pass, never ran))
# None: the tool changes values (int8, fp16), so no boundary is checked.
EXPECTED = {
    ("bert", "ort-basic"): (93, 0, 88, 1, 0, 4, 18, (0, 0, 0, 0)),
    ("bert", "ort-all"): (83, 0, 70, 1, 0, 12, 18, (0, 0, 0, 0)),
    ("bert", "transformers"): (78, 0, 74, 0, 0, 4, 18, (0, 0, 0, 0)),
    ("bert", "quantize"): (237, 172, 236, 0, 0, 1, None, None),
    ("bert", "fp16"): (185, 185, 185, 0, 0, 0, None, None),
    ("bert", "onnxsim"): (91, 0, 81, 1, 0, 9, 15, (0, 3, 0, 0)),
    ("bert", "onnxslim"): (85, 0, 84, 1, 0, 0, 18, (0, 0, 0, 0)),
    ("bert", "opset18"): (185, 0, 185, 0, 0, 0, 18, (0, 0, 0, 0)),
    ("resnet", "ort-basic"): (34, 0, 34, 0, 0, 0, 25, (0, 0, 0, 0)),
    ("resnet", "ort-all"): (27, 0, 24, 0, 3, 0, 6, (8, 11, 0, 0)),
    ("resnet", "transformers"): (34, 0, 34, 0, 0, 0, 25, (0, 0, 0, 0)),
    ("resnet", "quantize"): (131, 28, 129, 2, 0, 0, None, None),
    ("resnet", "fp16"): (43, 43, 43, 0, 0, 0, None, None),
    ("resnet", "onnxsim"): (34, 0, 34, 0, 0, 0, 25, (0, 0, 0, 0)),
    ("resnet", "onnxslim"): (34, 0, 34, 0, 0, 0, 25, (0, 0, 0, 0)),
    ("resnet", "opset18"): (43, 0, 43, 0, 0, 0, 25, (0, 0, 0, 0)),
    ("gpt2", "ort-all"): (76, 0, 72, 1, 3, 0, 15, (3, 0, 0, 0)),
    ("gpt2", "transformers"): (63, 0, 57, 0, 4, 2, 14, (4, 0, 0, 0)),
}

GPT2 = "/GPT2LMHeadModel/GPT2Model"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """The tagged exports, and the cells run so far, in one folder."""
    directory = tmp_path_factory.mktemp("carry")
    for name in sorted({name for name, _ in EXPECTED}):
        with quiet():
            matrix.export_tagged(name, directory / f"{name}.onnx")
    return directory


@pytest.fixture(scope="module")
def cells(workdir):
    found = {}

    def cell(name, tool):
        if (name, tool) not in found:
            found[(name, tool)] = matrix.cell(name, tool, workdir / f"{name}.onnx", workdir)
        return found[(name, tool)]
    return cell


def carried(workdir, name, tool):
    return workdir / f"{name}.{tool}.carried.onnx"


@pytest.mark.parametrize("name,tool", sorted(EXPECTED))
def test_every_node_is_tagged_and_every_kept_boundary_holds_after_the_tool(cells, name, tool):
    result = cells(name, tool)
    nodes, left, exact, shared, span, rule, checked, excluded = EXPECTED[(name, tool)]
    assert (result["nodes"], result["tagged_by_tool"], result["exact"], result["shared"], result["span"],
            result["rule"]) == (nodes, left, exact, shared, span, rule)
    assert result["tagged_after"] == nodes and result["unplaced"] == []
    assert result["validate"], result["validate_line"]
    assert result["tree"]
    if checked is None:
        assert not result["keeps_values"]
        return
    assert result["boundary_failures"] == []
    assert result["boundary_checked"] == result["boundary_passed"] == checked
    assert tuple(result["excluded"].values()) == excluded
    assert result["extract_problems"] == [] and result["extract_right"] == result["extract_tried"] > 0


def test_a_fusion_across_two_blocks_is_a_span_and_extract_refuses_both_blocks(cells, workdir):
    cells("gpt2", "transformers")
    path = carried(workdir, "gpt2", "transformers")
    model = onnx.load(path)
    fused = next(node for node in model.graph.node if node.name == "SkipLayerNorm_AddBias_0")
    props = checks.node_props(fused)
    assert fused.op_type == "SkipLayerNormalization"
    assert props[checks.TAG_KEY] == GPT2
    assert json.loads(props[checks.SPANS_KEY]) == [f"{GPT2}/GPT2Block.0", f"{GPT2}/GPT2Block.1"]
    assert props[checks.REWRITE_KEY] == "carry: transformers"
    records = json.loads(checks.model_props(model)[checks.REWRITES_KEY])
    assert {"pass": "carry: transformers", "kind": "fused", "modules": [f"{GPT2}/GPT2Block.0", f"{GPT2}/GPT2Block.1"],
            "node": "SkipLayerNorm_AddBias_0"} in records
    refused = run_tool("extract", path, "--module", f"{GPT2}/GPT2Block.0", "-o", workdir / "block0.onnx")
    assert refused.returncode == 2 and not (workdir / "block0.onnx").exists()
    assert refused.stderr.strip().endswith(
        f"cannot be extracted: carry: transformers fused its computation with '{GPT2}/GPT2Block.1' "
        "into node 'SkipLayerNorm_AddBias_0' (SkipLayerNormalization)")


def test_a_fused_node_inside_one_module_leaves_it_extractable_with_its_values(cells, workdir):
    cells("gpt2", "transformers")
    path = carried(workdir, "gpt2", "transformers")
    model = onnx.load(path)
    module = f"{GPT2}/GPT2Block.0/GPT2MLP/Conv1D[c_fc]"
    # The tool turned c_fc's Reshape, Gemm and Reshape into one MatMul (its
    # output renamed): the MatMul is c_fc's, exactly.
    members = [node for node in model.graph.node if checks.node_props(node)[checks.TAG_KEY] == module]
    assert [(node.op_type, node.name) for node in members] == [("MatMul", "FullyConnect_MatMul_1")]
    out = workdir / "c_fc.onnx"
    done = run_tool("extract", path, "--module", module, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["inputs"] == ["FullyConnect_MatMul_1_input"] and info["outputs"] == ["FullyConnect_MatMul_1_output"]
    feeds = {i.name: np.ones([d if isinstance(d, int) else 1 for d in i.shape], dtype=np.int64)
             for i in onnxruntime.InferenceSession(str(path)).get_inputs()}
    values = checks.intermediate_values(model, feeds, info["inputs"] + info["outputs"])
    produced = onnxruntime.InferenceSession(str(out)).run(info["outputs"], {n: values[n] for n in info["inputs"]})
    np.testing.assert_allclose(produced[0], values[info["outputs"][0]], rtol=1e-4, atol=1e-5)


def test_values_converted_into_another_layout_remove_the_boundaries_they_crossed(cells, workdir):
    cells("resnet", "ort-all")
    path = carried(workdir, "resnet", "ort-all")
    records = json.loads(checks.model_props(onnx.load(path))[checks.REWRITES_KEY])
    rewired = [record["modules"] for record in records if record["kind"] == "rewired"]
    assert len(rewired) == 11 and ["/ResNetModel/ResNetEmbeddings"] in rewired
    refused = run_tool("extract", path, "--module", "/ResNetModel/ResNetEmbeddings")
    assert refused.returncode == 2 and "carry: ort-all rewired it" in refused.stderr
    # A conv layer between two values the tool converted back keeps its boundary.
    layer = "/ResNetModel/ResNetEncoder/ResNetStage.0/ResNetBottleNeckLayer.0/ResNetConvLayer.1"
    assert [layer] not in rewired
    assert run_tool("extract", path, "--module", layer, "-o", workdir / "layer.onnx").returncode == 0


def test_a_computation_the_tool_merged_into_another_layers_node_is_shared_with_that_layer(cells, workdir):
    cells("bert", "ort-basic")
    model = onnx.load(carried(workdir, "bert", "ort-basic"))
    props = {node.name: checks.node_props(node) for node in model.graph.node}
    layers = "/BertModel/BertEncoder/BertLayer.{}/BertAttention/BertSelfAttention"
    # ONNX Runtime kept layer 1's mask Where and fed both layers from it.
    assert props["/encoder/layer.1/attention/self/Where"][checks.TAG_KEY] == layers.format(1)
    assert json.loads(props["/encoder/layer.1/attention/self/Where"][checks.SHARED_KEY]) == [layers.format(0)]
    assert checks.SHARED_KEY not in props["/encoder/layer.1/attention/self/Softmax"]


@pytest.mark.parametrize("name", ["bert", "cross_module_rewrites", "shared_layer_stack"])
def test_carrying_onto_the_untransformed_file_changes_no_entry(name, tmp_path):
    with quiet():
        matrix.export_tagged(name, tmp_path / "model.onnx")
    original = onnx.load(tmp_path / "model.onnx")
    model, summary = carry.carry(original, original)
    assert summary["exact"] == summary["nodes"] == len(list(checks.walk_nodes(original.graph)))
    assert [checks.node_props(n) for n in checks.walk_nodes(model.graph)] == \
        [checks.node_props(n) for n in checks.walk_nodes(original.graph)]
    assert checks.model_props(model).get(checks.REWRITES_KEY) == checks.model_props(original).get(checks.REWRITES_KEY)


def hiertag_carry(*arguments):
    return subprocess.run([sys.executable, "-m", "hiertag", "carry", *map(str, arguments)],
                          capture_output=True, text=True)


def test_the_command_writes_the_carried_file_and_says_how_each_node_was_placed(cells, workdir, tmp_path):
    cells("gpt2", "transformers")
    transformed = workdir / "gpt2.transformers.onnx"
    out = tmp_path / "out.onnx"
    done = hiertag_carry(workdir / "gpt2.onnx", transformed, "-o", out)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == (f"{out}: 63 nodes tagged from {workdir / 'gpt2.onnx'} (by onnxruntime.transformers 1.31.1): "
                        "57 exact, 0 shared, 4 span, 2 by rule (conversion 2)")
    assert any("span: node 'SkipLayerNorm_AddBias_0' (SkipLayerNormalization)" in line for line in lines)
    assert run_tool("validate", out).returncode == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]
    done = hiertag_carry(workdir / "gpt2.onnx", transformed, "-o", out, "--json", "--by", "my optimizer")
    result = json.loads(done.stdout)
    assert (result["nodes"], result["exact"], result["span"], result["rule"], result["unplaced"]) == (63, 57, 4, 2, [])
    assert json.loads(checks.model_props(onnx.load(out))[carry.CARRY_KEY])["by"] == "my optimizer"


def test_the_command_refuses_bad_input_in_one_line_and_writes_nothing(workdir, tmp_path):
    tagged, other = workdir / "bert.onnx", workdir / "resnet.onnx"
    (tmp_path / "empty.onnx").write_bytes(b"")
    (tmp_path / "truncated.onnx").write_bytes(tagged.read_bytes()[:1000])
    (tmp_path / "plain.onnx").write_bytes(checks.strip_tags(onnx.load(tagged)).SerializeToString())
    out = tmp_path / "out.onnx"
    cases = [
        ((tmp_path / "missing.onnx", tagged), "cannot open the file"),
        ((tagged, tmp_path / "empty.onnx"), "the file is empty"),
        ((tagged, tmp_path / "truncated.onnx"), "not a well-formed ONNX model"),
        ((tmp_path / "plain.onnx", tagged), "not tagged by hiertag"),
        ((tagged, other), "the transformed model has no value the tagged model has: not made from it"),
    ]
    for (source, transformed), message in cases:
        done = hiertag_carry(source, transformed, "-o", out)
        assert done.returncode == 2 and done.stdout == "", (source, transformed)
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("hiertag carry: ")
        assert message in done.stderr, done.stderr
    done = hiertag_carry(tagged, tagged, "-o", tmp_path / "no" / "out.onnx")
    assert done.returncode == 2 and "does not exist" in done.stderr
    done = hiertag_carry(tagged, tagged)
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and "-o/--output" in done.stderr
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "empty.onnx", "plain.onnx", "truncated.onnx"]
