"""End-to-end: `hiertag compare` between real exports and what ONNX Runtime's
quantizer and onnxconverter_common's float16 conversion make of them."""

import json

import numpy as np
import onnx
import pytest
import torch
from onnxconverter_common import float16
from onnxruntime.quantization import quantize_dynamic

import hiertag
from hiertag import OPSET, checks, core
from hiertag.verbs import compare, select
from tests.e2e.exportable import zoo_model


def export_tagged(name, path, torch_modules=None, input_names=None):
    model, args = zoo_model(name)
    with hiertag.tagging(torch_modules=torch_modules):
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, input_names=input_names)
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """GPT-2 (LM head, Embedding / LayerNorm / Linear tagged) in float32, and
    quantized with its embeddings and LM head excluded through `hiertag select`."""
    directory = tmp_path_factory.mktemp("compare")
    fp32 = export_tagged("gpt2", directory / "gpt2.onnx", ["Embedding", "LayerNorm", "Linear"],
                         ["input_ids", "attention_mask"])
    excluded = select.select(fp32, ["lm_head", "Embedding"])["nodes"]
    int8 = directory / "gpt2.int8.onnx"
    quantize_dynamic(str(fp32), str(int8), nodes_to_exclude=excluded)
    return fp32, int8, excluded


def run_compare(capsys, *argv):
    """(exit status, parsed --json output or None, stderr)."""
    status = compare.main([str(a) for a in argv] + ["--json"])
    captured = capsys.readouterr()
    return status, (json.loads(captured.out) if captured.out else None), captured.err


def rows_by_module(values):
    return {row["module"]: row for row in values["rows"]}


def test_a_file_against_itself_differs_nowhere(files, capsys):
    fp32, _, _ = files
    status, result, err = run_compare(capsys, fp32, fp32, "--values", "--input", "input_ids=int64[1,16]:0..1000")
    assert status == 0 and err == ""
    assert all(row["nodes_a"] == row["nodes_b"] and row["bytes_a"] == row["bytes_b"] and not row["ops_change"]
               for row in result["modules"])
    values = result["values"]
    assert values["first_above_tolerance"] is None and values["values_missing"] == 0
    assert values["values_compared"] > 20
    assert all(row["max_rel"] == 0.0 for row in values["rows"] if row["no_boundary"] is None)


def test_quantized_copy_drifts_from_the_first_quantized_module_on(files, capsys):
    fp32, int8, excluded = files
    status, result, _ = run_compare(capsys, fp32, int8, "--values", "--input", "input_ids=int64[1,16]:0..1000",
                                    "--top", "3")
    assert status == 1
    model = onnx.load(fp32)
    table = checks.module_table(model)
    weights = {i.name for i in model.graph.initializer}
    # The first node quantize_dynamic replaced, in graph order, is the first
    # drift: it sits in the innermost module whose output it makes.
    first_quantized = next(node for node in model.graph.node if node.op_type in ("Gemm", "MatMul")
                           and node.name not in excluded and any(i in weights for i in node.input))
    values = result["values"]
    assert values["first_above_tolerance"] == checks.node_props(first_quantized)[core.TAG_KEY]
    rows = rows_by_module(values)
    # The excluded embeddings compute exactly what the float file does; the LM head only passes on drift.
    embeddings = [tag for tag, entry in table.items() if entry["class"].endswith(".Embedding")]
    assert embeddings and all(rows[tag]["max_rel"] == 0.0 for tag in embeddings)
    head = next(tag for tag, entry in table.items() if entry["path"] == "lm_head")
    assert rows[head]["in_rel"] > 1e-4 and rows[head]["max_rel"] > 1e-4
    largest = values["largest_drift"]
    assert len(largest) == 3
    assert [entry["max_rel"] for entry in largest] == sorted((entry["max_rel"] for entry in largest), reverse=True)
    assert largest[0]["max_rel"] == max(row["max_rel"] or 0.0 for row in values["rows"])
    # Each listed value at the innermost module making it: no listed module has a descendant listing it.
    for entry in largest:
        tag = checks.key_tag(table, entry["module"])
        assert not any(row["worst"] == entry["value"] and row["tag"] != tag and checks.is_within(row["tag"], tag)
                       for row in values["rows"])
    counts = {row["module"]: row for row in result["modules"]}
    assert counts[head]["nodes_a"] == counts[head]["nodes_b"] and counts[head]["bytes_a"] == counts[head]["bytes_b"]
    quantized_tag = checks.node_props(first_quantized)[core.TAG_KEY]
    assert f"{first_quantized.op_type} -1" in counts[quantized_tag]["ops_change"]
    assert any("carry no tag" in note for note in result["notes"])


def test_text_output_marks_the_first_module_and_lists_the_largest_drift(files, capsys):
    fp32, int8, _ = files
    status = compare.main([str(fp32), str(int8), "--values", "--top", "2"])
    out = capsys.readouterr().out
    assert status == 1
    first = [line for line in out.splitlines() if line.startswith("> /")]
    assert len(first) == 1
    assert "> first module above max rel 1e-04: " + first[0].split()[1] in out
    assert "largest drift" in out and "  2. /" in out and "  3. /" not in out
    assert "note: input 'input_ids' (int64) fed ones" in out


