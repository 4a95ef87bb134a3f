"""bench/ort_session_cost.py: the graphs it times ONNX Runtime's session set-up
on stand for what they say (the file's graph with its constants moved computes
the same; the synthetic ones are valid models of as many nodes)."""

import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper

import ort_session_cost


def outputs(model, feeds):
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    return onnxruntime.InferenceSession(model.SerializeToString(), options).run(None, feeds)


def test_constants_as_initializers_computes_what_the_file_computes():
    scale = helper.make_node("Constant", [], ["scale"], value=helper.make_tensor("s", TensorProto.FLOAT, [2], [2, 3]))
    shift = helper.make_node("Constant", [], ["shift"], value=helper.make_tensor("t", TensorProto.FLOAT, [2], [1, -1]))
    graph = helper.make_graph(
        [scale, shift, helper.make_node("Mul", ["x", "scale"], ["m"]), helper.make_node("Add", ["m", "shift"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    moved = ort_session_cost.constants_as_initializers(model)

    assert [node.op_type for node in moved.graph.node] == ["Mul", "Add"]
    assert sorted(tensor.name for tensor in moved.graph.initializer) == ["scale", "shift"]
    assert len(model.graph.node) == 4  # the file's model is left as it was
    feeds = {"x": np.array([1.5, -2.0], dtype=np.float32)}
    np.testing.assert_array_equal(outputs(moved, feeds)[0], outputs(model, feeds)[0])
    np.testing.assert_array_equal(outputs(model, feeds)[0], np.array([4.0, -7.0], dtype=np.float32))


def test_synthetic_graphs_are_valid_models_of_as_many_nodes():
    feeds = {"x": np.ones((1, 8), dtype=np.float32)}
    chain = ort_session_cost.synthetic(5, False, 17, 8)
    fan_out = ort_session_cost.synthetic(5, True, 17, 8)
    for model in (chain, fan_out):
        onnx.checker.check_model(model)
        assert len(model.graph.node) == 5
    np.testing.assert_array_equal(outputs(chain, feeds)[0], np.full((1, 8), 6.0, dtype=np.float32))  # x + 5x
    np.testing.assert_array_equal(outputs(fan_out, feeds)[0], np.full((1, 8), 2.0, dtype=np.float32))  # x + x
    readers = [name for node in fan_out.graph.node for name in node.input]
    assert set(readers) == {"x"}
