"""hiertag carry: tag a transformed copy (optimized, simplified, quantized) from the tagged original.

The tools that come after the export (ONNX Runtime's optimizers, quantization,
fp16 conversion, onnxsim, onnxslim, the version converter) keep the model's
metadata but drop most node tags. carry gives every node of TRANSFORMED the
tag of the module call whose computation it is, by correspondence with
TAGGED, and writes the module table (format 3). Nothing in the
correspondence depends on which tool ran or on op types:

  values     a value whose name TAGGED has, with a shape TAGGED's does not
             contradict, is that value (a value the tool kept the name of but
             reshaped, 3-D computed as 2-D, is not);
  nodes      a node making such a value is matched to the original node making
             it; else to the original node of its name and op type; else to
             the one original node computing with an initializer it reads (a
             Gemm the tool split into MatMul and Add); else to the original
             node of its op type reading what its inputs stand for, through
             nodes the tool absorbed;
  renamed    a renamed value stands for what its matched readers read (the
             value after what its maker absorbed) or what its matched maker
             made; between the two, the original value of its shape;
  region     a node stands for the original nodes computing the values it makes
             from the values it reads, and those computing with its own
             initializers. A node that is its original (same op, same
             attributes) reading an earlier value of the same type and shape
             than its original read stands for no dropped node in between (a
             no-op Cast). All of one module call: that call's entries, "exact".
             Several calls: their common ancestor (call-aware), hiertag.spans
             listing them, hiertag.rewrite naming the transformation and a
             "fused" record in hiertag.rewrites, so `extract` refuses the calls
             the fusion crosses, "span". A node making only renamed values
             that several calls read separately (one quantization for three
             projections) is kept for each of them (hiertag.shared_with, as
             torch's CSE keeps a node), "shared"; so is a node the tool kept
             for a computation it merged away elsewhere;
  rules      a node standing for no original node: a conversion (what it reads
             and what it makes stand for the same original value) goes to the
             side whose boundary keeps the original name: the call making the
             value when it writes that name, the calls reading it when it reads
             it; a node in a nested graph to the node holding the graph;
             anything else by hiertag's own rules, the plugin's
             (core.place_by_rules, over the file's calls): a node computing
             from weights alone to its readers' common call (also where the
             tool gave a placed one readers of other calls: constants it
             merged), any other to its neighbours', once they are placed; the
             root only when nothing applies, listed as unplaced.

Placement is inference; what carry claims it checks (hiertag/check.py).
Both models run once in ONNX Runtime, optimizations off, on the same
generated inputs (seeded), and every module call's boundary in OUT (README
"Module boundaries") is held against the same call's boundary in TAGGED:
verified when each value crossing it is a value that crossed the original
boundary on the same side and is that value on values: within float32
rounding when the tool kept values (the median drift of the values it kept
by name says), and when it changed precision (fp16, int8) the value carry
says it stands for and nearer to it than to any other value of TAGGED.
Every other call is declared with a "rewired" record naming its
cause, the tool's (it fused, removed or converted the boundary) or carry's
(the values exist, carry's placement misses them), which `extract` prints
when it refuses the call. TAGGED's own rewrite records are kept. A pair that
does not correspond is refused before anything is written: an input or output
of TRANSFORMED that TAGGED does not have, or outputs that on the same inputs
differ from TAGGED's by more than half their magnitude.

OUT also gets the value types shape inference finds (ONNX's and ONNX
Runtime's, which knows its fused ops), and for a module boundary value
neither types (a layout node's) the element type and rank it had when the
check ran it, so `extract` can type module boundaries between fused nodes,
and metadata_props["hiertag.carry"]: the
counts and --by. Prints the counts (nodes: exact, shared, span, rule; module
calls: verified, declared by the tool and by carry, and how they were
verified) and the spans and declarations; --json prints them as one JSON
object. OUT is written beside itself, then renamed: nothing half-written is
left. Exit status 0, or 2 with one line on
stderr."""

import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx

from hiertag import checks, core, verbs
from hiertag.verbs.carry import check
from hiertag.verbs.carry.placement import (
    CONVERSION,
    ENCLOSING,
    EXACT,
    NEIGHBOURS,
    ROOT,
    RULE,
    SHARED,
    SPAN,
    WEIGHTS,
    Carrier,
    CarryError,
    Placement,
    placement_of_original,
)
from hiertag.verbs.carry.tagged import Tagged, nested_nodes, without_entries


