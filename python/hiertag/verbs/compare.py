"""hiertag compare: compare two tagged files module by module (--values: boundary values).

A is a file tagged by hiertag; B is another file of the same model: a
re-export, or what a tool made of A (ONNX Runtime's quantize_dynamic,
onnxconverter_common's float16 conversion, `hiertag carry`). Modules
correspond by tag: A's module table.

Counts (always): per module of A's table, in the order they run, the nodes
and parameters (`hiertag tree`'s counts: descendants included) in A and in B,
and how the op types under it changed (B - A). B's counts come from B's own
tags: nodes a tool added without a tag count for no module, and their number
is said. A B without a module table (a tool dropped it) is compared by values
only.

Values (--values): both files run in ONNX Runtime, all graph optimizations
off, on the same inputs, and every value crossing a module boundary of A
(README "Module boundaries", read from A's tags: the values a module call
makes for outside) is read by name in both. Such tools keep value names, so
B is compared where A's boundaries were, whatever its nodes became; a value B
no longer has (fused away, renamed) is reported missing for that module. Per
module call:
  max abs   the largest |A - B| over its boundary outputs
  max rel   per element of a value, |A - B| divided by |A| plus the mean
            |A| of the elements that differ (checks.disagreement, the
            verifier's measure), the largest over its boundary outputs
            (scale-free: 1e-2 is an error of 1 % of each element's size, or
            of the value's typical size for elements near zero; values equal
            on both sides, masks, count as equal and set no scale)
  in rel    the same over the values it reads from outside: what it received
            already differing
  worst     the value of the max rel
Values of another dtype in B (float16, a model's float16 inputs) are cast to
float64 on both sides before comparing; B's inputs are fed A's values cast to
B's input types. The first module above --tolerance (default 1e-4, float32
rounding across kernels stays far below) is the one whose first value above
it comes earliest in A's graph (the innermost of the modules sharing that
value); "largest drift" lists the --top N (default 5) values with the largest
relative error, each at the innermost module making it. Module calls whose
boundary an export pass removed, or containers that never ran, are listed
without values.

Inputs: random, seeded, from A's graph inputs: floats standard normal,
integers and booleans ones (indices and masks stay in range: give
--input input_ids=int64[1,16]:0..1000 for token ids), symbolic dims 1; each
default is said in a note. --input NAME=SPEC (DTYPE[D0,...], with :LOW..HIGH
for integers, or ones[D0,...]) sets one.

Exit status: 0, or 1 when --values found a module call above the tolerance,
2 on bad input (one line)."""

import collections
import json
import sys

import numpy as np
import onnx
import onnx.helper

from hiertag import checks, core
from hiertag.verbs import Verb, fail, first_line, is_tagged, load_model, load_tagged, module_tree, open_tagged

# ---------------------------------------------------------------------------
# Counts


def ops_by_module(model, table):
    """{tag: Counter of op types of the nodes tagged within it} (nested graphs included)."""
    ops = collections.defaultdict(collections.Counter)
    for node in checks.walk_nodes(model.graph):
        tag = checks.node_props(node).get(core.TAG_KEY)
        while tag:
            if tag in table:
                ops[tag][node.op_type] += 1
            tag = checks.parent_tag(tag)
    return ops


def ops_change(before, after):
    """'Gemm -4, MatMulInteger +4': the op types whose count changed, largest change first."""
    changes = {op: after.get(op, 0) - before.get(op, 0) for op in set(before) | set(after)}
    changed = sorted((op for op, change in changes.items() if change), key=lambda op: (-abs(changes[op]), op))
    return ", ".join(f"{op} {changes[op]:+d}" for op in changed)


