"""How long ONNX Runtime takes to create a session (optimizations off, as
`carry`'s value check and `verify` create theirs) on a file, and on synthetic
graphs of as many computing nodes, to tell a cost of the graph's size from one
of its shape.

    .venv/bin/python bench/ort_session_cost.py FILE.onnx [--json]

Each row but "every value, in segments" is one session created in this
process from serialized bytes, after a session on a one-node model has paid
ONNX Runtime's one-time set-up; one run each, in this order. N is the file's main-graph nodes less its Constant nodes
(ONNX Runtime turns those into initializers when it reads a graph); external
data is mapped from the file's folder (`carry` reads tensors under 64 KiB in
and maps the others).
  file                 the file as it is
  file, no buffer reuse
                       the same, ONNX Runtime's planning of buffer reuse off
                       (SessionOptions.enable_mem_reuse)
  file, every value an output
                       the file with every value its main graph's nodes make added
                       as a graph output (nearly what `carry`'s value check asks for)
  every value, in segments
                       what the check does for that: checks.intermediate_values on
                       generated inputs (hiertag.verbs.carry.check.generated_inputs), the main
                       graph in segments of checks.SEGMENT_NODES nodes, each session
                       set up and run (in one session, as the check falls back, when
                       a float16 or non-tensor value crosses a cut)
  chain of N           N Add nodes, each reading the one before and the graph input
  fan-out of N         N Add nodes, each reading the graph input twice; the graph's
                       output is the last one's, the others' are read by nobody
  fan-out of N, summed the same N nodes, all read by one Sum that is the output"""

import argparse
import json
import sys
import time
from pathlib import Path

import onnx
import onnxruntime
from onnx import TensorProto, helper

from hiertag import OPSET, checks
from hiertag.verbs.carry.check import generated_inputs


def session_seconds(model, data_folder=None, reuse=True):
    options = checks.unoptimized_session_options(data_folder)
    options.enable_mem_reuse = reuse
    serialized = model.SerializeToString()
    start = time.perf_counter()
    onnxruntime.InferenceSession(serialized, options)
    return time.perf_counter() - start


def every_value(model):
    return [name for node in model.graph.node for name in node.output if name]


def every_value_an_output(model):
    return checks.with_outputs(model, every_value(model))


def segmented_seconds(model, data_folder):
    feeds, _ = generated_inputs(model)
    start = time.perf_counter()
    checks.intermediate_values(model, feeds, every_value(model), data_folder)
    return time.perf_counter() - start


# Nodes of one synthetic layer in names: about as many as a layer of
# bench/deep_decoder.py's decoder has (121).
LAYER_NODES = 120


def synthetic(count, shape, opset, ir_version):
    """`count` Add nodes named as the exporter names a deep model's, in
    `shape` "chain", "fan-out" or "summed" (module docstring)."""
    nodes, previous, outputs = [], "x", []
    for i in range(count):
        prefix = f"/model/layers.{i // LAYER_NODES}/block"
        output = f"{prefix}/Add_{i}_output_0"
        first = previous if shape == "chain" else "x"
        nodes.append(helper.make_node("Add", [first, "x"], [output], name=f"{prefix}/Add_{i}"))
        previous = output
        outputs.append(output)
    if shape == "summed":
        nodes.append(helper.make_node("Sum", outputs, ["sum"], name="/model/Sum"))
        previous = "sum"
    graph = helper.make_graph(nodes, shape, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version)


def measure(path):
    """Yields the report {"file", "nodes", "computing_nodes", "onnxruntime",
    "rows": [{"graph", "seconds"}]} once before its first row, then each time a
    row is added to it. Raises what reading the file or ONNX Runtime raises."""
    model = onnx.load(str(path), load_external_data=False)
    computing = sum(1 for node in model.graph.node if node.op_type != "Constant")
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), OPSET)
    session_seconds(synthetic(1, "chain", opset, model.ir_version))  # ONNX Runtime's one-time set-up
    folder = path.parent
    rows = [
        ("file", lambda: session_seconds(model, folder)),
        ("file, no buffer reuse", lambda: session_seconds(model, folder, reuse=False)),
        ("file, every value an output", lambda: session_seconds(every_value_an_output(model), folder)),
        (f"every value, in segments of {checks.SEGMENT_NODES:,}", lambda: segmented_seconds(model, folder)),
    ]
    rows += [(f"{shape.replace('summed', 'fan-out')} of {computing}{', summed' if shape == 'summed' else ''}",
              lambda shape=shape: session_seconds(synthetic(computing, shape, opset, model.ir_version)))
             for shape in ("chain", "fan-out", "summed")]
    report = {"file": str(path), "nodes": len(model.graph.node), "computing_nodes": computing,
              "onnxruntime": onnxruntime.__version__, "rows": []}
    yield report
    for name, seconds in rows:
        report["rows"].append({"graph": name, "seconds": seconds()})
        yield report


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="an ONNX file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    path = Path(options.model).resolve()
    if not path.is_file():
        print(f"ort_session_cost: {options.model}: {'not a file' if path.exists() else 'no such file'}",
              file=sys.stderr)
        return 2
    report, rows = None, measure(path)
    while True:
        try:
            report = next(rows)
        except StopIteration:
            break
        except Exception as error:  # reading the file, or ONNX Runtime's (its errors derive from Exception alone)
            lines = str(error).strip().splitlines()
            print(f"ort_session_cost: {options.model}: {lines[-1] if lines else type(error).__name__}",
                  file=sys.stderr)
            return 1
        if options.json:
            continue
        if not report["rows"]:
            print(f"{path}: {report['nodes']:,} nodes, {report['computing_nodes']:,} not Constant; "
                  f"onnxruntime {report['onnxruntime']}", flush=True)
        else:
            print(f"{report['rows'][-1]['graph']:40s} {report['rows'][-1]['seconds']:8.2f} s", flush=True)
    if options.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
