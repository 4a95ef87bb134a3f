"""hiertag select: the node names of the matching modules (for quantize_dynamic's nodes_to_exclude).

A PATTERN is a shell glob (fnmatch, case-sensitive) tried against each module's
tag (/GPT2LMHeadModel/GPT2Model/GPT2Block.0), its qualified path
(transformer.h.0, lm_head), its class (torch.nn.modules.normalization.LayerNorm)
and its class's short name (LayerNorm). A module matches with all its calls and
all its descendants; a node is selected when it belongs to a matching module
(README "Module boundaries": its tag or a hiertag.shared_with reference lies
within it), nodes of If/Loop bodies included: ONNX Runtime's quantizer takes
their names too when it quantizes subgraphs (extra_options EnableSubgraph).

Prints the selected node names one per line, in graph order: the list that
onnxruntime.quantization.quantize_dynamic(..., nodes_to_exclude=[...]) takes;
--python prints it as a Python list literal, --json as {"nodes": [...],
"modules": [...], "patterns": {PATTERN: [tags]}}. torch.nn modules (LayerNorm,
Linear, Embedding) have tags of their own only in files exported with
HIERTAG_TORCH_MODULES (or `hiertag export --torch-modules`); otherwise their
nodes belong to the module that called them.

A pattern that matches no module is an error: one line naming the closest
tags, exit status 2."""

import difflib
import fnmatch
import json
import sys

from hiertag import checks
from hiertag.verbs import Verb, fail, load_tagged


def short_class(class_name):
    return class_name.rsplit(".", 1)[-1]


def matching_modules(table, pattern):
    """The tags whose tag, path, class or short class name the glob matches, in table order."""
    return [tag for tag, entry in table.items()
            if any(fnmatch.fnmatchcase(text, pattern)
                   for text in (tag, entry.get("path", ""), entry.get("class", ""),
                                short_class(entry.get("class", ""))))]


def closest(table, pattern):
    """Up to three tags, paths or class names like `pattern`, for the error line."""
    names = set(table)
    for entry in table.values():
        names.update(filter(None, (entry.get("path"), short_class(entry.get("class", "")))))
    return difflib.get_close_matches(pattern, sorted(names), n=3, cutoff=0.3)


def selected_nodes(model, tags):
    """Nodes (nested graphs included, in pre-order) with a reference within one of `tags`."""
    return [node for node in checks.walk_nodes(model.graph)
            if any(checks.is_within(ref[0], tag) for ref in checks.node_refs(node) for tag in tags)]


def select(path, patterns):
    """{"nodes", "modules", "patterns", "unnamed", "untagged"} for the patterns over the file at `path`."""
    model, table = load_tagged(path)
    matched = {}
    for pattern in patterns:
        tags = matching_modules(table, pattern)
        if not tags:
            near = closest(table, pattern)
            fail(f"{path}: no module matches '{pattern}' (tag, path or class)"
                 + (f"; closest: {', '.join(near)}" if near else ""))
        matched[pattern] = tags
    modules = [tag for tag in table if any(tag in tags for tags in matched.values())]
    nodes = selected_nodes(model, modules)
    names = list(dict.fromkeys(node.name for node in nodes if node.name))
    untagged = sum(1 for node in checks.walk_nodes(model.graph) if not checks.node_refs(node))
    return {"nodes": names, "modules": modules, "patterns": matched,
            "unnamed": sum(1 for node in nodes if not node.name), "untagged": untagged}


def run(options):
    result = select(options.model, options.module)
    # Nodes a name cannot reach, and nodes no tag places, are said, never skipped silently.
    if result["unnamed"]:
        print(f"hiertag select: note: {result['unnamed']} selected nodes have no name and cannot be listed",
              file=sys.stderr)
    if result["untagged"]:
        print(f"hiertag select: note: {result['untagged']} nodes of {options.model} carry no tag "
              "(added by a tool after the export) and are never selected", file=sys.stderr)
    if options.json:
        print(json.dumps({key: result[key] for key in ("nodes", "modules", "patterns")}))
    elif options.python:
        print(repr(result["nodes"]))
    else:
        for name in result["nodes"]:
            print(name)
    return 0


def arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="a file tagged by hiertag")
    parser.add_argument("--module", action="append", required=True, metavar="PATTERN",
                        help="glob over tags, qualified paths and class names (repeatable)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help='print {"nodes", "modules", "patterns"} as JSON')
    output.add_argument("--python", action="store_true", help="print the node names as a Python list literal")


VERB = Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
