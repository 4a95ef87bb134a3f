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
from hiertag.verbs.carry.check import generated_inputs
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


def segmented(sessions, count, segment):
    """Whether the sessions made were one per segment (a segment may hold
    Constant nodes copied from earlier ones), not the whole graph's."""
    return len(sessions) == -(-count // segment) and all(size < count for size in sessions)


def assert_same_values(got, expected):
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        if isinstance(value, np.ndarray):
            assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
            assert np.array_equal(got[name], value, equal_nan=value.dtype.kind in "fc"), name
        else:  # a sequence: a list of arrays
            assert len(got[name]) == len(value), name
            assert all(np.array_equal(a, b) for a, b in zip(got[name], value, strict=True)), name


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
    assert segmented(sessions, len(model.graph.node), segment)  # no fallback to one session
    # Asked for a few: what a later segment reads is handed on all the same.
    few = names[::5]
    wanted = {n: v for n, v in expected.items() if n in few or n in {o.name for o in model.graph.output}}
    assert_same_values(checks.intermediate_values(model, feeds, few, segment_nodes=segment), wanted)


@pytest.mark.parametrize("name,segment", [("scripted_loop", 1), ("t5", 7), ("llama", 40)])
def test_between_sessions_the_segments_table_only_the_values_crossing_a_cut(name, segment):
    """What the segments table by name is the values a later segment reads
    (its nodes or their subgraphs), with the last segment reading each and,
    for a Constant's, its node: a table of every value was as large as the
    values carry's check holds."""
    skip_unless_torch_exports(name)
    torch_model, args = zoo.ALL[name]()
    buffer = io.BytesIO()
    torch.onnx.export(torch_model, args, buffer, dynamo=False, opset_version=OPSET)
    graph = onnx.load_from_string(buffer.getvalue()).graph
    made_in, read_in, constants = {}, {}, {}
    for index, node in enumerate(graph.node):
        for name_read in checks._implicit_inputs(node):
            read_in[name_read] = index // segment
        for output in node.output:
            made_in[output] = index // segment
            if node.op_type == "Constant":
                constants[output] = index
    crossing = {name: read_in[name] for name, made in made_in.items() if read_in.get(name, -1) > made}
    wanted = set(list(made_in)[::7])
    tables = checks._Crossings(graph, segment, wanted)
    assert tables.last_read == crossing and 0 < len(crossing) < len(made_in)
    assert tables.exported == [{name for name in crossing if made_in[name] == s}
                               for s in range(-(-len(graph.node) // segment))]
    assert tables.constants == {name: constants[name] for name in crossing if name in constants}
    assert tables.made == wanted


@pytest.mark.parametrize("segment", [ONE_SESSION, 40])
def test_a_value_equal_to_a_known_one_is_handed_back_as_it(segment):
    """`known` (hiertag carry's other model): a value equal to the known one of
    its name is that array, held once; one that differs in an element, in its
    type or in its shape is the model's own, and the values are the same."""
    skip_unless_torch_exports("llama")
    torch_model, args = zoo.ALL["llama"]()
    buffer = io.BytesIO()
    torch.onnx.export(torch_model, args, buffer, dynamo=False, opset_version=OPSET)
    model = onnx.load_from_string(buffer.getvalue())
    feeds, _ = generated_inputs(model)
    names = every_value(model)
    expected = checks.intermediate_values(model, feeds, names, segment_nodes=segment)
    floats = [n for n in names if expected[n].dtype == np.float32 and expected[n].ndim > 1]
    changed, retyped, reshaped = floats[:3]
    known = {name: value.copy() for name, value in expected.items()}
    known[changed].flat[0] += 1
    assert not np.array_equal(known[changed], expected[changed])
    known[retyped] = known[retyped].astype(np.float64)
    known[reshaped] = known[reshaped].reshape(-1)
    got = checks.intermediate_values(model, feeds, names, segment_nodes=segment, known=known)
    assert_same_values(got, expected)
    assert {n for n in got if got[n] is not known[n]} == {changed, retyped, reshaped}


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
        assert segmented(sessions, len(nodes), segment)
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


def _matmul_model(weight_as):
    """x (33x257) -> Relu -> MatMul by a 257x129 weight held as `weight_as`:
    "constant" (a Constant node), "initializer", or "overridable" (an
    initializer the graph also lists as an input). ONNX Runtime prepacks a
    constant weight for MatMul, whose result then differs in the last bits."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((257, 129)).astype(np.float32)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("MatMul", ["a", "W"], ["y"])]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [33, 257])]
    initializers = []
    if weight_as.startswith("constant"):
        domain = "other" if weight_as == "constant in another domain" else ""
        nodes.insert(0, helper.make_node("Constant", [], ["W"], value=onnx.numpy_helper.from_array(weight, "W"),
                                         domain=domain))
    else:
        initializers.append(onnx.numpy_helper.from_array(weight, "W"))
    if weight_as == "overridable":
        inputs.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [257, 129]))
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializers)
    if weight_as == "constant in another domain":  # ONNX Runtime makes any Constant an initializer
        model.opset_import.append(helper.make_opsetid("other", 1))
    return model, {"x": rng.standard_normal((33, 257)).astype(np.float32)}


@pytest.mark.parametrize("weight_as", ["constant", "constant in another domain", "initializer", "overridable"])
def test_a_weight_read_across_a_cut_is_as_constant_as_in_one_session(weight_as, sessions):
    model, feeds = _matmul_model(weight_as)
    expected = checks.intermediate_values(model, feeds, [], segment_nodes=ONE_SESSION)
    for segment in range(1, len(model.graph.node)):
        sessions.clear()
        assert_same_values(checks.intermediate_values(model, feeds, [], segment_nodes=segment), expected)
        assert segmented(sessions, len(model.graph.node), segment)


def test_float16_values_do_not_cross_a_cut():
    # ONNX Runtime runs Exp, Log and Sin in float32 between Casts, passing
    # float32 from one to the next in one session: a cut would round to float16.
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT16, [64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)
    nodes = [helper.make_node(op, [source], [made]) for op, source, made in
             (("Exp", "x", "a"), ("Log", "a", "b"), ("Sin", "b", "c"), ("Exp", "c", "y"))]
    model = _model(nodes, [x], [y])
    feeds = {"x": (np.random.default_rng(0).random(64) * 2 + 0.5).astype(np.float16)}
    for names in ([], every_value(model)):
        expected = checks.intermediate_values(model, feeds, names, segment_nodes=ONE_SESSION)
        assert_same_values(checks.intermediate_values(model, feeds, names, segment_nodes=1), expected)


def test_a_segment_nothing_reads_still_runs():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["unread"]),
             helper.make_node("Abs", ["x"], ["also_unread"])]
    model = _model(nodes, [x], [y])
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32)}
    made = []
    one_session = checks._session_values
    try:
        checks._session_values = lambda model, *rest: made.append(len(model.graph.node)) or one_session(model, *rest)
        values = checks.intermediate_values(model, feeds, [], segment_nodes=1)
    finally:
        checks._session_values = one_session
    assert made == [1, 1, 1] and list(values) == ["y"]
    np.testing.assert_array_equal(values["y"], [0.0, 2.0])


def _erring(case):
    """A model and feeds one session refuses, in `case`'s way."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["y"])]
    inputs, output_type = [x], TensorProto.FLOAT
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32)}
    if case == "a feed no input has":
        feeds["nobody"] = feeds["x"]
    elif case == "an input not fed":
        inputs.append(helper.make_tensor_value_info("unread", TensorProto.FLOAT, [2]))
    elif case == "an output declared another type":
        output_type = TensorProto.INT64
    elif case == "an input nothing reads fed another type":
        inputs.append(helper.make_tensor_value_info("unread", TensorProto.FLOAT, [2]))
        feeds["unread"] = np.ones(2, dtype=np.int64)
    weight = [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])]
    model = _model(nodes, inputs, [helper.make_tensor_value_info("y", output_type, None)], weight)
    if case == "a feed for an initializer, below IR 4":  # then an initializer listed as an input is a constant
        model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [2]))
        model.ir_version = 3
        feeds["w"] = np.zeros(2, dtype=np.float32)
    return model, feeds


