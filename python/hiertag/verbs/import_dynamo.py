"""hiertag import-dynamo: turn a dynamo export's module metadata into hiertag's tags and table.

A translation of what torch recorded, for files exported without hiertag: it is not
hiertag's record of the calls, and not exact (torch's metadata cannot tell back-to-back
calls apart, names no module entered through .forward(), and the ONNX optimizer fuses
and merges across modules without a record). For exact tags, export with the plugin
loaded and HIERTAG=1: it tags the dynamo exporter itself (README "The dynamo exporter").

torch's default exporter (`torch.onnx.export(..., dynamo=True)`, torch >= 2.5) writes on
every node it converts `pkg.torch.onnx.name_scopes` (the repr of a list: the qualified
paths of the module calls running when the FX node was traced, root "" first, the FX
node's own name last) and `pkg.torch.onnx.class_hierarchy` (their classes, as
module.__name__, and the op last). This command reads them and writes OUT with what a
HIERTAG=1 export of the TorchScript exporter writes (README "What a tagged file holds",
format 3), made by the same rules:

  tags      the call tree of those chains, in the grammar and instance naming of the
            TorchScript path (core/format/module_table.cpp, core/format/call_tags.cpp): first segment
            the root's class, Class.N for list indices, same-class siblings
            Class[rel.path] (Class[~path] for a module its caller does not own), class
            names and qualifiers %-escaped; torch.nn / torch.ao modules add no level
            unless --torch-modules keeps them (default: HIERTAG_TORCH_MODULES, else 0);
  calls     the metadata names a module's path, not which call of it ran: a new call
            of a tag starts where the graph's nodes, in order, re-enter it after nodes
            outside it; back-to-back calls with nothing between them read as one;
  the rest  nodes without a chain (made by the ONNX optimizer after conversion) take
            hiertag's documented rules (README "What gets tagged"): enclosing (inside
            an If/Loop body), consumers (no inputs), neighbours, root last.

The model's metadata says where the tags came from: "hiertag.source": "dynamo". Only
modules the metadata names are known: a container whose forward never ran, a module
entered through .forward() (torch records no module for it), or one that left no node
is absent from the table, and the modules below it are tagged without its level.
Nodes inside local functions (FunctionProtos) are left as they are: hiertag tags the
graphs' nodes. OUT is self-contained (torch keeps the weights in IN.onnx.data; they
are read in) unless it is too big for one file (2 GiB), then its weights go to
OUT.data; both are written in a folder beside OUT and renamed only when complete.
Exit status 0, or 2 with one line on stderr."""

import ast
import contextlib
import json
import re
import sys
from pathlib import Path

import onnx

from hiertag import checks, core, verbs

NAME_SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASS_HIERARCHY_KEY = "pkg.torch.onnx.class_hierarchy"
STACK_TRACE_KEY = "pkg.torch.onnx.stack_trace"
SOURCE = "dynamo"

# How each node got its tag: from its own metadata, or by one of hiertag's rules.
RULES = ("metadata", "enclosing", "consumers", "neighbours", "root")


class DynamoImportError(verbs.UsageError):
    """Bad input: one line, exit status 2."""


def fail(message):
    raise DynamoImportError(message)


# ---- Reading the metadata ----

def _literal_list(node, key, text):
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        value = None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        fail(f"node '{node.name}' ({node.op_type}): {key} is not a list of strings: {text[:80]!r}")
    return value


def module_chain(node):
    """[(path, qualified class)] of the module calls the node's metadata names,
    root first; None when it names none (a node the ONNX optimizer made, or one
    torch had no module stack for)."""
    props = checks.node_props(node)
    if NAME_SCOPES_KEY not in props:
        return None
    scopes = _literal_list(node, NAME_SCOPES_KEY, props[NAME_SCOPES_KEY])
    classes = _literal_list(node, CLASS_HIERARCHY_KEY, props.get(CLASS_HIERARCHY_KEY, "[]"))
    if len(scopes) != len(classes):
        fail(f"node '{node.name}' ({node.op_type}): {NAME_SCOPES_KEY} and {CLASS_HIERARCHY_KEY} differ in length")
    # The last item is the FX node itself (its name, its op), not a module.
    chain = list(zip(scopes[:-1], classes[:-1], strict=True))
    if not chain:
        return None
    if chain[0][0] != "":
        fail(f"node '{node.name}' ({node.op_type}): {NAME_SCOPES_KEY} does not start at the root module ('')")
    return chain


