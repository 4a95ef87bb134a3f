"""How long ONNX Runtime takes to create a session (optimizations off, as
`carry`'s value check and `verify` create theirs) on a file, and on synthetic
graphs of as many nodes, to tell a cost of the graph's size from one of its
content.

    .venv/bin/python bench/ort_session_cost.py FILE.onnx [--json]

Rows, each a session created in this process from serialized bytes (external
data, if any, is not loaded: the weights are not what is measured):
  file                 the file as it is
  constants as initializers
                       the same graph with every Constant node holding a tensor
                       turned into an initializer of its output's name
  chain of N           N Add nodes, each reading the one before (N: the file's node count)
  fan-out of N         N Add nodes, each reading the one graph input twice (the
                       graph's output is the last one's; the others' are unread)"""

import argparse
import json
import sys
import time

import onnx
from onnx import TensorProto, helper


def session_seconds(model):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    serialized = model.SerializeToString()
    start = time.perf_counter()
    onnxruntime.InferenceSession(serialized, options)
    return time.perf_counter() - start


def constants_as_initializers(model):
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    kept = []
    for node in copy.graph.node:
        if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            copy.graph.initializer.append(tensor)
        else:
            kept.append(node)
    del copy.graph.node[:]
    copy.graph.node.extend(kept)
    return copy


def synthetic(count, fan_out, opset, ir_version):
    """`count` Add nodes named as an exporter names a deep model's."""
    nodes, previous = [], "x"
    for i in range(count):
        output = f"/model/layers.{i // 120}/block/Add_{i}_output_0"
        nodes.append(helper.make_node("Add", ["x" if fan_out else previous, "x"], [output],
                                      name=f"/model/layers.{i // 120}/block/Add_{i}"))
        previous = output
    graph = helper.make_graph(nodes, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="an ONNX file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    model = onnx.load(options.model, load_external_data=False)
    count = len(model.graph.node)
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    graphs = [
        ("file", lambda: model),
        ("constants as initializers", lambda: constants_as_initializers(model)),
        (f"chain of {count}", lambda: synthetic(count, False, opset, model.ir_version)),
        (f"fan-out of {count}", lambda: synthetic(count, True, opset, model.ir_version)),
    ]
    if not options.json:
        print(f"{options.model}: {count:,} nodes", flush=True)
    rows = []
    for name, make in graphs:
        rows.append({"graph": name, "seconds": session_seconds(make())})
        if not options.json:
            print(f"{name:40s} {rows[-1]['seconds']:8.2f} s", flush=True)
    if options.json:
        print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