@pytest.mark.parametrize("case", ["a feed no input has", "an input not fed", "an output declared another type",
                                  "an input nothing reads fed another type", "a feed for an initializer, below IR 4"])
def test_what_one_session_refuses_the_segments_refuse_with_its_error(case):
    model, feeds = _erring(case)
    with pytest.raises(Exception) as whole:
        checks.intermediate_values(model, feeds, [], segment_nodes=ONE_SESSION)
    with pytest.raises(Exception) as segmented_run:
        checks.intermediate_values(model, feeds, [], segment_nodes=1)
    assert type(segmented_run.value) is type(whole.value) and str(segmented_run.value) == str(whole.value)


def test_inputs_and_initializers_asked_for_come_back_as_one_session_gives_them():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    words = helper.make_tensor_value_info("words", TensorProto.STRING, [2])
    sequence = helper.make_tensor_sequence_value_info("sequence", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Mul", ["a", "w"], ["y"])]
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [0.5, 3.0])
    model = _model(nodes, [x, words, sequence], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [weight])
    feeds = {"x": np.array([-1.0, 2.0], dtype=np.float32), "words": np.array(["a", "bc"], dtype=object),
             "sequence": [np.ones(2, dtype=np.float32), np.ones(3, dtype=np.float32)]}
    names = ["words", "sequence", "w", "x", "a"]
    expected = checks.intermediate_values(model, feeds, names, segment_nodes=ONE_SESSION)
    assert list(expected) == ["y", *names]
    assert_same_values(checks.intermediate_values(model, feeds, names, segment_nodes=1), expected)