def _source_modules(model):
    """Python module names whose files appear in the nodes' stack traces."""
    files = set()
    for node in checks.walk_nodes(model.graph):
        files.update(re.findall(r'File "([^"]+)"', checks.node_props(node).get(STACK_TRACE_KEY, "")))
    names = set()
    for file in files:
        parts = Path(file).with_suffix("").parts
        if parts and parts[-1] == "__init__":
            parts = parts[:-1]
        names.update(".".join(parts[i:]) for i in range(len(parts)))
    return names


def short_class_name(qualified, source_modules):
    """The class's own name in dynamo's `module.__name__`: what follows the longest
    prefix that is a module whose file the stack traces name, else what follows the
    last "." (a class name may hold dots: type("Block.1", ...))."""
    parts = qualified.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        if ".".join(parts[:cut]) in source_modules:
            return ".".join(parts[cut:])
    return parts[-1]


# ---- The conversion ----

def _subgraphs(node):
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            yield attribute.g
        yield from attribute.graphs


def _pre_order(graph, holder=None):
    """(node, the node holding its graph or None), nested graphs included."""
    for node in graph.node:
        yield node, holder
        for sub in _subgraphs(node):
            yield from _pre_order(sub, node)


def tag_dynamo_model(model, torch_modules=None):
    """Tags `model` (a ModelProto of torch's dynamo exporter) in place, as a
    HIERTAG=1 TorchScript export would be: every node of the graphs gets
    hierarchy_tag (and hiertag.call on tags called more than once), the model gets
    hiertag.modules, hiertag.format_version and hiertag.source. Returns a summary:
    nodes, modules, how many nodes each rule tagged, function nodes left untagged.
    DynamoImportError on a file this cannot apply to. `torch_modules`: a
    core.TorchModuleSegments (None: no torch.nn / torch.ao class keeps a segment)."""
    if torch_modules is None:
        torch_modules = core.TorchModuleSegments.parse("0")
    props = checks.model_props(model)
    if core.TABLE_KEY in props:
        fail(f"already tagged by hiertag ({core.TABLE_KEY} in the model's metadata_props): nothing to import")
    visits = list(_pre_order(model.graph))
    chains = [module_chain(node) for node, _ in visits]
    if not any(chains):
        fail(f"no node carries the dynamo exporter's {NAME_SCOPES_KEY}: not a file of "
             "torch.onnx.export(..., dynamo=True)")

    classes = {}
    for (node, _), chain in zip(visits, chains, strict=True):
        for path, qualified in chain or []:
            if classes.setdefault(path, qualified) != qualified:
                fail(f"node '{node.name}' ({node.op_type}): module '{path}' is {qualified} here and "
                     f"{classes[path]} elsewhere")
    source_modules = _source_modules(model)
    paths = sorted(classes, key=lambda path: (path.count(".") + (path != ""), path))
    records = []
    for path in paths:
        short = short_class_name(classes[path], source_modules)
        records.append((path, classes[path], short, torch_modules.keeps_segment(classes[path], short)))
    modules = core.ModuleTable(records)
    call_tags = core.CallTags(modules)

    # Call-tree entries along each chain, root first, filtered modules collapsed.
    entry_paths = []
    for chain in chains:
        if chain is None:
            entry_paths.append(None)
            continue
        entries = [core.CallTags.ROOT]
        for path, _ in chain[1:]:
            entry = call_tags.call(entries[-1], modules.find(path))
            if entry != entries[-1]:
                entries.append(entry)
        entry_paths.append(entries)

    calls, node_calls = _number_calls(entry_paths, call_tags)
    tags = [entries[-1] if entries else None for entries in entry_paths]
    rules = ["metadata" if entries else None for entries in entry_paths]
    _settle_by_rules(model.graph, visits, tags, rules, call_tags)
    _inherit_calls(visits, tags, rules, node_calls, calls)

    table = {}
    for entry in sorted(set(tags)):
        while entry >= 0 and call_tags.tag(entry) not in table:
            module = call_tags.module(entry)
            row = {"path": modules.path(module), "class": modules.qualified_class(module)}
            instance_calls, parent_calls = calls.get(entry, ([0], [0]))
            if instance_calls != [0]:
                row["calls"] = instance_calls
            if any(parent_calls):
                row["parent_calls"] = parent_calls
            table[call_tags.tag(entry)] = row
            entry = call_tags.parent(entry)

    for (node, _), entry, call in zip(visits, tags, node_calls, strict=True):
        node.metadata_props.add(key=core.TAG_KEY, value=call_tags.tag(entry))
        if len(calls.get(entry, ([0], [0]))[0]) > 1:
            node.metadata_props.add(key=core.CALL_KEY, value=str(call))
    for key, value in ((core.TABLE_KEY, core.write_module_table(dict(sorted(table.items())))),
                       (core.FORMAT_VERSION_KEY, core.FORMAT_VERSION), (core.SOURCE_KEY, SOURCE)):
        model.metadata_props.add(key=key, value=value)
    return {"nodes": len(visits), "modules": len(table), "root": modules.short_class(0),
            "tagged_by": {rule: rules.count(rule) for rule in RULES},
            "tags_with_several_calls": sum(len(c[0]) > 1 for c in calls.values()),
            "function_nodes_untagged": sum(len(function.node) for function in model.functions)}


