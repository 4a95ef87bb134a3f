"""The carry matrix: the bundled BERT, GPT-2, T5, LLaMA, ViT and ResNet, each
exported with hiertag, run through the tools that usually come next, and
tagged again with `hiertag carry`.

Per model and tool: the transformed model's nodes and how many still carried
a tag (what the tool left); after carry, how many nodes were placed exactly
(one module), shared, as spans and by rule, and how many were unplaced;
`hiertag validate` and `hiertag tree` on the carried file; for the tools that
keep values (ONNX Runtime's optimizers, onnxsim, onnxslim, the version
converter) the module-boundary check of hiertag.checks on the carried file,
for every module call except those the file says have no boundary (a fusion
crosses them, their boundary values exist only under new names, or an export
pass removed it), and `hiertag extract` on every call: refused, naming the
fusion, where the file says so; written otherwise.

usage: .venv/bin/python scripts/carry_matrix.py [--models a,b] [--tools x,y] [--out DIR]
Writes DIR/carry.md and DIR/carry.json (default DIR: bench/results); exits 0
only when every cell passes (100 % tagged, valid, every checked boundary and
extraction as the file says)."""

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["bert", "gpt2", "t5", "llama", "vit", "resnet"]

# optimize_model wants the architecture's name, heads and width; it has no
# LLaMA or ResNet type, so those two get its generic ("bert") fusions.
OPTIMIZER_ARGS = {"bert": ("bert", 2, 128), "gpt2": ("gpt2", 2, 64), "t5": ("t5", 4, 64),
                  "llama": ("bert", 4, 64), "vit": ("vit", 2, 64), "resnet": ("bert", 0, 0)}


def ort_optimized(level_name):
    def run(source, target, model):
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level_name)
        options.optimized_model_filepath = str(target)
        options.log_severity_level = 3
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return run


def transformers_optimizer(source, target, model):
    from onnxruntime.transformers.optimizer import optimize_model
    model_type, heads, hidden = OPTIMIZER_ARGS[model]
    optimize_model(str(source), model_type=model_type, num_heads=heads, hidden_size=hidden).save_model_to_file(
        str(target))


def quantized(source, target, model):
    from onnxruntime.quantization import quantize_dynamic
    quantize_dynamic(str(source), str(target))


def float16(source, target, model):
    import onnx
    from onnxconverter_common import float16 as converter
    onnx.save(converter.convert_float_to_float16(onnx.load(str(source))), str(target))


def simplified(source, target, model):
    import onnx
    import onnxsim
    simple, _ = onnxsim.simplify(onnx.load(str(source)))
    onnx.save(simple, str(target))


def slimmed(source, target, model):
    import onnx
    import onnxslim
    onnx.save(onnxslim.slim(onnx.load(str(source))), str(target))


def opset18(source, target, model):
    import onnx
    from onnx import version_converter
    onnx.save(version_converter.convert_version(onnx.load(str(source)), 18), str(target))


# name -> (what the README calls it, the call, whether values keep their form)
TOOLS = {
    "ort-basic": ("ONNX Runtime `optimized_model_filepath`, basic", ort_optimized("ORT_ENABLE_BASIC"), True),
    "ort-all": ("ONNX Runtime `optimized_model_filepath`, all", ort_optimized("ORT_ENABLE_ALL"), True),
    "transformers": ("`onnxruntime.transformers.optimizer.optimize_model`", transformers_optimizer, True),
    "quantize": ("`quantize_dynamic`", quantized, False),
    "fp16": ("`onnxconverter_common.float16.convert_float_to_float16`", float16, False),
    "onnxsim": ("`onnxsim.simplify`", simplified, True),
    "onnxslim": ("`onnxslim.slim`", slimmed, True),
    "opset18": ("`onnx.version_converter.convert_version(m, 18)`", opset18, True),
}


def export_tagged(name, path):
    import torch
    import hiertag
    from hiertag import OPSET, zoo
    model, args = zoo.ALL[name]()
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)


def run_tool(tool, *arguments):
    from hiertag import native
    return native.run_tool([tool, *arguments], capture_output=True, text=True)


def boundary_check(carried, name, pass_name, original_bytes):
    """(checked, passed, failures, {why excluded: count}) of the module-boundary check."""
    from hiertag import checks, zoo
    torch_model, args = zoo.ALL[name]()
    feeds = checks.feeds_for(original_bytes, torch_model, args)
    feeds = {i.name: feeds[i.name] for i in carried.graph.input if i.name in feeds}
    results, skipped = checks.module_boundary_results(carried, torch_model, args, feeds)
    excluded = {"fused": 0, "renamed": 0, "export pass": 0, "never ran": 0}
    for reason in skipped.values():
        if reason == checks.NEVER_RAN:
            excluded["never ran"] += 1
        elif reason.startswith(pass_name):
            excluded["renamed" if reason.endswith("rewired") else "fused"] += 1
        else:
            excluded["export pass"] += 1
    failures = [failure for found in results.values() for failure in found]
    return len(results), sum(not found for found in results.values()), failures, excluded


