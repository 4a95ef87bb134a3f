"""Scores of a tagged file, shared by the benchmark harness and its tests."""

import re

from hiertag.checks import TAG_KEY, module_table, node_props

_INDEXED = re.compile(r"([A-Za-z_]\w*)\.(\d+)")


def _indexed_atoms(path):
    """{container attribute: index} of the list-indexed atoms of a dotted or
    slashed module path: 'encoder.layer.0.attention' -> {'layer': '0'}."""
    return dict(_INDEXED.findall(path.replace("/", ".")))


def node_tags(model):
    return [node_props(node).get(TAG_KEY) for node in model.graph.node]


def coverage(model):
    """(tagged nodes, all nodes) of the main graph."""
    tags = node_tags(model)
    return sum(t is not None for t in tags), len(tags)


def cross_layer_contamination(model):
    """Nodes whose ONNX name lies in repeated block N of a container (the
    '/encoder/layer.1/...' names torch derives from module calls) but whose tag
    names block M != N of that container: the seeds' definition."""
    table = module_table(model)
    contaminated = []
    for node, tag in zip(model.graph.node, node_tags(model), strict=True):
        if tag is None or tag not in table:
            continue
        named = _indexed_atoms(node.name.rsplit("/", 1)[0])
        tagged = _indexed_atoms(table[tag]["path"])
        if any(attr in tagged and tagged[attr] != index for attr, index in named.items()):
            contaminated.append(node.name)
    return contaminated
