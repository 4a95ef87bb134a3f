"""hiertag report: a Markdown report of a tagged file.

Sections:
  Summary        file, producer, opsets, format version, nodes (nested graphs
                 included), tagged nodes, modules, inputs and outputs, and
                 whether `hiertag validate` accepts the file
  Tagging        what the file records of how its nodes were tagged: nodes
                 kept for several module calls (hiertag.shared_with), nodes an
                 export pass fused across calls (hiertag.spans), nodes of
                 repeated calls (hiertag.call), nodes in If/Loop bodies,
                 modules folded into constants, containers that never ran.
                 How many nodes each tagging rule (scope, parameter-owner,
                 enclosing, consumers, neighbours, root) tagged is printed at
                 export time by HIERTAG_REPORT=1 and is not stored in the file,
                 so the report cannot give it
  Module tree    one row per module, in the order they run (`hiertag tree`):
                 tag, class, path, nodes own / total, parameters, calls, notes
  Rewrites       the export passes' rewrites across module boundaries, and the
                 module calls left without a boundary of their own (`extract`
                 refuses them, naming the pass)
  Shared nodes   every node listing hiertag.shared_with
  Verifier       with --verify-json FILE (the output of `hiertag verify
                 --json`): its rows, one per module call, and its failures;
                 refused unless they are MODEL's (its node count, and one row
                 for each of its module calls)

Writes REPORT.md (beside it first, then renamed; never over MODEL or FILE) or
prints to stdout; --json prints the facts behind the report as one JSON object
instead."""

import json
import sys
from pathlib import Path

import onnx

from hiertag import checks, core
from hiertag.verbs import Verb, fail, load_tagged, module_tree, open_tagged, refuse_overwriting, write_atomically

ELEMENT_TYPES = {value: name.lower() for name, value in onnx.TensorProto.DataType.items()}


def value_signature(value):
    """'name dtype[d0,d1]' of a graph input or output."""
    tensor = value.type.tensor_type
    dims = ",".join(d.dim_param or str(d.dim_value) if (d.dim_param or d.HasField("dim_value")) else "?"
                    for d in tensor.shape.dim)
    return f"{value.name} {ELEMENT_TYPES.get(tensor.elem_type, '?')}[{dims}]"


