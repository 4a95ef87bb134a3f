"""Writes the seed corpora of the fuzz targets (scripts/fuzz.sh runs it):

  OUT/model/  ONNX files for model_reader, validate, tree and extract:
              - a tagged export of each bundled model (hiertag.zoo) through the
                plugin, nested If (alias_chains) and Loop (scripted_loop) bodies
                included; initializer data over 4 KiB is dropped (dims and types
                kept) so that inputs stay small and mutations fast;
              - the same with those initializers in external data: in
                weights.bin (the 4 MiB file the targets keep next to the model,
                fuzz_support.h), and with hostile locations: "../../etc/passwd",
                "/etc/passwd", the symlinks link.bin and linkdir/canary.bin that
                lead out of the model's folder, "../outside/canary.bin", a NUL
                byte, an empty name, offsets and lengths beyond the file, no
                number, 2^64-1;
              - graphs nested 64 deep (read) and 65 deep (refused), a module
                table nested past the JSON cap, a table whose numbers overflow;
  OUT/json/   the exports' module tables, rewrite records and shared_with lists,
              and hand-made documents at the edges of the JSON reader;
  OUT/tag/    every tag and call reference of the exports, and hand-made ones.

usage: make_seed_corpus.py OUT [--models a,b,...]
"""

import argparse
import copy
import hashlib
import json
import os
import sys
import tempfile

import onnx
from onnx import TensorProto, helper

from hiertag import checks

DEFAULT_MODELS = ("bert,gpt2,t5,resnet,llama,scripted_loop,alias_chains,autograd_symbolic,calls_sharing_work,"
                  "rewrites_across_calls,cross_module_rewrites,shared_layer_stack,called_twice,folded_module,"
                  "odd_class_names,annotated_transformer,shared_subexpression,reached_past,tracer_alias,"
                  "interleaved_container,direct_forward,containers,hostile_names")
# The models whose files also go in with external data (hostile locations included).
EXTERNAL_DATA_MODELS = ("bert", "scripted_loop", "calls_sharing_work")
INLINE_LIMIT = 4096
WEIGHTS_FILE_SIZE = 4 << 20  # fuzz_support.h writes weights.bin of this size
HOSTILE_LOCATIONS = ("../../etc/passwd", "/etc/passwd", "link.bin", "linkdir/canary.bin", "../outside/canary.bin",
                     "sub/../../outside/canary.bin", "./weights.bin", "weights.bin\0../../etc/passwd", "",
                     "\\\\server\\share\\x", "C:\\weights.bin", "weights.bin/")
HOSTILE_RANGES = (("0", str(WEIGHTS_FILE_SIZE + 1)), (str(WEIGHTS_FILE_SIZE + 1), None), ("-1", None),
                  ("18446744073709551615", "18446744073709551615"), ("1" * 20, None), ("0x10", None),
                  (str(WEIGHTS_FILE_SIZE - 4), "8"))


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as out:
        out.write(data)


def tensor_bytes(tensor):
    size = {TensorProto.FLOAT: 4, TensorProto.INT64: 8, TensorProto.INT32: 4, TensorProto.DOUBLE: 8,
            TensorProto.BOOL: 1, TensorProto.FLOAT16: 2, TensorProto.UINT8: 1,
            TensorProto.INT8: 1}.get(tensor.data_type, 4)
    count = 1
    for dim in tensor.dims:
        count *= dim
    return count * size


DATA_FIELDS = ("raw_data", "float_data", "int64_data", "int32_data", "double_data")


def drop_data(tensor):
    for field in DATA_FIELDS:
        tensor.ClearField(field)


def drop_large_data(model):
    for graph in checks.walk_graphs(model.graph):
        for tensor in graph.initializer:
            if tensor.ByteSize() > INLINE_LIMIT:
                drop_data(tensor)
    return model


def set_external(tensor, location, offset, length):
    drop_data(tensor)
    del tensor.external_data[:]
    entries = [("location", location), ("offset", offset)] + ([("length", length)] if length is not None else [])
    for key, value in entries:
        entry = tensor.external_data.add()
        entry.key = key
        entry.value = value
    tensor.data_location = TensorProto.EXTERNAL