def extraction_check(path, carried, pass_name):
    """(calls extract handled as the file says, calls tried, problems): refused
    naming the transformation where the file records that a fusion or a
    renamed value removed the call's boundary, written for every other call
    with nodes."""
    from hiertag import checks
    table = checks.module_table(carried)
    rewritten = checks.rewritten_boundaries(carried)
    boundaries = checks.module_boundaries(carried)
    members = {key for key, (inputs, outputs) in boundaries.items() if inputs or outputs}
    right, tried, problems = 0, 0, []
    with tempfile.TemporaryDirectory() as directory:
        for tag in table:
            for call in range(checks.call_count(table, tag)):
                key = checks.boundary_key(table, tag, call)
                reason = rewritten.get(key)
                if reason is None and (tag, call) not in members:
                    continue
                arguments = [path, "--module", tag, "-o", Path(directory) / "module.onnx"]
                if key != tag:
                    arguments += ["--call", call]
                done = run_tool("extract", *arguments)
                tried += 1
                expected_refusal = reason is not None and reason.startswith(pass_name)
                if reason is not None and not expected_refusal:
                    right += done.returncode == 2  # an export pass's own record: refused as before
                elif expected_refusal:
                    ok = done.returncode == 2 and pass_name in done.stderr
                    right += ok
                    if not ok:
                        problems.append(f"{key}: not refused ({done.stderr.strip() or 'written'})")
                else:
                    right += done.returncode == 0
                    if done.returncode:
                        problems.append(f"{key}: {done.stderr.strip()}")
    return right, tried, problems


def cell(name, tool, source, directory):
    import onnx
    from hiertag import carry, checks
    from hiertag.hf_export import quiet
    description, transform, keeps_values = TOOLS[tool]
    started = time.perf_counter()
    target = Path(directory) / f"{name}.{tool}.onnx"
    with quiet():
        transform(source, target, name)
    transformed = onnx.load(str(target))
    nodes = list(checks.walk_nodes(transformed.graph))
    left = sum(checks.TAG_KEY in checks.node_props(node) for node in nodes)
    original = onnx.load(str(source))
    with quiet():
        carried, summary = carry.carry(original, transformed, tool)
    out = Path(directory) / f"{name}.{tool}.carried.onnx"
    onnx.save(carried, str(out))
    validate = run_tool("validate", out)
    tree = run_tool("tree", out, "--depth", "1")
    result = {
        "model": name, "tool": tool, "nodes": len(nodes), "tagged_by_tool": left,
        **{key: summary[key] for key in ("exact", "shared", "span", "rule", "rules", "unplaced")},
        "tagged_after": sum(checks.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(carried.graph)),
        "validate": validate.returncode == 0, "validate_line": validate.stdout.strip().splitlines()[-1:],
        "tree": tree.returncode == 0 and tree.stdout.startswith(next(iter(checks.module_table(carried)))
                                                               .rsplit("/", 1)[-1]),
        "keeps_values": keeps_values,
    }
    pass_name = f"carry: {tool}"
    if keeps_values:
        with quiet():
            checked, passed, failures, excluded = boundary_check(carried, name, pass_name, source.read_bytes())
        right, tried, problems = extraction_check(out, carried, pass_name)
        result.update({"boundary_checked": checked, "boundary_passed": passed, "boundary_failures": failures,
                       "excluded": excluded, "extract_right": right, "extract_tried": tried,
                       "extract_problems": problems})
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["passed"] = (result["tagged_after"] == result["nodes"] and result["validate"] and result["tree"]
                        and not summary["unplaced"]
                        and (not keeps_values or (result["boundary_passed"] == result["boundary_checked"]
                                                  and result["extract_right"] == result["extract_tried"])))
    return result


def versions():
    found = {"python": platform.python_version()}
    for package in ("torch", "transformers", "onnx", "onnxruntime", "onnxsim", "onnxslim", "onnxconverter-common"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


def commit():
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT)
    return done.stdout.strip() or "unknown"


def percent(part, whole):
    return f"{100 * part / whole:.0f} %" if whole else "-"


