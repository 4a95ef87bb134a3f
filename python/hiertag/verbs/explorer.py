"""hiertag explorer: write Model Explorer's layer namespaces from the tags.

Model Explorer's ONNX adapter (model-explorer-onnx) groups nodes into
collapsible layers by each node's metadata_props["namespace"], a
"/"-separated path, and falls back to the node's name minus its last part
(torch's names follow attribute paths: /encoder/layer.0/attention/...). This
writes every node's namespace from its hierarchy_tag, so the layers are the
module tree of the tags, named as the tags name them:

    tag        /BertModel/BertEncoder/BertLayer.0/BertAttention/BertSelfAttention
    namespace  /BertModel/BertEncoder/BertLayer.0/BertAttention/BertSelfAttention

Tag segments never hold an unescaped "/" (README "Tag grammar"), so each
segment is one layer. A node inside an If or Loop body gets the part of its
tag below the tag of the node holding the body (empty when they are equal):
viewers show a body under (or beside) the node that holds it, so the full tag
would repeat the holder's layers there. A namespace the file already has is
replaced. Nothing else changes: the tags, the module table and the graph stay
as they are (`hiertag validate` accepts OUT). OUT must not be MODEL (nor a
link to it): no verb writes over its input. It is written beside OUT and
renamed, so nothing half-written is ever left.

Prints `OUT: N nodes given a namespace, M layers` (--json: one object)."""

import json
import sys

import onnx

from hiertag import checks, core
from hiertag.verbs import Verb, load_tagged, refuse_overwriting, save_model

NAMESPACE_KEY = "namespace"


def relative_namespace(tag, holder_tag):
    """The namespace of a node tagged `tag` inside a body held by a node tagged `holder_tag`."""
    if tag == holder_tag:
        return ""
    if checks.is_within(tag, holder_tag):
        return tag[len(holder_tag):]
    return tag


def set_namespace(node, namespace):
    """Replaces the node's namespace entry; returns whether it had one."""
    kept = [p for p in node.metadata_props if p.key != NAMESPACE_KEY]
    replaced = len(kept) != len(node.metadata_props)
    del node.metadata_props[:]
    node.metadata_props.extend(kept)
    node.metadata_props.add(key=NAMESPACE_KEY, value=namespace)
    return replaced


def write_namespaces(graph, holder_tag=None, counts=None):
    """Sets the namespace of every tagged node of `graph` and its bodies.
    Returns {"written", "replaced", "untagged", "layers"} (layers: the set of
    namespaces of the main graph's nodes and their prefixes)."""
    counts = counts if counts is not None else {"written": 0, "replaced": 0, "untagged": 0, "layers": set()}
    for node in graph.node:
        tag = checks.node_props(node).get(core.TAG_KEY)
        if tag is None:
            counts["untagged"] += 1
        else:
            namespace = tag if holder_tag is None else relative_namespace(tag, holder_tag)
            counts["replaced"] += set_namespace(node, namespace)
            counts["written"] += 1
            if holder_tag is None:
                segments = namespace.strip("/").split("/")
                counts["layers"].update("/".join(segments[:depth]) for depth in range(1, len(segments) + 1))
        for attribute in node.attribute:
            bodies = ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []) + list(attribute.graphs)
            for body in bodies:
                # A body inside an untagged node is placed under the enclosing holder's tag.
                write_namespaces(body, tag if tag is not None else holder_tag, counts)
    return counts


def run(options):
    refuse_overwriting([options.output], models=[options.model])
    model, _ = load_tagged(options.model, read_data=False)  # save_model copies or reads the weights
    counts = write_namespaces(model.graph)
    save_model(model, options.output, sources=[options.model], data_from=options.model)
    summary = {"output": options.output, "nodes": counts["written"], "replaced": counts["replaced"],
               "untagged": counts["untagged"], "layers": len(counts["layers"])}
    if options.json:
        print(json.dumps(summary))
        return 0
    print(f"{options.output}: {summary['nodes']} nodes given a namespace, {summary['layers']} layers"
          + (f"; {summary['replaced']} namespaces replaced" if summary["replaced"] else "")
          + (f"; {summary['untagged']} nodes without a tag keep their name's grouping" if summary["untagged"] else ""))
    return 0


def arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="a file tagged by hiertag")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the file to write (not MODEL)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


VERB = Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
