"""checks.intermediate_values runs a large graph in segments, each its own
ONNX Runtime session: the values must be the ones a single session computes,
bit for bit, whatever the cuts separate (a loop's body, a subgraph reading an
outer value, a sequence, a value asked for that no node makes), and a model
ONNX Runtime cannot run must fail as it does in one session."""

import io

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

from hiertag import OPSET, checks, zoo
from hiertag.carry_check import generated_inputs
from tests.e2e.exportable import skip_unless_torch_exports

ONE_SESSION = 10**9


def every_value(model):
    return [name for node in model.graph.node for name in node.output if name]


@pytest.fixture
def sessions(monkeypatch):
    """The node count of each model intermediate_values creates a session on."""
    made = []
    one_session = checks._session_values

    def counted(model, *rest, **options):
        made.append(len(model.graph.node))
        return one_session(model, *rest, **options)
    monkeypatch.setattr(checks, "_session_values", counted)
    return made


def segments(count, segment):
    return [min(segment, count - start) for start in range(0, count, segment)]


def assert_same_values(got, expected):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            assert np.array_equal(got[name], value, equal_nan=True), name
        else:  # a sequence: a list of arrays
            assert len(got[name]) == len(value) and all(np.array_equal(a, b) for a, b in zip(got[name], value)), name


@pytest.mark.parametrize("name,segment", [("scripted_loop", 1), ("t5", 7), ("wav2vec2", 25), ("llama", 40)])
def test_segments_compute_what_one_session_does(name, segment, sessions):
    skip_unless_torch_exports(name)
    torch_model, args = zoo.ALL[name]()
    buffer = io.BytesIO()
    torch.onnx.export(torch_model, args, buffer, dynamo=False, opset_version=OPSET)
    model = onnx.load_from_string(buffer.getvalue())
    assert len(model.graph.node) > 2 * segment
    feeds, _ = generated_inputs(model)
    names = every_value(model) + [i.name for i in model.graph.initializer[:3]] + [model.graph.input[0].name]
    expected = checks.intermediate_values(model, feeds, names, segment_nodes=ONE_SESSION)
    sessions.clear()
    assert_same_values(checks.intermediate_values(model, feeds, names, segment_nodes=segment), expected)
    assert sessions == segments(len(model.graph.node), segment)  # no fallback to one session
    # Asked for a few: what a later segment reads is handed on all the same.
    few = names[::5]
    wanted = {n: v for n, v in expected.items() if n in few or n in {o.name for o in model.graph.output}}
    assert_same_values(checks.intermediate_values(model, feeds, few, segment_nodes=segment), wanted)


def _model(nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _branch(name, op, operand):
    return helper.make_graph([helper.make_node(op, [operand, operand], [f"{name}_out"])], name, [],
                             [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)])


def test_a_subgraph_reading_a_value_made_segments_before(sessions):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3], [0.5, -1.0, 2.0])
    nodes = [helper.make_node("Mul", ["x", "w"], ["early"]),
             helper.make_node("Neg", ["early"], ["middle"]),
             helper.make_node("ReduceSum", ["middle"], ["total"], keepdims=0),
             helper.make_node("Greater", ["total", "zero"], ["positive"]),
             helper.make_node("If", ["positive"], ["y"], then_branch=_branch("then", "Add", "early"),
                              else_branch=_branch("else", "Mul", "early"))]
    zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    model = _model(nodes, [x], [y], [weight, zero])
    feeds = {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2}
    names = every_value(model) + ["w", "x"]
    expected = checks.intermediate_values(model, feeds, names, segment_nodes=ONE_SESSION)
    for segment in (1, 2, 3):
        sessions.clear()
        assert_same_values(checks.intermediate_values(model, feeds, names, segment_nodes=segment), expected)
        assert sessions == segments(len(nodes), segment)
        assert_same_values(checks.intermediate_values(model, feeds, [], segment_nodes=segment), {"y": expected["y"]})
    np.testing.assert_array_equal(expected["w"], [0.5, -1.0, 2.0])


def test_a_sequence_crossing_a_cut_runs_in_one_session(sessions):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("SequenceConstruct", ["a", "x"], ["s"]),
             helper.make_node("ConcatFromSequence", ["s"], ["c"], axis=0),
             helper.make_node("Abs", ["c"], ["y"])]
    model = _model(nodes, [x], [y])
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32)}
    names = every_value(model)
    expected = checks.intermediate_values(model, feeds, names, segment_nodes=ONE_SESSION)
    sessions.clear()
    assert_same_values(checks.intermediate_values(model, feeds, names, segment_nodes=2), expected)
    assert sessions == [2, 4]  # the first segment's sequence cannot be fed to the second: one session
    np.testing.assert_array_equal(expected["y"], [0.0, 2.0, 1.0, 2.0])


def test_a_model_that_cannot_run_fails_as_in_one_session():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    # The last node reshapes 2 elements to 3: ONNX Runtime fails when it runs it.
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [3])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["b"]),
             helper.make_node("Reshape", ["b", "shape"], ["y"])]
    model = _model(nodes, [x], [y], [shape])
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32)}
    with pytest.raises(Exception) as whole:
        checks.intermediate_values(model, feeds, every_value(model), segment_nodes=ONE_SESSION)
    with pytest.raises(Exception) as segmented:
        checks.intermediate_values(model, feeds, every_value(model), segment_nodes=1)
    assert type(segmented.value) is type(whole.value) and str(segmented.value) == str(whole.value)