def render(report):
    cells = report["cells"]
    lines = ["# hiertag carry: tags after the tools that come next", "",
             f"Command: `.venv/bin/python scripts/carry_matrix.py{report['arguments']}` ({report['date']}, commit "
             f"{report['commit']}, " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ").", "",
             f"**{sum(c['passed'] for c in cells)} of {len(cells)} cells pass**: every node tagged after carry "
             f"(exact, shared, span or rule, none unplaced), `hiertag validate` and `hiertag tree` accept the file, "
             f"and for the tools that keep values every checked module call passes the boundary check and "
             f"`extract` does what the file says.", "",
             "## Share of nodes tagged, before and after carry", "",
             "| tool | " + " | ".join(report["models"]) + " |",
             "|---|" + "---|" * len(report["models"])]
    by_cell = {(c["model"], c["tool"]): c for c in cells}
    for tool in report["tools"]:
        row = [TOOLS[tool][0]]
        for name in report["models"]:
            c = by_cell.get((name, tool))
            row.append("-" if c is None else "error" if "error" in c else
                       f"{percent(c['tagged_by_tool'], c['nodes'])} → {percent(c['tagged_after'], c['nodes'])}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Every cell", "",
              "Columns: *nodes* of the transformed model; *by tool* nodes that still carried a tag; *exact* "
              "placed in one module call; *shared* kept for several calls (hiertag.shared_with); *span* a fused "
              "node across calls (common ancestor, hiertag.spans); *rule* a node standing for no original node "
              "(conversion, weights, enclosing, neighbours); *boundary* calls passing / checked, then the calls "
              "the file says have no boundary: crossed by a fusion carry recorded, boundary values renamed into "
              "another form, an export pass's own record, containers that never ran; *extract* calls `hiertag "
              "extract` handled as the file says / tried.", "",
              "| model | tool | nodes | by tool | exact | shared | span | rule | validate | tree | boundary | "
              "no boundary (fused, renamed, export, never ran) | extract | s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if "error" in c:
            lines.append(f"| {c['model']} | {c['tool']} | error: {c['error']} |" + " |" * 11)
            continue
        rules = ", ".join(f"{k} {v}" for k, v in c["rules"].items() if v)
        boundary = f"{c['boundary_passed']}/{c['boundary_checked']}" if c["keeps_values"] else "values changed"
        excluded = ", ".join(str(v) for v in c["excluded"].values()) if c["keeps_values"] else "-"
        extract = f"{c['extract_right']}/{c['extract_tried']}" if c["keeps_values"] else "-"
        lines.append(f"| {c['model']} | {c['tool']} | {c['nodes']} | {c['tagged_by_tool']} | {c['exact']} | "
                     f"{c['shared']} | {c['span']} | {c['rule']}{f' ({rules})' if rules else ''} | "
                     f"{'ok' if c['validate'] else 'FAIL'} | {'ok' if c['tree'] else 'FAIL'} | {boundary} | "
                     f"{excluded} | {extract} | {c['seconds']} |")
    problems = [(c, line) for c in cells for line in c.get("boundary_failures", []) + c.get("extract_problems", [])]
    if problems or any(c.get("error") for c in cells):
        lines += ["", "## Problems", ""]
        lines += [f"- {c['model']} / {c['tool']}: {line}" for c, line in problems]
        lines += [f"- {c['model']} / {c['tool']}: {c['error']}" for c in cells if c.get("error")]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="carry_matrix.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="bundled models (default: all six)")
    parser.add_argument("--tools", default=",".join(TOOLS), help="tools (default: all eight)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where carry.md and carry.json go")
    options = parser.parse_args(argv)
    models = options.models.split(",")
    tools = options.tools.split(",")
    unknown = [m for m in models if m not in MODELS] + [t for t in tools if t not in TOOLS]
    if unknown:
        print(f"carry_matrix.py: unknown model or tool: {', '.join(unknown)} "
              f"(models {', '.join(MODELS)}; tools {', '.join(TOOLS)})", file=sys.stderr)
        return 2
    import onnxruntime
    import torch
    import hiertag
    warnings.simplefilter("ignore")
    onnxruntime.set_default_logger_severity(3)
    torch.ops.load_library(hiertag.library_path())
    arguments = "".join(f" --{k} {v}" for k, v in (("models", options.models), ("tools", options.tools))
                        if v != parser.get_default(k))
    report = {"arguments": arguments, "date": time.strftime("%Y-%m-%d"), "commit": commit(),
              "versions": versions(), "models": models, "tools": tools, "cells": []}
    with tempfile.TemporaryDirectory() as directory:
        for name in models:
            source = Path(directory) / f"{name}.onnx"
            from hiertag.hf_export import quiet
            with quiet():
                export_tagged(name, source)
            for tool in tools:
                try:
                    result = cell(name, tool, source, directory)
                except Exception as error:  # a tool that fails on a model is a result of the matrix
                    result = {"model": name, "tool": tool, "passed": False,
                              "error": f"{type(error).__name__}: {str(error).strip()[:300]}"}
                report["cells"].append(result)
                print(f"{name:7s} {tool:13s} {'ok' if result['passed'] else 'FAIL'}", flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "carry.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "carry.md").write_text(render(report))
    return 0 if all(c["passed"] for c in report["cells"]) else 1


if __name__ == "__main__":
    sys.exit(main())