def test_float16_copy_is_compared_through_casts(tmp_path, capsys):
    fp32 = export_tagged("vit", tmp_path / "vit.onnx")
    half = tmp_path / "vit.fp16.onnx"
    onnx.save(float16.convert_float_to_float16(onnx.load(fp32)), half)
    assert onnx.load(half).graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    status, result, _ = run_compare(capsys, fp32, half, "--values")
    assert status == 1
    values = result["values"]
    assert values["values_missing"] == 0
    compared = [row for row in values["rows"] if row["no_boundary"] is None and row["outputs"]]
    assert compared and all(0 < row["max_rel"] < 0.05 for row in compared)
    # Within float16's rounding, nothing is above a tolerance fit for it.
    assert run_compare(capsys, fp32, half, "--values", "--tolerance", "0.05")[0] == 0


def test_an_untagged_copy_is_compared_by_values_only(files, tmp_path, capsys):
    fp32, int8, _ = files
    plain = tmp_path / "plain.int8.onnx"
    onnx.save(checks.strip_tags(onnx.load(int8)), plain)
    status, result, _ = run_compare(capsys, fp32, plain, "--values")
    assert status == 1 and not result["b"]["tagged"]
    assert all(row["nodes_b"] is None for row in result["modules"])
    assert any("no module table" in note for note in result["notes"])
    assert result["values"]["values_compared"] > 20 and result["values"]["first_above_tolerance"]


def test_a_value_missing_in_b_is_reported_for_its_module(files, tmp_path, capsys):
    fp32, _, _ = files
    model = onnx.load(fp32)
    boundaries = checks.module_boundaries(model)
    table = checks.module_table(model)
    tag = next(tag for tag, entry in table.items() if entry["path"] == "transformer.h.0.mlp.act")
    renamed = boundaries[(tag, 0)][1][0]
    for node in model.graph.node:
        node.output[:] = [f"{name}.renamed" if name == renamed else name for name in node.output]
        node.input[:] = [f"{name}.renamed" if name == renamed else name for name in node.input]
    changed = tmp_path / "renamed.onnx"
    onnx.save(model, changed)
    status, result, _ = run_compare(capsys, fp32, changed, "--values")
    assert status == 0
    rows = rows_by_module(result["values"])
    assert rows[tag]["missing"] == [renamed] and rows[tag]["compared"] == 0
    assert result["values"]["values_missing"] == 1


def test_symbolic_dimensions_are_set_to_one_with_a_note(tmp_path, capsys):
    model, args = zoo_model("containers")
    path = tmp_path / "dynamic.onnx"
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, input_names=["x"],
                          dynamic_axes={"x": {0: "batch"}})
    status, result, _ = run_compare(capsys, path, path, "--values")
    assert status == 0
    assert result["values"]["inputs"] == {"x": "float32[1,8]"}
    assert result["values"]["notes"] == ["input 'x': dimension 0 (batch) set to 1"]


def test_value_error_is_relative_to_each_element_and_the_typical_size_of_what_differs():
    a = np.array([[4.0, -2.0], [0.5, 1.0]], dtype=np.float32)
    b = np.array([[4.0, -2.5], [0.5, 1.1]], dtype=np.float16)
    # The elements that differ: -2 by 0.5 and 1 by 0.1 (1.1 in float16), their mean |A| 1.5;
    # per element |A - B| / (|A| + 1.5), the largest -2's. Equal elements (4, 0.5) set nothing.
    largest, relative = compare.value_error(a, b)
    assert largest == 0.5 and relative == pytest.approx(0.5 / (2.0 + 1.5))
    assert relative == checks.disagreement(b, a)
    assert compare.value_error(a, a[:1]) is None
    nan = np.array([np.nan, 1.0])
    assert compare.value_error(nan, nan) == (0.0, 0.0)
    assert compare.value_error(np.array([1.0, 2.0]), nan)[0] == float("inf")


@pytest.mark.parametrize("argv, message", [
    (["{plain}", "{fp32}"], "not tagged by hiertag"),
    (["{fp32}", "{missing}"], "cannot open the file"),
    (["{fp32}", "{fp32}", "--values", "--input", "nope=int64[1,16]"], "--input nope: A has no such input"),
    (["{fp32}", "{fp32}", "--tolerance", "0"], "--tolerance must be above 0"),
    (["{fp32}", "{other}", "--values"], "is not an input of A"),
    (["{fp32}"], "required: B.onnx"),
])
def test_bad_input_is_one_line_and_exit_two(files, tmp_path, capsys, argv, message):
    fp32, int8, _ = files
    plain = tmp_path / "plain.onnx"
    onnx.save(checks.strip_tags(onnx.load(fp32)), plain)
    other = export_tagged("containers", tmp_path / "other.onnx")
    paths = {"fp32": fp32, "plain": plain, "missing": tmp_path / "missing.onnx", "other": other}
    status = compare.main([arg.format(**paths) for arg in argv])
    captured = capsys.readouterr()
    assert status == 2 and captured.out == ""
    assert captured.err.count("\n") == 1 and captured.err.startswith("hiertag compare: ")
    assert message in captured.err
