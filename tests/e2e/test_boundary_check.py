"""End-to-end: the module-boundary check (hiertag.checks) holds each value
crossing a module call's boundary against the one specific tensor that call
received or returned: a real export passes; the same file with the call's
inputs swapped, or with two of its boundary values standing for one tensor it
received, fails."""

import onnx
import pytest
import torch
from torch import nn

import hiertag
from hiertag import OPSET, checks, core
from hiertag.models import quiet


class Pair(nn.Module):
    """Its result does not depend on b's values (b * 0 on finite b), so a file
    that feeds it the wrong tensor there still computes the right result."""

    def forward(self, a, b):
        return a * 2.0 + b * 0.0


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = Pair()

    def forward(self, x, y):
        return self.pair(x, y) + 1.0


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    path = tmp_path_factory.mktemp("boundary") / "net.onnx"
    model, args = Net().eval(), (torch.randn(2, 4), torch.randn(2, 4))
    with quiet(), hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    return onnx.load(path), model, args


def failures(model, torch_model, args):
    feeds = {i.name: a.numpy() for i, a in zip(model.graph.input, args, strict=True)}
    results, _ = checks.module_boundary_results(model, torch_model, args, feeds)
    return results["/Net/Pair"]


def _muls(model):
    return [node for node in model.graph.node
            if node.op_type == "Mul" and [tag for tag, _ in checks.node_refs(node)] == ["/Net/Pair"]]


def test_check_that_the_export_passes(exported):
    model, torch_model, args = exported
    x, y = (i.name for i in model.graph.input)
    assert [n.input[0] for n in _muls(model)] == [x, y]
    assert failures(model, torch_model, args) == []


def test_check_that_swapped_inputs_fail(exported):
    model, torch_model, args = exported
    swapped = onnx.ModelProto()
    swapped.CopyFrom(model)
    first, second = _muls(swapped)
    first.input[0], second.input[0] = second.input[0], first.input[0]
    found = failures(swapped, torch_model, args)
    assert len(found) == 1 and found[0].startswith("/Net/Pair: produces ")
    assert "not a tensor it returned" in found[0]


def test_check_that_two_boundary_values_cannot_both_be_one_received_tensor(exported):
    # The call reads, where it read y, a copy of x the caller made: its result
    # is still right, but the copy is no tensor it received (x is already
    # claimed by the name x, and y differs).
    model, torch_model, args = exported
    copied = onnx.ModelProto()
    copied.CopyFrom(model)
    first, second = _muls(copied)
    second.input[0] = "x_copy"
    identity = onnx.helper.make_node("Identity", [first.input[0]], ["x_copy"], name="/Identity")
    identity.metadata_props.add(key=core.TAG_KEY, value="/Net")
    copied.graph.node.insert(0, identity)
    assert failures(copied, torch_model, args) == [
        "/Net/Pair: consumes 'x_copy' (2, 4), the tensor it equals (received #0) is another boundary value's"]