def module_counts(tree_a, model_a, table_a, path_b, model_b):
    """(rows, notes): per module of A (`tree_a`, its modules as `hiertag tree
    --json` lists them; tree order, then B's own tags), the counts in A and B."""
    ops_a = ops_by_module(model_a, table_a)
    notes = []
    tree_b, ops_b = {}, {}
    if is_tagged(model_b):
        tree_b = {m["tag"]: m for m in module_tree(path_b)}
        ops_b = ops_by_module(model_b, checks.module_table(model_b))
        untagged = sum(1 for node in checks.walk_nodes(model_b.graph) if core.TAG_KEY not in checks.node_props(node))
        if untagged:
            notes.append(f"B: {untagged} nodes carry no tag (added by a tool after the export): "
                         "they and the weights only they read count for no module")
    else:
        notes.append("B carries no module table (a tool dropped hiertag's entries): only A's counts; "
                     "--values compares B at A's module boundaries")
    rows = []
    for module in tree_a:
        other = tree_b.get(module["tag"])
        rows.append({"module": module["tag"], "nodes_a": module["nodes_total"], "bytes_a": module["bytes_total"],
                     "params_a": module["params_total"],
                     "nodes_b": other["nodes_total"] if other else None,
                     "bytes_b": other["bytes_total"] if other else None,
                     "params_b": other["params_total"] if other else None,
                     "ops_change": ops_change(ops_a.get(module["tag"], {}), ops_b.get(module["tag"], {}))
                     if other else ""})
    only_b = [tag for tag in tree_b if tag not in table_a]
    if only_b:
        notes.append(f"B's table has {len(only_b)} modules A's has not: {', '.join(only_b[:5])}"
                     + (", ..." if len(only_b) > 5 else ""))
    return rows, notes


# ---------------------------------------------------------------------------
# Values


def graph_inputs(model):
    initializers = {i.name for i in model.graph.initializer}
    return [i for i in model.graph.input if i.name not in initializers]


def numpy_type(value):
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))


