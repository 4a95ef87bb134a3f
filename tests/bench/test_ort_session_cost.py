"""bench/ort_session_cost.py: the synthetic graphs it times ONNX Runtime's
session set-up on are the shapes it names, and the command reports every row
or says in one line why it cannot."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

import ort_session_cost
from hiertag import OPSET, checks

SCRIPT = Path(ort_session_cost.__file__)


def outputs(model):
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    feeds = {"x": np.ones((1, 8), dtype=np.float32)}
    return onnxruntime.InferenceSession(model.SerializeToString(), options).run(None, feeds)[0]


def readers(model):
    read = {}
    for node in model.graph.node:
        for name in node.input:
            read[name] = read.get(name, 0) + 1
    return read


def test_synthetic_graphs_have_the_shapes_they_are_named_for():
    chain, fan_out, summed = (ort_session_cost.synthetic(5, shape, OPSET, 8)
                              for shape in ("chain", "fan-out", "summed"))
    for model in (chain, fan_out, summed):
        onnx.checker.check_model(model)
    assert [len(model.graph.node) for model in (chain, fan_out, summed)] == [5, 5, 6]
    np.testing.assert_array_equal(outputs(chain), np.full((1, 8), 6.0))  # x + x, then + x four times
    np.testing.assert_array_equal(outputs(fan_out), np.full((1, 8), 2.0))  # the last x + x
    np.testing.assert_array_equal(outputs(summed), np.full((1, 8), 10.0))  # five x + x
    made = [node.output[0] for node in fan_out.graph.node]
    assert readers(fan_out) == {"x": 10}  # nothing reads what the fan-out's nodes make
    assert [output.name for output in fan_out.graph.output] == [made[-1]]
    assert all(readers(summed)[name] == 1 for name in made)
    assert all(readers(chain)[name] == 1 for name in made[:-1])


def test_every_value_an_output_adds_each_once_and_leaves_the_file_as_it_was():
    model = ort_session_cost.synthetic(3, "chain", OPSET, 8)
    probe = ort_session_cost.every_value_an_output(model)
    made = [node.output[0] for node in model.graph.node]
    assert [output.name for output in probe.graph.output] == [made[-1], *made[:-1]]
    assert [output.name for output in model.graph.output] == [made[-1]]


ROWS = ["file", "file, no buffer reuse", "file, every value an output", "every value, in segments of SEGMENT",
        "chain of 1", "fan-out of 1", "fan-out of 1, summed"]


def small_model(path, external_data=False):
    """A Constant and a Mul, saved at `path` (the Constant's tensor and a weight
    as external data beside it when `external_data`)."""
    constant = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("c", TensorProto.FLOAT, [1], [2.0]))
    weight = helper.make_tensor("w", TensorProto.FLOAT, [1, 8], np.full(8, 0.5, dtype=np.float32).tobytes(), raw=True)
    graph = helper.make_graph([constant, helper.make_node("Mul", ["x", "c"], ["m"]),
                               helper.make_node("Mul", ["m", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8)
    onnx.save(model, path, save_as_external_data=external_data, all_tensors_to_one_file=True,
              location="small.data", size_threshold=0)
    return path


def test_reports_every_row_of_a_file(tmp_path):
    path = small_model(tmp_path / "small.onnx")

    done = subprocess.run([sys.executable, SCRIPT, path, "--json"], capture_output=True, text=True, check=True)
    text = subprocess.run([sys.executable, SCRIPT, path], capture_output=True, text=True, check=True)

    report = json.loads(done.stdout)
    expected_rows = [row.replace("1", "2").replace("SEGMENT", f"{checks.SEGMENT_NODES:,}") for row in ROWS]
    assert (report["nodes"], report["computing_nodes"], report["onnxruntime"]) == (3, 2, onnxruntime.__version__)
    assert [row["graph"] for row in report["rows"]] == expected_rows
    assert all(row["seconds"] > 0 for row in report["rows"])
    lines = text.stdout.splitlines()
    assert lines[0] == f"{path}: 3 nodes, 2 not Constant; onnxruntime {onnxruntime.__version__}"
    assert [line.rsplit(None, 2)[0] for line in lines[1:]] == expected_rows


def test_a_file_with_external_data_is_read_from_its_folder(tmp_path):
    (tmp_path / "model").mkdir()
    path = small_model(tmp_path / "model" / "small.onnx", external_data=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert (path.parent / "small.data").is_file()

    done = subprocess.run([sys.executable, SCRIPT, path, "--json"], capture_output=True, text=True, cwd=elsewhere)

    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["rows"]) == len(ROWS)


def test_bad_input_is_refused_in_one_line(tmp_path):
    missing = subprocess.run([sys.executable, SCRIPT, tmp_path / "none.onnx"], capture_output=True, text=True)
    folder = subprocess.run([sys.executable, SCRIPT, tmp_path], capture_output=True, text=True)
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a model")
    unreadable = subprocess.run([sys.executable, SCRIPT, garbage], capture_output=True, text=True)

    assert missing.returncode == 2 and missing.stderr.strip().endswith("none.onnx: no such file")
    assert folder.returncode == 2 and folder.stderr.strip().endswith(f"{tmp_path}: not a file")
    assert unreadable.returncode == 1 and unreadable.stderr.startswith(f"ort_session_cost: {garbage}: Error parsing")
    for done in (missing, folder, unreadable):
        assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1
