"""End-to-end: `hiertag select` on real exports, and its node names driving
ONNX Runtime's quantize_dynamic(nodes_to_exclude=...)."""

import ast
import json
import subprocess
import sys

import onnx
import pytest
import torch
from onnxruntime.quantization import quantize_dynamic

import hiertag
from hiertag import OPSET, checks, core
from hiertag.verbs import select
from tests.e2e.exportable import zoo_model

TORCH_MODULES = ["Embedding", "LayerNorm", "Linear"]


def export_tagged(name, path, torch_modules=None, input_names=None):
    model, args = zoo_model(name)
    with hiertag.tagging(torch_modules=torch_modules):
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, input_names=input_names)
    return path


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """GPT-2 with LM head, its LayerNorm, Linear and Embedding modules tagged."""
    return export_tagged("gpt2", tmp_path_factory.mktemp("select") / "gpt2.onnx", TORCH_MODULES)


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return export_tagged("bert", tmp_path_factory.mktemp("select") / "bert.onnx")


def run_select(capsys, *argv):
    """(exit status, stdout, stderr) of `hiertag select ARGV`."""
    status = select.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def names_within(path, predicate):
    """Names of the nodes (nested ones included, in pre-order) with a reference whose tag satisfies `predicate`."""
    model = onnx.load(path)
    table = checks.module_table(model)
    return [node.name for node in checks.walk_nodes(model.graph)
            if any(predicate(tag, table) for tag, _ in checks.node_refs(node))]


def test_class_name_selects_every_module_of_that_class(gpt2, capsys):
    status, out, err = run_select(capsys, gpt2, "--module", "LayerNorm")
    assert status == 0 and err == ""
    expected = names_within(gpt2, lambda tag, table: any(
        checks.is_within(tag, t) and e["class"].endswith(".LayerNorm") for t, e in table.items()))
    assert out.splitlines() == expected
    assert len(expected) >= 5 and any(name.endswith("LayerNormalization") for name in expected)
    # The qualified class name and a tag glob select the same nodes.
    assert run_select(capsys, gpt2, "--module", "torch.nn.modules.normalization.LayerNorm")[1] == out
    assert run_select(capsys, gpt2, "--module", "*/LayerNorm*")[1] == out


def test_path_selects_the_module_with_its_descendants(gpt2, capsys):
    status, out, _ = run_select(capsys, gpt2, "--module", "transformer.h.0", "--json")
    assert status == 0
    result = json.loads(out)
    block = "/GPT2LMHeadModel/GPT2Model/GPT2Block.0"
    assert result["modules"] == [block] and result["patterns"] == {"transformer.h.0": [block]}
    assert result["nodes"] == names_within(gpt2, lambda tag, _: checks.is_within(tag, block))
    inner = names_within(gpt2, lambda tag, _: tag == block + "/GPT2MLP/NewGELUActivation")
    assert inner and set(inner) <= set(result["nodes"])
    assert not set(result["nodes"]) & set(names_within(gpt2, lambda tag, _: "GPT2Block.1" in tag))


def test_several_patterns_give_the_union_in_graph_order(gpt2, capsys):
    status, out, _ = run_select(capsys, gpt2, "--module", "lm_head", "--module", "Embedding", "--python")
    assert status == 0
    listed = ast.literal_eval(out)
    model = onnx.load(gpt2)
    order = [node.name for node in checks.walk_nodes(model.graph)]
    assert listed == sorted(listed, key=order.index)
    assert "/lm_head/MatMul" in listed and "/transformer/wte/Gather" in listed
    assert not any("/h.0/" in name for name in listed)


def test_a_node_shared_with_a_matching_module_is_selected(bert, capsys):
    model = onnx.load(bert)
    shared = [node for node in model.graph.node
              if "/BertModel/BertPooler" in json.loads(checks.node_props(node).get(core.SHARED_KEY, "[]"))]
    assert shared, "the BERT export keeps a node CSE shared with the pooler"
    listed = run_select(capsys, bert, "--module", "BertPooler")[1].splitlines()
    assert {node.name for node in shared} <= set(listed)
    assert all(not checks.node_props(node)[core.TAG_KEY].startswith("/BertModel/BertPooler") for node in shared)