def _set_props(message, props):
    for key, value in props.items():
        entry = message.metadata_props.add()
        entry.key, entry.value = key, value


def _shares_a_value(model, original):
    """Whether a node of `model`'s main graph makes a value some node of `original` makes."""
    made = {name for node in model.graph.node for name in node.output if name}
    return any(name in made for node in checks.walk_nodes(original.graph) for name in node.output)


def carry(original, transformed, by=None, feeds=None, data_folders=(None, None), in_place=False, tagged=None):
    """Returns (the transformed model tagged, a summary dict). `original` is the
    tagged model (ModelProto), `transformed` a model a tool made from it (left
    unchanged unless `in_place`); `by` names the transformation in
    hiertag.rewrite and the rewrite records (default: its producer, when it
    differs from the original's); `feeds`, arrays for the original's graph
    inputs, are what both run on to check every module call's boundary
    (check.py; default: generated); `data_folders`: where the
    external data of models read without it lie (the check's ONNX Runtime maps
    it from there); `in_place`: `transformed` is the caller's to give up (also
    when carry fails), and becomes the model returned (its entries stripped and
    carry's written) rather than being copied (a copy is as large as the model
    again, alive until the check is done; `original` itself given as
    `transformed` is copied all the same); `tagged`: Tagged(original), read
    before `original` was stripped of its entries (tagged.without_entries),
    handed over (its node entries are let go of once placed).
    Raises CarryError for models that do not correspond."""
    tagged = tagged or Tagged(original)
    props, boundaries, makers = tagged.props, tagged.boundaries, tagged.makers
    by = by or describe_producer(original, transformed) or "the transformation"
    tagged_before = sum(1 for node in checks.walk_nodes(transformed.graph)
                        if any(p.key == core.TAG_KEY for p in node.metadata_props))
    model = checks.strip_tags(transformed, in_place=in_place and transformed is not original)
    del transformed  # when stripped in place, `model` is it
    try:
        check.check_io(original, model)
    except check.Unrelated as error:
        raise CarryError(str(error)) from None
    if model.graph.node and not _shares_a_value(model, original):
        raise CarryError("the transformed model has no value the tagged model has: not made from it")
    carrier = Carrier(original, model, by, tagged, data_folders)
    del tagged
    carrier.run()
    table = carrier.table

    def original_maker(name):
        """The entries of the original node making `name`, or None."""
        index = carrier.c.o.producer(name)
        return carrier.c.o_props[index] if index is not None else makers.get(name)
    counts = defaultdict(int)
    rules = defaultdict(int)
    unplaced = []
    spans = []
    records = []

    def count(node, placement):
        counts[placement.category] += 1
        if placement.category == RULE:
            rules[placement.rule] += 1
            if placement.rule == ROOT:
                unplaced.append(node.name)
        if placement.category == SPAN:  # an exact copy of an export pass's fusion keeps that pass's record
            spans.append((node, placement))
            records.append({"pass": placement.rewrite, "kind": "fused", "modules": list(placement.spans),
                            "node": node.name})

    for index, node in enumerate(model.graph.node):
        placement = carrier.placements[index]
        _set_props(node, placement.props(table))
        count(node, placement)
        for inner in nested_nodes(node):
            made = [props for props in map(original_maker, inner.output) if props is not None]
            inner_placement = placement_of_original(made[0]) if made else \
                Placement(placement.tag, placement.call, category=RULE, rule=ENCLOSING)
            if made:
                inner_placement.category = EXACT
            _set_props(inner, inner_placement.props(table))
            count(inner, inner_placement)

    carrier.release_placing()
    records = _kept_records(props, carrier, model) + records
    _set_props(model, {core.TABLE_KEY: _table_for(model, props[core.TABLE_KEY]),
                       core.FORMAT_VERSION_KEY: core.FORMAT_VERSION})
    # The check reads each call's boundary from the file with its fusions recorded.
    _set_props(model, {core.REWRITES_KEY: core.write_rewrites(records)} if records else {})
    if feeds is None:
        feeds, _ = check.generated_inputs(original)
    try:
        proof = check.Proof(original, model, carrier.c, feeds, by, carrier.regions, data_folders, boundaries)
    except (check.Unrelated, check.CannotRun) as error:
        raise CarryError(str(error)) from None
    # The types carry recorded go in after the check, which holds values then
    # (the check's ONNX Runtime infers its own); the run's after those.
    model.graph.MergeFromString(carrier.c.types)
    carrier.c.types = None
    _record_run_types(model, proof)
    declared = proof.records(carrier.pass_name)
    if declared:
        records += declared
        kept = [p for p in model.metadata_props if p.key != core.REWRITES_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        _set_props(model, {core.REWRITES_KEY: core.write_rewrites(records)})

    nodes = sum(counts.values())
    summary = {
        "nodes": nodes,
        "tagged_before": tagged_before,
        "exact": counts[EXACT], "shared": counts[SHARED], "span": counts[SPAN], "rule": counts[RULE],
        "rules": {rule: rules[rule] for rule in (CONVERSION, WEIGHTS, ENCLOSING, NEIGHBOURS, ROOT)},
        "unplaced": unplaced,
        "by": by,
        "spans": [{"node": node.name, "op_type": node.op_type, "tag": placement.tag, "spans": list(placement.spans)}
                  for node, placement in spans],
        "calls": proof.counts(),
        "declared": [{"call": r.key, "cause": r.cause, "reason": r.reason} for r in proof.results
                     if r.status == check.DECLARED],
        "results": [{"call": r.key, "status": r.status, "cause": r.cause, "reason": r.reason} for r in proof.results],
    }
    _set_props(model, {core.CARRY_KEY: json.dumps({key: summary[key] for key in
                                              ("by", "nodes", "exact", "shared", "span", "rule", "rules", "calls")},
                                             separators=(",", ":"))})
    return model, summary


def _table_for(model, text):
    """The tagged model's module table for the transformed one. A module whose
    computation the export folded into constants ("folded_into") keeps the ones
    the transformed model still has (an initializer or a Constant of its main
    graph by that name); one the tool renamed, merged or folded further is
    dropped, and the field with the last one: the table never names a value the
    file does not hold (ONNX Runtime turns Constants into initializers, and
    merges equal ones under names of its own)."""
    table = json.loads(text)
    kept = {i.name for i in model.graph.initializer}
    kept |= {name for node in model.graph.node if node.op_type == "Constant" for name in node.output}
    changed = False
    for entry in table.values():
        folded = entry.get("folded_into")
        if folded is None:
            continue
        still = [name for name in folded if name in kept]
        if still != folded:
            changed = True
            if still:
                entry["folded_into"] = still
            else:
                del entry["folded_into"]
    return core.write_module_table(table) if changed else text


def _record_run_types(model, proof):
    """A module boundary value no inference typed (ONNX Runtime's layout
    nodes, NCHWc Reorder, have no shape inference) gets the element type and
    rank it had when the check ran it, its dimensions left unknown (the run
    set symbolic ones to 1), so `extract` can cut there."""
    typed = {info.name for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    made = {name for node in model.graph.node for name in node.output}
    boundary = {name for inputs, outputs in proof.t_bounds.values() for name in inputs + outputs}
    found = []
    for name in sorted(boundary & made - typed):
        value = proof.t_values.get(name)
        if value is None:
            continue
        value = np.asarray(value)
        info = onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype),
                                                  [None] * value.ndim)
        found.append(info)
    model.graph.value_info.extend(found)