def input_feeds(model, specs):
    """({name: array} for A's graph inputs, notes on the defaults used)."""
    from hiertag import models
    overrides = {}
    for spec in specs:
        try:
            name, tensor = models.parse_input_spec(spec)
        except models.ModelError as error:
            fail(str(error))
        overrides[name] = tensor.numpy()
    inputs = graph_inputs(model)
    unknown = sorted(set(overrides) - {i.name for i in inputs})
    if unknown:
        fail(f"--input {unknown[0]}: A has no such input (its inputs: {', '.join(i.name for i in inputs)})")
    generator = np.random.default_rng(0)
    feeds, notes = {}, []
    for graph_input in inputs:
        dtype = numpy_type(graph_input)
        if graph_input.name in overrides:
            feeds[graph_input.name] = overrides[graph_input.name].astype(dtype)
            continue
        shape = []
        for index, dim in enumerate(graph_input.type.tensor_type.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            else:
                shape.append(1)
                notes.append(f"input '{graph_input.name}': dimension {index} ({dim.dim_param or 'unnamed'}) set to 1")
        if np.issubdtype(dtype, np.floating):
            feeds[graph_input.name] = generator.standard_normal(shape).astype(dtype)
        else:
            feeds[graph_input.name] = np.ones(shape, dtype=dtype)
            notes.append(f"input '{graph_input.name}' ({dtype}) fed ones (--input {graph_input.name}=SPEC for others)")
    return feeds, notes


def feeds_for_b(path_b, model_b, feeds):
    """A's feeds for B's inputs, cast to B's input types."""
    fed = {}
    for graph_input in graph_inputs(model_b):
        if graph_input.name not in feeds:
            fail(f"{path_b}: input '{graph_input.name}' is not an input of A: not one model")
        fed[graph_input.name] = feeds[graph_input.name].astype(numpy_type(graph_input))
    return fed


def values_of(path, model, feeds, names):
    """{name: array} of `names` (graph inputs from the feeds), from ONNX Runtime."""
    computed = [name for name in names if name not in feeds]
    try:
        values = checks.intermediate_values(model, feeds, computed)
    except Exception as error:
        fail(f"{path}: ONNX Runtime cannot run it: {first_line(error)}")
    return {**values, **{name: feeds[name] for name in names if name in feeds}}


def value_error(a, b):
    """(max abs, max rel) of B's value against A's; None when their shapes
    differ. max rel is checks.disagreement of B from A (every comparison of
    values is that one)."""
    if a.shape != b.shape:
        return None
    if a.size == 0:
        return 0.0, 0.0
    wide_a, wide_b = a.astype(np.float64).reshape(-1), b.astype(np.float64).reshape(-1)
    with np.errstate(invalid="ignore"):
        difference = np.abs(wide_a - wide_b)
    # NaN or an infinity in the same place on both sides is no difference; in one only, an infinite one.
    difference[(np.isnan(wide_a) & np.isnan(wide_b)) | (np.isinf(wide_a) & (wide_a == wide_b))] = 0.0
    difference[np.isnan(difference)] = np.inf
    return float(difference.max()), checks.disagreement(b, a)


def compare_values(opened_a, tree_a, model_a, table_a, path_b, model_b, specs, tolerance, top):
    """The values part of the comparison, as a dictionary. `opened_a`: A as
    core.TaggedFile, `tree_a` its modules."""
    path_a = opened_a.path
    feeds, notes = input_feeds(model_a, specs)
    boundaries = checks.module_boundaries(opened_a)
    rewritten = checks.rewritten_boundaries(opened_a, table_a)
    wanted = sorted({name for inputs, outputs in boundaries.values() for name in inputs + outputs})
    in_b = {name for node in model_b.graph.node for name in node.output} | {i.name for i in graph_inputs(model_b)}
    values_a = values_of(path_a, model_a, feeds, wanted)
    values_b = values_of(path_b, model_b, feeds_for_b(path_b, model_b, feeds), [n for n in wanted if n in in_b])
    errors = {}
    for name in wanted:
        if name in values_b:
            errors[name] = value_error(values_a[name], values_b[name])
    position = {name: index for index, node in enumerate(model_a.graph.node) for name in node.output}

    order = [m["tag"] for m in tree_a]
    rows = []
    for tag in order:
        for call in range(checks.call_count(table_a, tag)):
            key = checks.boundary_key(table_a, tag, call)
            inputs, outputs = boundaries[(tag, call)]
            row = {"module": key, "tag": tag, "outputs": len(outputs), "compared": 0, "missing": [],
                   "shape_differs": [], "max_abs": None, "max_rel": None, "in_rel": None, "worst": None,
                   "above": [], "no_boundary": None}
            rows.append(row)
            if key in rewritten:
                row["no_boundary"] = rewritten[key]
                continue
            if table_a[tag].get("ran", True) is False:
                row["no_boundary"] = checks.NEVER_RAN
                continue
            for name in outputs:
                if name not in errors:
                    row["missing"].append(name)
                elif errors[name] is None:
                    row["shape_differs"].append(name)
                else:
                    row["compared"] += 1
                    largest, relative = errors[name]
                    if row["max_rel"] is None or relative > row["max_rel"]:
                        row["max_rel"], row["worst"] = relative, name
                    row["max_abs"] = max(row["max_abs"] or 0.0, largest)
                    if relative > tolerance:
                        row["above"].append(name)
            received = [errors[name][1] for name in inputs if errors.get(name) is not None]
            row["in_rel"] = max(received) if received else None

    def first_position(row):
        return min(position.get(name, -1) for name in row["above"])

    above = [row for row in rows if row["above"]]
    first = min(above, key=lambda row: (first_position(row), -row["tag"].count("/")))["module"] if above else None
    # Each worst value once, at the innermost module making it (a layer's output is its block's too).
    drifting = sorted((row for row in rows if row["max_rel"]), key=lambda row: -row["max_rel"])
    largest = []
    for row in drifting:
        if any(other["worst"] == row["worst"] and other is not row and checks.is_within(other["tag"], row["tag"])
               and other["tag"] != row["tag"] for other in rows):
            continue
        if all(entry["worst"] != row["worst"] for entry in largest):
            largest.append(row)
    return {"tolerance": tolerance,
            "inputs": {name: f"{array.dtype}[{','.join(map(str, array.shape))}]" for name, array in feeds.items()},
            "notes": notes,
            "values_compared": sum(1 for error in errors.values() if error is not None),
            "values_missing": len(wanted) - len(errors),
            "rows": rows, "first_above_tolerance": first,
            "largest_drift": [{"module": row["module"], "max_rel": row["max_rel"], "max_abs": row["max_abs"],
                               "in_rel": row["in_rel"], "value": row["worst"]} for row in largest[:top]]}


# ---------------------------------------------------------------------------
# Printing


def human_bytes(count):
    if count is None:
        return "-"
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def number(value):
    return "-" if value is None else f"{value:.1e}"


def print_counts(result):
    rows = result["modules"]
    width = max(len("module"), *(len(row["module"]) for row in rows))
    print(f"{'module':<{width}}  {'nodes A':>7}  {'nodes B':>7}  {'params A':>10}  {'params B':>10}  ops (B - A)")
    for row in rows:
        nodes_b = "-" if row["nodes_b"] is None else row["nodes_b"]
        print(f"{row['module']:<{width}}  {row['nodes_a']:>7}  {nodes_b:>7}  {human_bytes(row['bytes_a']):>10}  "
              f"{human_bytes(row['bytes_b']):>10}  {row['ops_change']}".rstrip())


def print_values(values):
    print()
    inputs = ", ".join(f"{name} {shape}" for name, shape in values["inputs"].items())
    print(f"values at A's module boundaries, ONNX Runtime (optimizations off), inputs {inputs}: "
          f"{values['values_compared']} compared, {values['values_missing']} missing in B")
    for note in values["notes"]:
        print(f"  note: {note}")
    rows = values["rows"]
    width = max(len("module (#call)"), *(len(row["module"]) for row in rows))
    print(f"  {'module (#call)':<{width}}  {'values':>6}  {'max abs':>8}  {'max rel':>8}  {'in rel':>8}  worst value")
    for row in rows:
        mark = ">" if row["module"] == values["first_above_tolerance"] else "*" if row["above"] else " "
        if row["no_boundary"]:
            print(f"{mark} {row['module']:<{width}}  {'-':>6}  no boundary ({row['no_boundary']})")
            continue
        counted = f"{row['compared']}/{row['outputs']}"
        trailer = row["worst"] or ""
        if row["missing"]:
            trailer += f"{'; ' if trailer else ''}missing in B: {', '.join(row['missing'][:3])}" + \
                ("..." if len(row["missing"]) > 3 else "")
        if row["shape_differs"]:
            trailer += f"{'; ' if trailer else ''}shape differs: {', '.join(row['shape_differs'][:3])}"
        print(f"{mark} {row['module']:<{width}}  {counted:>6}  {number(row['max_abs']):>8}  "
              f"{number(row['max_rel']):>8}  {number(row['in_rel']):>8}  {trailer}".rstrip())
    tolerance = f"{values['tolerance']:.0e}"
    first = values["first_above_tolerance"]
    if first is None:
        print(f"every module call within max rel {tolerance}")
    else:
        row = next(row for row in rows if row["module"] == first)
        print(f"> first module above max rel {tolerance}: {first} ({number(row['max_rel'])} on '{row['worst']}'); "
              f"* {sum(1 for row in rows if row['above'])} module calls above it")
    if values["largest_drift"]:
        print("largest drift (each value at the innermost module making it):")
        for rank, entry in enumerate(values["largest_drift"], 1):
            print(f"  {rank}. {entry['module']}  max rel {number(entry['max_rel'])} (in {number(entry['in_rel'])})"
                  f"  '{entry['value']}'")


def run(options):
    if options.tolerance <= 0:
        fail(f"--tolerance must be above 0, not {options.tolerance}")
    if options.top < 1:
        fail(f"--top must be 1 or more, not {options.top}")
    model_a, table_a = load_tagged(options.a)
    opened_a = open_tagged(options.a)
    tree_a = module_tree(opened_a)
    model_b = load_model(options.b)
    rows, notes = module_counts(tree_a, model_a, table_a, options.b, model_b)
    values = None
    if options.values:
        import onnxruntime  # only here: a count of modules runs no model
        onnxruntime.set_default_logger_severity(3)
        values = compare_values(opened_a, tree_a, model_a, table_a, options.b, model_b, options.input,
                                options.tolerance, options.top)
    nodes_b = len(list(checks.walk_nodes(model_b.graph)))
    result = {"a": {"file": options.a, "nodes": len(list(checks.walk_nodes(model_a.graph))), "modules": len(table_a)},
              "b": {"file": options.b, "nodes": nodes_b, "tagged": is_tagged(model_b)},
              "modules": rows, "notes": notes, "values": values}
    status = 1 if values and values["first_above_tolerance"] else 0
    if options.json:
        print(json.dumps(result))
        return status
    print(f"A {options.a}: {result['a']['nodes']} nodes, {len(table_a)} modules;  B {options.b}: {nodes_b} nodes")
    for note in notes:
        print(f"note: {note}")
    print_counts(result)
    if values:
        print_values(values)
    return status


def arguments(parser):
    parser.add_argument("a", metavar="A.onnx", help="the reference, tagged by hiertag")
    parser.add_argument("b", metavar="B.onnx", help="another file of the same model (tagged or not)")
    parser.add_argument("--values", action="store_true",
                        help="run both and compare the values at A's module boundaries")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SPEC",
                        help="an input's value: int64[1,16]:0..1000, float32[1,3,224,224], ones[1,16] (repeatable)")
    parser.add_argument("--tolerance", type=float, default=1e-4, metavar="T",
                        help="max relative error a module's boundary values may have (default 1e-4)")
    parser.add_argument("--top", type=int, default=5, metavar="N", help="how many of the largest drifts to list")
    parser.add_argument("--json", action="store_true", help="print the comparison as one JSON object")


VERB = Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