def facts(path, verify_json=None):
    """Everything the report says, as one dictionary."""
    model, table = load_tagged(path)
    nodes = list(checks.walk_nodes(model.graph))
    nested = len(nodes) - len(model.graph.node)  # walk_nodes includes If/Loop bodies
    props = [checks.node_props(node) for node in nodes]
    opened = open_tagged(path)
    tree = module_tree(opened)
    validation = opened.validate()
    initializers = {i.name for i in model.graph.initializer}
    shared = [{"node": node.name, "op_type": node.op_type, "tag": p[core.TAG_KEY],
               "shared_with": json.loads(p[core.SHARED_KEY])}
              for node, p in zip(nodes, props, strict=True) if core.SHARED_KEY in p]
    rewritten = checks.rewritten_boundaries(opened, table)
    verify = None
    if verify_json is not None:
        try:
            verify = json.loads(Path(verify_json).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            fail(f"{verify_json}: not the JSON of `hiertag verify --json` ({error})")
        if not isinstance(verify, dict) or not isinstance(verify.get("rows"), list):
            fail(f"{verify_json}: not the JSON of `hiertag verify --json` (no \"rows\" list)")
        check_describes(verify, verify_json, path, len(nodes), table)
    return {
        "file": str(path),
        "bytes": Path(path).stat().st_size,
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "format_version": checks.model_props(model).get(core.FORMAT_VERSION_KEY, "?"),
        "nodes": len(nodes),
        "nested_nodes": nested,
        "tagged_nodes": sum(1 for p in props if core.TAG_KEY in p),
        "valid": validation.get("valid", False),
        "problems": [f"node '{p.get('node', '')}' ({p.get('op_type', '')}): {p.get('problem', '')}"
                     if isinstance(p, dict) else str(p) for p in validation.get("problems", [])],
        "inputs": [value_signature(i) for i in model.graph.input if i.name not in initializers],
        "outputs": [value_signature(o) for o in model.graph.output],
        "modules": tree,
        "tagging": {
            "shared_nodes": len(shared),
            "fused_nodes": sum(1 for p in props if core.SPANS_KEY in p),
            "call_numbered_nodes": sum(1 for p in props if core.CALL_KEY in p),
            "nested_nodes": nested,
            "modules_without_nodes": sum(1 for m in tree if m["nodes_total"] == 0),
            "folded_modules": sum(1 for m in tree if m["folded_into"]),
            "never_ran": sum(1 for m in tree if not m["ran"]),
            "repeated_modules": sum(1 for m in tree if m["calls"] > 1),
        },
        # A fused node is in hiertag.rewrites and has hiertag.spans: one rewrite (the core counts it once).
        "rewrites": core.rewrite_records(opened),
        "without_boundary": [{"call": key, "reason": reason} for key, reason in rewritten.items()],
        "shared": shared,
        "verify": verify,
    }


def check_describes(verify, verify_json, path, node_count, table):
    """Fails unless the verifier's results are this model's: its node count,
    and one row for every module call of the file and no other."""
    rows = verify["rows"]
    if not all(isinstance(row, dict) and isinstance(row.get("call"), str) for row in rows):
        fail(f"{verify_json}: not the JSON of `hiertag verify --json` (a row without its \"call\")")
    calls = {checks.boundary_key(table, tag, call) for tag in table for call in range(checks.call_count(table, tag))}
    checked = [row["call"] for row in rows]
    foreign = [call for call in checked if call not in calls]
    missing = sorted(calls - set(checked))
    if verify.get("nodes") == node_count and not foreign and not missing and len(checked) == len(calls):
        return
    why = (f"it checks module call '{foreign[0]}', which {path} does not have" if foreign
           else f"it does not check module call '{missing[0]}' of {path}" if missing
           else f"it names {verify.get('nodes')} nodes, {path} has {node_count}" if verify.get("nodes") != node_count
           else "it checks a module call twice")
    fail(f"{verify_json}: the verifier's results of {verify.get('model', 'another model')} are not {path}'s: {why}")


def cell(text):
    """A Markdown table cell: pipes escaped, line breaks flattened."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def code(text):
    return f"`{text}`" if text else ""


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def human_bytes(count):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.1f} {unit}"
    return f"{count} B"


def module_notes(module):
    notes = []
    if not module["ran"]:
        notes.append("never ran (its caller reached past it)")
    if module["folded_into"]:
        notes.append("folded into " + ", ".join(module["folded_into"]))
    for rewrite in module["rewrites"]:
        notes.append(f"{rewrite['kind']} with {', '.join(rewrite['with'])} by {rewrite['pass']}")
    return "; ".join(notes)


def markdown(f):
    name = Path(f["file"]).name
    t = f["tagging"]
    out = [f"# hiertag report: {name}", "", "## Summary", ""]
    out.append(table(["", ""], [
        ["file", f"{f['file']} ({human_bytes(f['bytes'])})"],
        ["producer", f["producer"]],
        ["opsets", ", ".join(f"{domain} {version}" for domain, version in f["opsets"].items())],
        ["hiertag format", f["format_version"]],
        ["nodes", f"{f['nodes']:,} ({f['nested_nodes']:,} of them in If/Loop bodies)"],
        ["tagged nodes", f"{f['tagged_nodes']:,} of {f['nodes']:,}"],
        ["modules", f"{len(f['modules']):,} in the module table"],
        ["inputs", "; ".join(f["inputs"])],
        ["outputs", "; ".join(f["outputs"])],
        ["hiertag validate", "valid" if f["valid"] else f"{len(f['problems'])} problems"],
    ]))
    if f["problems"]:
        out += ["", "Problems `hiertag validate` reports (first 20):", ""]
        out += [f"- {problem}" for problem in f["problems"][:20]]
    out += ["", "## Tagging", "",
            "How many nodes each tagging rule tagged (scope, parameter-owner, enclosing, consumers, neighbours, "
            "root) is printed at export time with `HIERTAG_REPORT=1` and not stored in the file. The file records:",
            ""]
    out.append(table(["what the file records", "count"], [
        ["nodes kept for several module calls (`hiertag.shared_with`: CSE, tracer aliases)", t["shared_nodes"]],
        ["nodes an export pass fused across module calls (`hiertag.spans`)", t["fused_nodes"]],
        ["nodes of a module called more than once (`hiertag.call`)", t["call_numbered_nodes"]],
        ["nodes in If/Loop bodies", t["nested_nodes"]],
        ["modules called more than once", t["repeated_modules"]],
        ["modules that ran and left no node", t["modules_without_nodes"]],
        ["... of them folded into constants (`folded_into`)", t["folded_modules"]],
        ["containers whose forward never ran", t["never_ran"]],
        ["rewrites across module boundaries (`hiertag.rewrites`, spans)", len(f["rewrites"])],
    ]))
    out += ["", "## Module tree", "", "Modules in the order they run; nodes and parameters with descendants' "
            "(an initializer counts for the common ancestor of the modules reading it).", ""]
    out.append(table(["module", "class", "path", "nodes own", "nodes total", "params", "bytes", "calls", "notes"], [
        ["&nbsp;&nbsp;" * m["depth"] + code(m["tag"]), m["class"], m["path"] or "(root)", f"{m['nodes_own']:,}",
         f"{m['nodes_total']:,}", f"{m['params_total']:,}", human_bytes(m["bytes_total"]), m["calls"],
         module_notes(m)] for m in f["modules"]]))
    out += ["", "## Rewrites across module boundaries", ""]
    if f["rewrites"]:
        out.append(table(["pass", "kind", "module calls", "node"], [
            [r.get("pass", ""), r.get("kind", ""), ", ".join(r.get("modules", [])), code(r.get("node", ""))]
            for r in f["rewrites"]]))
        out += ["", "Module calls left without a boundary of their own (`hiertag extract` refuses them):", ""]
        out.append(table(["module call", "why"], [[code(w["call"]), w["reason"]] for w in f["without_boundary"]]))
    else:
        out.append("None: every module call keeps its boundary.")
    out += ["", "## Shared nodes", ""]
    if f["shared"]:
        out.append(table(["node", "op", "tag", "also the computation of"], [
            [code(s["node"]), s["op_type"], code(s["tag"]), ", ".join(s["shared_with"])] for s in f["shared"]]))
    else:
        out.append("None: every node is the computation of its own module call only.")
    if f["verify"] is not None:
        v = f["verify"]
        rows = v["rows"]
        passed = sum(1 for r in rows if r.get("passed"))
        out += ["", "## Verifier", "",
                f"`hiertag verify {v.get('model', '')}`: {passed} of {len(rows)} module calls pass "
                f"(extraction reproduces the full model's values; the boundary equals the tensors the call "
                f"received and returned in PyTorch).", ""]
        out.append(table(["module call", "nodes", "extract", "boundary", "passed"], [
            [code(r.get("call", "")), r.get("nodes", ""), r.get("extract", ""), r.get("boundary", ""),
             "yes" if r.get("passed") else "**no**"] for r in rows]))
        if v.get("boundary_failures"):
            out += ["", "Boundary failures:", ""] + [f"- {failure}" for failure in v["boundary_failures"]]
    return "\n".join(out) + "\n"


def run(options):
    refuse_overwriting([options.output], inputs=[options.verify_json], models=[options.model])
    found = facts(options.model, options.verify_json)
    if options.json:
        print(json.dumps(found))
        return 0
    text = markdown(found)
    if options.output is None:
        sys.stdout.write(text)
        return 0

    def write(staged):
        Path(staged).write_text(text, encoding="utf-8")

    write_atomically(options.output, write)
    print(f"{options.output}: report of {options.model} ({found['nodes']} nodes, {len(found['modules'])} modules)")
    return 0


def arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="a file tagged by hiertag")
    parser.add_argument("-o", "--output", metavar="REPORT.md", help="where to write the report (default: stdout)")
    parser.add_argument("--verify-json", metavar="FILE", help="the output of `hiertag verify --json` for this model")
    parser.add_argument("--json", action="store_true", help="print the report's facts as one JSON object")


VERB = Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
