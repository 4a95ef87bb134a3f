"""Print the module tree of a tagged ONNX file with node counts.

usage: .venv/bin/python scripts/show_tree.py MODEL.onnx"""

import collections
import json
import sys

import onnx


def walk(graph):
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from walk(attribute.g)
            for sub in attribute.graphs:
                yield from walk(sub)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: show_tree.py MODEL.onnx")
    try:
        model = onnx.load(sys.argv[1], load_external_data=False)
    except Exception as error:  # onnx raises several types for a bad file
        sys.exit(f"{sys.argv[1]}: not a readable ONNX model ({type(error).__name__})")
    entries = {p.key: p.value for p in model.metadata_props}
    if "hiertag.modules" not in entries:
        sys.exit(f"{sys.argv[1]}: no hiertag module table (exported without HIERTAG=1?)")
    table = json.loads(entries["hiertag.modules"])
    own = collections.Counter()
    for node in walk(model.graph):
        own[{p.key: p.value for p in node.metadata_props}.get("hierarchy_tag", "<untagged>")] += 1
    total = {tag: sum(n for t, n in own.items() if t == tag or t.startswith(tag + "/")) for tag in table}
    print(f"{'module':<70} {'own':>5} {'total':>6}  path")
    for tag in sorted(table):
        depth = tag.count("/") - 1
        name = "  " * depth + tag.rsplit("/", 1)[1]
        print(f"{name:<70} {own.get(tag, 0):>5} {total[tag]:>6}  {table[tag]['path'] or '(root)'}")
    print(f"{sum(own.values())} nodes, {len(table)} modules, untagged: {own.get('<untagged>', 0)}")


if __name__ == "__main__":
    main()