def test_nodes_of_loop_bodies_are_selected(tmp_path, capsys):
    path = export_tagged("scripted_loop", tmp_path / "loop.onnx")
    listed = run_select(capsys, path, "--module", "layers.0")[1].splitlines()
    model = onnx.load(path)
    loop = next(node for node in model.graph.node if node.op_type == "Loop")
    body = [node.name for node in checks.walk_nodes(loop.attribute[0].g)]
    assert body and loop.name in listed and set(body) <= set(listed)


def test_excluded_nodes_stay_float_in_the_quantized_file(gpt2, tmp_path, capsys):
    excluded = ast.literal_eval(run_select(capsys, gpt2, "--module", "lm_head", "--module", "Embedding",
                                           "--python")[1])
    quantized = tmp_path / "gpt2.int8.onnx"
    quantize_dynamic(str(gpt2), str(quantized), nodes_to_exclude=excluded)
    original = onnx.load(gpt2)
    before = {node.name: node for node in original.graph.node}
    weights_before = {i.name for i in original.graph.initializer}
    after = onnx.load(quantized)
    kept = {node.name: node for node in after.graph.node}
    weights_after = {i.name: i for i in after.graph.initializer}
    for name in excluded:
        assert name in kept, f"excluded node {name} was replaced"
        assert kept[name].op_type == before[name].op_type and list(kept[name].input) == list(before[name].input)
        assert all(weights_after[i].data_type == onnx.TensorProto.FLOAT for i in kept[name].input if i in weights_after)
    # Every other MatMul/Gemm reading a weight was quantized.
    quantizable = [name for name, node in before.items() if node.op_type in ("Gemm", "MatMul")
                   and name not in excluded and any(i in weights_before for i in node.input)]
    assert quantizable and not set(quantizable) & set(kept)
    assert any(node.op_type == "MatMulInteger" for node in after.graph.node)


def test_a_pattern_matching_nothing_names_the_closest(gpt2, capsys):
    status, out, err = run_select(capsys, gpt2, "--module", "LayerNorm", "--module", "LayerNrom")
    assert status == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("hiertag select: ")
    assert "no module matches 'LayerNrom'" in err and "LayerNorm" in err.split("closest:")[1]


@pytest.mark.parametrize("case", ["missing", "empty", "truncated", "text", "untagged"])
def test_bad_input_is_one_line_and_exit_two(case, gpt2, tmp_path):
    path = tmp_path / f"{case}.onnx"
    if case == "empty":
        path.write_bytes(b"")
    elif case == "truncated":
        path.write_bytes(gpt2.read_bytes()[:5000])
    elif case == "text":
        path.write_text("this is not a model\n")
    elif case == "untagged":
        onnx.save(checks.strip_tags(onnx.load(gpt2)), path)
    result = subprocess.run([sys.executable, "-m", "hiertag", "select", str(path), "--module", "*"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"hiertag select: {path}: ")
    assert "Traceback" not in result.stderr


def test_bad_usage_is_one_line_and_exit_two(gpt2, capsys):
    for argv in ([gpt2], [gpt2, "--module", "*", "--json", "--python"], [gpt2, "--module", "*", "--bogus"]):
        status, out, err = run_select(capsys, *argv)
        assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("hiertag select: ")


def test_untagged_nodes_are_said_not_selected(gpt2, tmp_path, capsys):
    quantized = tmp_path / "gpt2.int8.onnx"
    quantize_dynamic(str(gpt2), str(quantized))
    model = onnx.load(quantized)
    untagged = [node.name for node in model.graph.node if core.TAG_KEY not in checks.node_props(node)]
    assert untagged
    status, out, err = run_select(capsys, quantized, "--module", "*")
    assert status == 0
    assert f"{len(untagged)} nodes of {quantized} carry no tag" in err
    assert not set(untagged) & set(out.splitlines())