def _number_calls(entry_paths, call_tags):
    """({entry: (instance calls, parent calls)}, each node's call of its entry):
    the calls of every tag, in graph order. A node continues the calls its
    predecessor (the last node with a chain) was in, down to the first level
    where their entries differ; from there on it opens new calls. An instance's
    calls are numbered across all its tags, as torch ran them."""
    calls = {}
    instance_counts = {}
    node_calls = [0] * len(entry_paths)
    open_calls = [(core.CallTags.ROOT, 0)]  # [(entry, its call)] of the previous node with a chain
    for i, entries in enumerate(entry_paths):
        if entries is None:
            continue
        current = [(core.CallTags.ROOT, 0)]
        for level, entry in enumerate(entries[1:], start=1):
            continuing = level < len(open_calls) and open_calls[level - 1] == current[-1]
            if continuing and open_calls[level][0] == entry:
                current.append(open_calls[level])
                continue
            instance_calls, parent_calls = calls.setdefault(entry, ([], []))
            module = call_tags.module(entry)
            instance_calls.append(instance_counts.get(module, 0))
            instance_counts[module] = instance_calls[-1] + 1
            parent_calls.append(current[-1][1])
            current.append((entry, len(instance_calls) - 1))
        node_calls[i] = current[-1][1]
        open_calls = current
    return calls, node_calls


def _settle_by_rules(graph, visits, tags, rules, call_tags):
    """Tags the nodes without a chain by hiertag's rules, the plugin's own
    (core.place_by_rules: enclosing, consumers, neighbours, root), reading each
    node's neighbours from the file: graph inputs and outputs count as the root,
    initializers not at all."""
    waiting = [i for i, tag in enumerate(tags) if tag is None]
    if not waiting:
        return
    place = {i: k for k, i in enumerate(waiting)}
    position = {id(node): i for i, (node, _) in enumerate(visits)}
    initializers = {tensor.name for tensor in graph.initializer}
    user_inputs = {value.name for value in graph.input} - initializers
    graph_outputs = {value.name for value in graph.output}
    producer, readers = {}, {}
    for i, (node, _) in enumerate(visits):
        for name in node.output:
            producer[name] = i
        for name in checks._implicit_inputs(node):
            readers.setdefault(name, []).append(i)

    def ref(i):
        return core.unplaced(place[i]) if tags[i] is None else tags[i]

    rows = []
    for i in waiting:
        node, holder = visits[i]
        if holder is not None:
            rows.append((ref(position[id(holder)]), False, []))
            continue
        neighbours = [ref(reader) for name in node.output for reader in readers.get(name, [])]
        neighbours += [core.CallTags.ROOT for name in node.output if name in graph_outputs]
        for name in filter(None, node.input):
            if name in user_inputs:
                neighbours.append(core.CallTags.ROOT)
            elif name in producer:
                neighbours.append(ref(producer[name]))
        rows.append((None, any(node.input), neighbours))
    for i, (tag, rule) in zip(waiting, core.place_by_rules(rows, call_tags), strict=True):
        tags[i], rules[i] = tag, rule


