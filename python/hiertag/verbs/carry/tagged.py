"""What carry reads of the tagged model's own entries (Tagged), read once, so
that the command can hold the model without them (without_entries): they are
a fifth of its graph's bytes, and every phase of carry holds the model (its
shape inference, its matching, the check's runs of it)."""

import json

import onnx
from google.protobuf import message

from hiertag import checks, core
from hiertag.verbs.carry import check
from hiertag.verbs.carry.placement import CarryError


class Tagged:
    """The tagged model's hiertag entries as carry reads them: `props`, the
    model's metadata_props; `table`, its module table; `boundaries`, its
    module calls as the check reads them (check.Boundaries); `calls`, its
    core.CallTable; `node_props`, each main-graph node's entries (each key
    and value the one string `names` holds for it), handed to the
    correspondence, which lets go of them once placing is done; `makers`,
    {value: its maker's entries} for the nodes of nested graphs."""

    def __init__(self, model):
        self.props = checks.model_props(model)
        if core.TABLE_KEY not in self.props:
            raise CarryError("the tagged model is not tagged by hiertag (no hiertag.modules in its metadata_props)")
        self.table = json.loads(self.props[core.TABLE_KEY])
        # Read first, while carry holds least: the core's parse of the model
        # is a moment as large as what matching holds later.
        self.boundaries = check.Boundaries(model, self.table)
        self.calls = core.CallTable(model)
        self.names = {}
        self.node_props = [checks.node_props(node, self.names) for node in model.graph.node]
        self.makers = {output: checks.node_props(inner, self.names) for node in model.graph.node
                       for inner in nested_nodes(node) for output in inner.output if output}


def nested_nodes(node):
    """Every node of the graphs a node holds (If, Loop, Scan bodies), at any depth."""
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []) + list(attribute.graphs)
        for graph in graphs:
            yield from checks.walk_nodes(graph)


def without_entries(model):
    """`model`, which the caller gives up, without hiertag's entries
    (checks.strip_tags), parsed anew: a message stripped in place keeps the
    room its entries took."""
    checks.strip_tags(model, in_place=True)
    try:
        return onnx.ModelProto.FromString(model.SerializeToString())
    except message.EncodeError:  # 2 GiB or more of tensors read in: stripped where it is
        return model