def describe_producer(original, transformed):
    """The transformation's name: the transformed file's producer when it
    differs from the original's (a tool that writes its own), else None."""
    mine = (transformed.producer_name, transformed.producer_version)
    if mine != (original.producer_name, original.producer_version) and transformed.producer_name:
        return " ".join(part for part in mine if part)
    return None


def _kept_records(props, carrier, model):
    """The original's rewrite records (`props`: its metadata_props): a boundary
    an export pass removed stays removed. Each names the node now standing for
    the one it named, or none."""
    records = json.loads(props.get(core.REWRITES_KEY, "[]"))
    names = {node.name for node in model.graph.node}
    o_index = {node.name: index for index, node in enumerate(carrier.c.o.nodes)}
    for record in records:
        name = record.get("node", "")
        if not name or name in names:
            continue
        original_node = o_index.get(name)
        holders = [model.graph.node[i].name for i, region in carrier.regions.items()
                   if original_node in region and model.graph.node[i].name]
        record["node"] = holders[0] if holders else ""
    return records


def report_lines(out, summary, tagged):
    rules = ", ".join(f"{rule} {count}" for rule, count in summary["rules"].items() if count)
    nodes = summary["nodes"]
    lines = [f"{out}: {nodes} nodes tagged from {tagged} (by {summary['by']}): "
             f"{summary['exact']} exact, {summary['shared']} shared, {summary['span']} span, "
             f"{summary['rule']} by rule{f' ({rules})' if rules else ''}",
             f"  the transformation had left a tag on {summary['tagged_before']} of them "
             f"({100 * summary['tagged_before'] / max(nodes, 1):.0f} %)"]
    for span in summary["spans"][:5]:
        lines.append(f"  span: node '{span['node']}' ({span['op_type']}) -> {span['tag']}, "
                     f"spans {', '.join(span['spans'])}")
    if len(summary["spans"]) > 5:
        lines.append(f"  ... {len(summary['spans']) - 5} more spans (--json lists them)")
    calls = summary["calls"]
    how = (f"{calls['method']}, within {calls['tolerance']:.0e} of each value's magnitude"
           if calls["method"] == check.BY_VALUE else
           f"{calls['method']}: each value the one carry says it stands for and at least "
           f"{check.MARGIN:g} times nearer to it than to any other of the tagged model's values on each of "
           f"{calls['input_sets']} input sets and {check.PROMISED:g} times on new ones as their spread predicts, "
           f"the tool's median drift being {calls['drift']:.0e}")
    others = [f"{calls[key]} {text}" for key, text in (("declared_at_export", "declared at export"),
                                                        ("never_ran", "never ran"), ("no_nodes", "left no node"))
              if calls[key]]
    lines.append(f"  module calls: {calls['verified']} verified ({how}); declared {calls['declared_by_tool']} "
                 f"by the tool, {calls['declared_by_carry']} by carry{'; ' if others else ''}{', '.join(others)}")
    for unrun in calls["unrun_input_sets"]:
        lines.append(f"  ONNX Runtime cannot run {unrun}; the margin rests on the other input sets")
    for declared in summary["declared"][:5]:
        lines.append(f"  declared: {declared['call']}: {declared['reason']}")
    if len(summary["declared"]) > 5:
        lines.append(f"  ... {len(summary['declared']) - 5} more declared calls (--json lists them)")
    if summary["unplaced"]:
        lines.append(f"  unplaced (tagged with the root): {', '.join(summary['unplaced'])}")
    return lines