def with_external_data(model):
    """Large initializers in weights.bin, packed from offset 0 (the rest dropped); None when none is large."""
    model = copy.deepcopy(model)
    offset = 0
    moved = 0
    for tensor in model.graph.initializer:
        if tensor.ByteSize() <= INLINE_LIMIT:
            continue
        length = tensor_bytes(tensor)
        if offset + length > WEIGHTS_FILE_SIZE:
            drop_data(tensor)
            continue
        set_external(tensor, "weights.bin", str(offset), str(length))
        moved += 1
        offset += length
    return model if moved else None


def small_external_model():
    """A tagged model of one MatMul whose weight lies in weights.bin: the base of the
    external-data seeds for models without a large initializer."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], [0.0] * 16)
    node = helper.make_node("MatMul", ["x", "w"], ["y"], name="/layer/MatMul")
    helper.set_metadata_props(node, {"hierarchy_tag": "/Net/Linear"})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    helper.set_model_props(model, {
        "hiertag.modules": json.dumps({"/Net": {"path": "", "class": "m.Net"},
                                       "/Net/Linear": {"path": "linear", "class": "torch.nn.Linear"}}),
        "hiertag.format_version": "3"})
    set_external(model.graph.initializer[0], "weights.bin", "0", "64")
    return model


def external_seeds(name, model, out):
    write(out, f"{name}.external.onnx", model.SerializeToString())
    first = [i for i, tensor in enumerate(model.graph.initializer) if tensor.data_location == TensorProto.EXTERNAL][0]
    for number, location in enumerate(HOSTILE_LOCATIONS):
        hostile = copy.deepcopy(model)
        tensor = hostile.graph.initializer[first]
        entries = {entry.key: entry.value for entry in tensor.external_data}
        set_external(tensor, location, entries["offset"], entries.get("length"))
        write(out, f"{name}.location{number}.onnx", hostile.SerializeToString())
    for number, (offset, length) in enumerate(HOSTILE_RANGES):
        hostile = copy.deepcopy(model)
        set_external(hostile.graph.initializer[first], "weights.bin", offset, length)
        write(out, f"{name}.range{number}.onnx", hostile.SerializeToString())


def varint(value):
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def field(number, payload):
    """A length-delimited field; an int payload is a varint field."""
    if isinstance(payload, int):
        return varint(number << 3) + varint(payload)
    payload = payload.encode() if isinstance(payload, str) else payload
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def tagged_node(op_type, inputs, outputs, name, tag, attributes=b""):
    return (b"".join(field(1, value) for value in inputs) + b"".join(field(2, value) for value in outputs) +
            field(3, name) + field(4, op_type) + attributes +
            field(9, field(1, "hierarchy_tag") + field(2, tag)))


def nested_model(depth):
    """Ifs nested `depth` graphs deep below the main graph, every node tagged, written on the wire
    (Python's protobuf refuses messages nested past 100 levels; a graph level is three)."""
    def branch(level, body):
        output = field(1, f"y{level}")
        return field(1, body) + field(2, f"g{level}") + field(12, output)

    body = tagged_node("Identity", ["x"], [f"y{depth}"], f"/id{depth}", "/Net")
    for level in range(depth - 1, -1, -1):
        then_branch = field(1, "then_branch") + field(20, 5) + field(6, branch(level + 1, body))
        else_node = tagged_node("Identity", ["x"], [f"y{level + 1}"], f"/else{level}", "/Net")
        else_branch = field(1, "else_branch") + field(20, 5) + field(6, branch(level + 1, else_node))
        body = tagged_node("If", ["c"], [f"y{level}"], f"/if{level}", "/Net",
                           field(5, then_branch) + field(5, else_branch))
    graph = (field(1, body) + field(2, "main") + field(11, field(1, "c")) + field(11, field(1, "x"))
             + field(12, field(1, "y0")))
    table = json.dumps({"/Net": {"path": "", "class": "m.Net"}})
    return (field(1, 8) + field(7, graph) + field(8, field(2, 17)) +
            field(14, field(1, "hiertag.modules") + field(2, table)) +
            field(14, field(1, "hiertag.format_version") + field(2, "3")))


def hand_made_models(out):
    for depth in (1, 64, 65):
        write(out, f"nested{depth}.onnx", nested_model(depth))
    base = onnx.load_from_string(nested_model(1))
    for name, table in (("deep_table", "[" * 300 + "]" * 300),
                        ("number_overflow", '{"/Net": {"path": "", "class": "x", "calls": [1e400]}}'),
                        ("repeated_tag", '{"/Net": {"path": "", "class": "x"}, "/Net": {"path": "", "class": "y"}}'),
                        ("no_slash_root", '{"Net": {"path": "", "class": "x"}, "Net/A": {"path": "a", "class": "y"}}')):
        model = copy.deepcopy(base)
        helper.set_model_props(model, {"hiertag.modules": table, "hiertag.format_version": "3"})
        write(out, f"{name}.onnx", model.SerializeToString())
    model = small_external_model()
    external_seeds("small", model, out)


def export(name, path):
    import torch

    import hiertag
    from hiertag import OPSET, zoo
    if hiertag.library_path() not in torch.ops.loaded_libraries:
        torch.ops.load_library(hiertag.library_path())
    module, args = zoo.ALL[name]()
    with hiertag.tagging():
        torch.onnx.export(module, args, path, dynamo=False, opset_version=OPSET)


def strings_of(model):
    """The module table, the rewrites, and every tag list and tag of the file."""
    documents, tags = [], set()
    metadata = {entry.key: entry.value for entry in model.metadata_props}
    for key in ("hiertag.modules", "hiertag.rewrites"):
        if key in metadata:
            documents.append(metadata[key])
    if "hiertag.modules" in metadata:
        tags.update(json.loads(metadata["hiertag.modules"]))
    for graph in checks.walk_graphs(model.graph):
        for node in graph.node:
            for entry in node.metadata_props:
                if entry.key == "hierarchy_tag":
                    tags.add(entry.value)
                elif entry.key in ("hiertag.shared_with", "hiertag.spans"):
                    documents.append(entry.value)
                    tags.update(json.loads(entry.value))
    return documents, tags


def digest(data):
    return hashlib.sha1(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


HAND_MADE_JSON = ('{"/Net": {"path": "", "class": "a.Net", "calls": [0, 1099511627776], "parent_calls": [0, 0]}}',
                  '{"/Net": {"path": "", "class": "a.Net", "ran": false, "folded_into": ["c1"]}}',
                  '[{"pass": "p", "kind": "fused", "modules": ["/Net#1"], "node": "n"}]',
                  '"\\ud800"', '"\\u00e9\\u0000"', "1e400", "-0", "18446744073709551616", "[" * 256 + "]" * 256,
                  "{" + '"a":' * 10 + "1" + "}" * 10, '{"a":1,"a":2}', '{"a":{"b":1,"b":2}}', "")
HAND_MADE_TAGS = ("/Net", "/Net/Block.0/Attention", "/Net/Conv1D[c_attn]", "/Net/Linear[~generator.proj]",
                  "/Net/Blk%5Bx%5D", "/Net/A[%7Eb]", "/Net/A.999999999999999999", "/Net/A#3", "/Net/A#",
                  "/Net/A[~]", "/Net/A[]", "/Net//A", "/", "Net", "/Net/A%zz", "hiertag.m12|pkg.Net::var",
                  "hiertag.d3|pkg.Net::", "hiertag.borrowed::", "__torch__.pkg.___torch_mangle_3.Net")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--models", default=DEFAULT_MODELS)
    options = parser.parse_args()
    model_dir, json_dir, tag_dir = (os.path.join(options.out, part) for part in ("model", "json", "tag"))
    documents, tags = set(HAND_MADE_JSON), set(HAND_MADE_TAGS)
    failed = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in options.models.split(","):
            path = os.path.join(scratch, name + ".onnx")
            try:
                export(name, path)
            except Exception as error:  # a model torch cannot export here is reported, the rest go on
                failed.append(f"{name} ({type(error).__name__}: {error})")
                continue
            exported = onnx.load(path, load_external_data=False)
            model = drop_large_data(copy.deepcopy(exported))
            write(model_dir, name + ".onnx", model.SerializeToString())
            if name in EXTERNAL_DATA_MODELS:
                external = with_external_data(exported)
                if external is not None:
                    external_seeds(name, external, model_dir)
            found_documents, found_tags = strings_of(model)
            documents.update(found_documents)
            tags.update(found_tags)
    hand_made_models(model_dir)
    for document in documents:
        write(json_dir, digest(document), document)
    for tag in tags:
        write(tag_dir, digest(tag), tag)
        for separator in ("#0", "#1"):
            write(tag_dir, digest(tag + separator), tag + separator)
    counts = {part: len(os.listdir(os.path.join(options.out, part))) for part in ("model", "json", "tag")}
    print("seed corpus: " + ", ".join(f"{part} {count}" for part, count in counts.items()) +
          (f"; not exported: {'; '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
