"""What hiertag's entries add to a tagged ONNX file, by key: the bytes of each
node metadata key (hierarchy_tag, hiertag.*) over every graph, and of each model
metadata entry, against the file's size. Reads no external data.

    .venv/bin/python bench/tag_bytes.py TAGGED.onnx [--json]"""

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

import onnx


def entry_bytes(entry):
    """An entry's bytes as a repeated field of its message holds them: its own, its length, its tag byte."""
    size = entry.ByteSize()
    return size + _varint_size(size) + 1


def _varint_size(value):
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


def measure(path):
    model = onnx.load(str(path), load_external_data=False)
    nodes, counts = Counter(), Counter()
    every = 0

    def walk(graph):
        nonlocal every
        for node in graph.node:
            every += 1
            for entry in node.metadata_props:
                nodes[entry.key] += entry_bytes(entry)
                counts[entry.key] += 1
            for attribute in node.attribute:
                for body in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                    walk(body)

    walk(model.graph)
    return {"file": str(path), "file_bytes": Path(path).stat().st_size, "nodes": every,
            "node_entries": {key: {"bytes": nodes[key], "nodes": counts[key]} for key in sorted(nodes)},
            "model_entries": {entry.key: entry_bytes(entry) for entry in model.metadata_props}}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", metavar="TAGGED.onnx")
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args(argv)
    result = measure(options.model)
    if options.json:
        print(json.dumps(result))
        return 0
    print(f"{result['file']}: {result['file_bytes']:,} bytes, {result['nodes']:,} nodes")
    for key, entry in result["node_entries"].items():
        print(f"  node {key}: {entry['bytes']:,} bytes on {entry['nodes']:,} nodes")
    for key, size in result["model_entries"].items():
        print(f"  model {key}: {size:,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