def arguments(parser):
    parser.add_argument("tagged", metavar="TAGGED.onnx", help="the model as hiertag tagged it")
    parser.add_argument("transformed", metavar="TRANSFORMED.onnx", help="a model a tool made from it")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the transformed model, tagged")
    parser.add_argument("--by", metavar="NAME",
                        help="the transformation's name for hiertag.rewrite and the rewrite records "
                             "(default: TRANSFORMED's producer when it differs from TAGGED's, else its file name)")
    parser.add_argument("--json", action="store_true", help="print the counts as one JSON object")


def run(options):
    verbs.refuse_overwriting([options.output], models=[options.tagged, options.transformed])
    # Both are read without their weights' bytes, whose values carry never reads:
    # the check's ONNX Runtime maps them from the models' folders, and the
    # result's are written by verbs.save_model (read in when OUT holds them, else
    # copied file to file into OUT.data).
    original, _ = verbs.load_tagged(options.tagged, weights_in_place=True)
    try:
        tagged = Tagged(original)
    except CarryError as error:
        verbs.fail(f"{options.tagged} -> {options.transformed}: {error}")
    original = without_entries(original)  # what carry reads of them is read
    transformed = verbs.load_model(options.transformed, weights_in_place=True)
    by = options.by or describe_producer(original, transformed) or Path(options.transformed).name
    folders = (Path(options.tagged).parent, Path(options.transformed).parent)
    try:
        model, summary = carry(original, transformed, by, data_folders=folders, in_place=True, tagged=tagged)
    except CarryError as error:
        verbs.fail(f"{options.tagged} -> {options.transformed}: {error}")
    del original, transformed
    # The check's values and sessions are gone; the room glibc keeps of them
    # goes back before the model is serialized with its weights read in.
    core.hand_back_freed_memory()
    verbs.save_model(model, options.output, sources=[options.tagged, options.transformed],
                     data_from=options.transformed)
    if options.json:
        print(json.dumps({"out": options.output, "tagged": options.tagged, "transformed": options.transformed,
                          **summary}))
    else:
        print("\n".join(report_lines(options.output, summary, options.tagged)))
    return 0


VERB = verbs.Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