def _inherit_calls(visits, tags, rules, node_calls, calls):
    """A node a rule tagged belongs to the call of a reader with the same tag
    (core.calls_of_readers, the plugin's rule)."""
    listed = [i for i, rule in enumerate(rules)
              if rule != "metadata" and len(calls.get(tags[i], ([0],))[0]) >= 2]
    if not listed:
        return
    place = {i: k for k, i in enumerate(listed)}
    readers = {}
    for i, (node, _) in enumerate(visits):
        for name in checks._implicit_inputs(node):
            readers.setdefault(name, []).append(i)
    rows = []
    for i in listed:
        refs = [(core.unplaced(place[reader]), 0) if reader in place else (tags[reader], node_calls[reader])
                for name in visits[i][0].output for reader in readers.get(name, [])]
        rows.append((tags[i], node_calls[i], refs))
    for i, call in zip(listed, core.calls_of_readers(rows), strict=True):
        node_calls[i] = call


# torch.onnx.export's TorchScript-path args as the dynamo path takes them (one implementation).
export_arguments = checks.dynamo_arguments


# ---- The command ----

def arguments(parser):
    parser.add_argument("input", metavar="IN.onnx", help="a file of torch.onnx.export(..., dynamo=True)")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the tagged file to write")
    parser.add_argument("--torch-modules", default=None, metavar="0|1|A,B",
                        help="torch.nn modules in the tags: 0 none, 1 all, or a comma list of class names "
                             "(default: HIERTAG_TORCH_MODULES, else 0)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")


@contextlib.contextmanager
def _refusals_as_import_errors():
    """The shared helpers' refusals (verbs.UsageError: loading, overwriting,
    writing) raised as DynamoImportError, so a caller catches one class."""
    try:
        yield
    except DynamoImportError:
        raise
    except verbs.UsageError as error:
        raise DynamoImportError(str(error)) from None


def load(path):
    """The ModelProto at `path`, its external data read in (verbs.load_model,
    worded as every verb words it); a model with no nodes is refused too.
    DynamoImportError for every refusal."""
    with _refusals_as_import_errors():
        model = verbs.load_model(path)
    if not model.graph.node:
        fail(f"{path}: not an ONNX model with a graph (no nodes)")
    return model


def import_file(source, output, torch_modules=None):
    """Reads SOURCE, tags it (tag_dynamo_model) and writes OUTPUT; the summary.
    DynamoImportError for every refusal."""
    with _refusals_as_import_errors():
        return _import_file(source, output, torch_modules)


def _import_file(source, output, torch_modules):
    verbs.refuse_overwriting([output], models=[source])
    model = load(source)
    try:
        summary = tag_dynamo_model(model, torch_modules)
    except DynamoImportError as error:
        fail(f"{source}: {error}")
    if not Path(output).resolve().parent.is_dir():
        fail(f"{output}: no such directory")
    try:
        verbs.save_model(model, output, sources=[source])
    except (OSError, ValueError) as error:
        fail(f"{output}: cannot write ({error})")
    return {"input": str(source), "output": str(output), **summary}


def describe(summary):
    by_rule = ", ".join(f"{rule} {count}" for rule, count in summary["tagged_by"].items()
                        if rule != "metadata" and count)
    line = (f"{summary['output']}: {summary['nodes']} nodes tagged, {summary['modules']} modules ({summary['root']}); "
            f"tags from the dynamo exporter's metadata: {summary['tagged_by']['metadata']} nodes"
            + (f", by hiertag's rules: {by_rule}" if by_rule else ""))
    if summary["function_nodes_untagged"]:
        line += f"; {summary['function_nodes_untagged']} nodes inside local functions left untagged"
    return line + "\n(a translation of torch's metadata, not exact: for exact tags export with HIERTAG=1)"


def run(options):
    _, _, torch_modules = verbs.torch_modules_option(options.torch_modules)
    summary = import_file(options.input, options.output, torch_modules)
    if options.json:
        print(json.dumps(summary))
    else:
        print(describe(summary))
    return 0


VERB = verbs.Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
