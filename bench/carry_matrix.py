"""The carry matrix: models exported with hiertag, run through the tools that
usually come next, tagged again with `hiertag carry`, and every module call of
the carried file held against eager PyTorch.

Models: the bundled BERT, GPT-2, T5, LLaMA, ViT and ResNet, a MobileNetV3-Small
in torchvision's layout and a GPT-style decoder with a written-out LayerNorm
(python/hiertag/zoo/corner_cases.py), and architectures of the sweep
(python/hiertag/zoo/sweep_models.py), all with trained-like weights (seeded
noise on every parameter, BatchNorm statistics: corner_cases.trained_like),
so no tool can drop a node only random initialization made a no-op. Tools:
ONNX Runtime's saved optimized model at basic, extended and all, its
transformers optimizer, onnxsim, onnxslim, quantize_dynamic, fp16 conversion
and the version converter to opset 18.

Per cell: the nodes the tool left tagged and how carry placed every node;
`hiertag validate` and `hiertag tree` on the carried file; every module call
as carry reports it (verified, declared by the tool, declared by carry,
declared at export, never ran, left no node); and, independently of carry's
own check (which compares the carried file with the tagged original), the
project's boundary check (hiertag.checks) of the carried file against eager
PyTorch: for a tool that keeps values, each call carry did not declare must
consume what it received and produce what it returned, within float32
rounding; for one that changes precision (fp16, int8), whose values no fixed
bound holds, each value crossing the call's carried boundary must be nearest,
among all values of the tagged original on the same eager inputs, to a value
that crossed the same call's boundary there, and the original's boundaries
are themselves held against eager PyTorch within float32 rounding. A call
that fails is *wrong*: carry presented a boundary that is not the call's; one
whose value is nearly as near a boundary value as the nearest is *undecided*
(identification_check), listed but not failed.
`hiertag extract` on every call: refused, naming the transformation or the
export pass, where the file declares the call; written otherwise, and run on
the tensors the call received in eager PyTorch, returning the ones it returned
(within float32 rounding, or half their magnitude for a precision-changing
tool).

Each model runs in a fresh process (torch names a scripted class's nodes
differently after its first export in a process).

usage: .venv/bin/python bench/carry_matrix.py [--models a,b] [--tools x,y] [--out DIR]
Writes DIR/carry.md and DIR/carry.json (default DIR: bench/results); exits 0
only when every cell passes: every node tagged, validate and tree accept the
file, no call wrong, extract as the file says."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import provenance  # bench/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]

BUNDLED = ["bert", "gpt2", "t5", "llama", "vit", "resnet"]
CORNER_CASES = ["mobilenet_v3_style", "gpt_style"]


def _sweep():
    """Every architecture of the sweep (python/hiertag/zoo/sweep_models.py), in its order."""
    sys.path.insert(0, str(ROOT / "python"))
    from hiertag.zoo import sweep_models
    return [name for name in sweep_models.MODELS if name not in BUNDLED]


SWEEP = _sweep()
MODELS = BUNDLED + CORNER_CASES + SWEEP

# optimize_model's model type per family, with the heads and width where it
# wants them (0, 0: it finds them in the graph). Decoder LMs get its generic
# ("bert") fusions: its "gpt2" attention patterns make files ONNX Runtime
# refuses for OPT, BLOOM and Phi.
OPTIMIZER_TYPES = {"bert": ("bert", 2, 128), "gpt2": ("gpt2", 2, 64), "t5": ("t5", 4, 64), "llama": ("bert", 4, 64),
                   "vit": ("vit", 2, 64), "gpt_style": ("gpt2", 4, 32), "swin": ("swin", 0, 0),
                   "text encoder": ("bert", 0, 0), "decoder LM": ("bert", 0, 0), "encoder-decoder": ("bart", 0, 0),
                   "vision transformer": ("vit", 0, 0)}


def family(name):
    from hiertag.zoo import sweep_models
    return sweep_models.MODELS[name][0] if name in sweep_models.MODELS else "bundled"


def build(name):
    """(model, args) with trained-like weights, built afresh (models cache state across calls)."""
    from hiertag import zoo
    from hiertag.zoo import corner_cases, sweep_models
    model, args = zoo.ALL[name]() if name in zoo.ALL else sweep_models.MODELS[name][1]()
    return corner_cases.trained_like(model.eval(), seed=1), args


def ort_optimized(level_name):
    def run(source, target, name):
        import onnxruntime
        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level_name)
        options.optimized_model_filepath = str(target)
        options.log_severity_level = 3
        onnxruntime.InferenceSession(str(source), options, providers=["CPUExecutionProvider"])
    return run


def transformers_optimizer(source, target, name):
    from onnxruntime.transformers.optimizer import optimize_model
    model_type, heads, hidden = OPTIMIZER_TYPES.get(name) or OPTIMIZER_TYPES.get(family(name), ("bert", 0, 0))
    optimize_model(str(source), model_type=model_type, num_heads=heads, hidden_size=hidden).save_model_to_file(
        str(target))


def quantized(source, target, name):
    from onnxruntime.quantization import quantize_dynamic
    quantize_dynamic(str(source), str(target))


def float16(source, target, name):
    """convert_float_to_float16, with the one repair its files need to load:
    it leaves a Cast to float32 (torch's `.float()` in a norm) casting to
    float32 while it types the Cast's result and its readers float16, a file
    ONNX Runtime refuses; those Casts cast to float16, as the conversion means."""
    import onnx
    from onnxconverter_common import float16 as converter
    model = converter.convert_float_to_float16(onnx.load(str(source)))
    halves = {info.name for info in model.graph.value_info
              if info.type.tensor_type.elem_type == onnx.TensorProto.FLOAT16}
    for node in model.graph.node:
        if node.op_type == "Cast" and node.output[0] in halves:
            for attribute in node.attribute:
                if attribute.name == "to" and attribute.i == onnx.TensorProto.FLOAT:
                    attribute.i = onnx.TensorProto.FLOAT16
    onnx.save(model, str(target))


def simplified(source, target, name):
    import onnx
    import onnxsim
    simple, _ = onnxsim.simplify(onnx.load(str(source)))
    onnx.save(simple, str(target))


def slimmed(source, target, name):
    import onnx
    import onnxslim
    onnx.save(onnxslim.slim(onnx.load(str(source))), str(target))


def opset18(source, target, name):
    import onnx
    from onnx import version_converter
    onnx.save(version_converter.convert_version(onnx.load(str(source)), 18), str(target))


# name -> (what the README calls it, the call)
TOOLS = {
    "ort-basic": ("ONNX Runtime `optimized_model_filepath`, basic", ort_optimized("ORT_ENABLE_BASIC")),
    "ort-extended": ("ONNX Runtime `optimized_model_filepath`, extended", ort_optimized("ORT_ENABLE_EXTENDED")),
    "ort-all": ("ONNX Runtime `optimized_model_filepath`, all", ort_optimized("ORT_ENABLE_ALL")),
    "transformers": ("`onnxruntime.transformers.optimizer.optimize_model`", transformers_optimizer),
    "onnxsim": ("`onnxsim.simplify`", simplified),
    "onnxslim": ("`onnxslim.slim`", slimmed),
    "quantize": ("`quantize_dynamic`", quantized),
    "fp16": ("`onnxconverter_common.float16.convert_float_to_float16`", float16),
    "opset18": ("`onnx.version_converter.convert_version(m, 18)`", opset18),
}


def export_tagged(name, path):
    import torch
    import hiertag
    from hiertag import OPSET
    model, args = build(name)
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)


def run_tool(tool, *arguments):
    from hiertag import native
    return native.run_tool([tool, *arguments], capture_output=True, text=True)


class Eager:
    """What every module call of a model received and returned in eager
    PyTorch (recorded once), and the model's inputs as ONNX Runtime feeds."""

    def __init__(self, name, source):
        import onnx
        from hiertag import checks
        torch_model, self.args = build(name)
        self.model = checks.eager_reference(torch_model)
        self.feeds = checks.feeds_for(str(source), torch_model, self.args)
        self.recorded = checks.record_module_io(self.model, self.args)
        # The tagged export's own boundaries, which the identification check of precision-changing tools rests on.
        results, _ = checks.module_boundary_results(onnx.load(str(source)), self.model, self.args, self.feeds,
                                                    recorded=self.recorded)
        self.export_failures = [line for lines in results.values() for line in lines]

    def feeds_for(self, model):
        """The feeds cast to `model`'s input types (an fp16 copy takes float16)."""
        import onnx
        types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input}
        return {name: value.astype(types[name]) for name, value in self.feeds.items() if name in types}


# A boundary value at most this many times as far as the nearest value of the
# original: too close to tell apart by values (identification_check).
UNDECIDED_RATIO = 1.5


def identification_check(original, carried, eager, statuses):
    """{key: failures} for a precision-changing tool, whose values no fixed
    bound holds against eager PyTorch: on the eager inputs, each value
    crossing a call's carried boundary must be nearest (ties included) to a
    value crossing the same call's original boundary on the same side, among
    all values of the original of its shape, and within half its magnitude
    (a graph output is the model's output by name, within half its magnitude).
    On values alone, not carry's correspondence; the original's boundaries
    are the ones the boundary check holds against eager PyTorch (Eager).
    Returns ({key: failures}, {key: undecided}): a value whose nearest is
    another, but whose boundary value is at most UNDECIDED_RATIO times as far,
    is undecided, not failed: the tool's drift is as large as the gap between
    the two in the original (T5's RMS norm: the normalized value and the same
    times a weight near one), so values cannot tell them apart."""
    import numpy as np
    from hiertag import carry_check, checks
    table = checks.module_table(carried)
    o_bounds, t_bounds = checks.module_boundaries(original), checks.module_boundaries(carried)
    o_names = sorted({n for node in original.graph.node for n in node.output if n} |
                     {i.name for i in original.graph.input if i.name not in {t.name for t in original.graph.initializer}})
    t_names = sorted({n for ins, outs in t_bounds.values() for n in ins + outs})
    graph_outputs = {o.name for o in carried.graph.output}
    o_values = checks.intermediate_values(original, eager.feeds_for(original), o_names)
    t_values = checks.intermediate_values(carried, eager.feeds_for(carried), t_names)
    results, undecided = {}, {}
    for (tag, call), (inputs, outputs) in sorted(t_bounds.items()):
        key = checks.boundary_key(table, tag, call)
        if statuses[key]["status"] != carry_check.VERIFIED:
            continue
        o_inputs, o_outputs = o_bounds[(tag, call)]
        failures = results.setdefault(key, [])
        for names, side, verb in ((inputs, o_inputs, "consumes"), (outputs, o_outputs, "produces")):
            for name in names:
                if name in graph_outputs and name in side:  # the model's output, whatever the tool's precision
                    if checks.disagreement(t_values[name], o_values[name]) > carry_check.UNRELATED:
                        failures.append(f"{key}: {verb} the model's output '{name}', off by more than half its "
                                        "magnitude")
                    continue
                found = [(checks.disagreement(t_values[name], value), original_name)
                         for original_name, value in o_values.items() if np.shape(value) == np.shape(t_values[name])]
                best = min((distance for distance, _ in found), default=float("inf"))
                nearest = {o for distance, o in found if distance <= best * (1 + 1e-3) + 1e-9}
                if best <= carry_check.UNRELATED and nearest & set(side):
                    continue
                line = (f"{key}: {verb} '{name}', nearest to {sorted(nearest)[:2]} ({best:.1e} of its magnitude), "
                        f"no value that crossed its boundary there")
                on_side = min((distance for distance, o in found if o in side), default=float("inf"))
                if on_side <= carry_check.UNRELATED and on_side <= best * UNDECIDED_RATIO:
                    undecided.setdefault(key, []).append(f"{line} (one that did at {on_side:.1e})")
                else:
                    failures.append(line)
    return results, undecided


def eager_check(carried, eager, tolerance):
    """({key: failures} of every call the file does not declare, {key: eager tensors of those that pass})."""
    from hiertag import checks
    assignments = {}
    results, _ = checks.module_boundary_results(carried, eager.model, eager.args, eager.feeds_for(carried),
                                                tolerance, assignments, recorded=eager.recorded)
    return results, assignments


def extraction_check(path, carried, statuses, assignments, tolerance, pass_name):
    """(calls extract handled as the file says, calls tried, problems): a call
    the file declares is refused naming the transformation (declared by carry
    or the tool) or an export pass (declared at export); every other call
    with nodes is written and, run on the tensors it received in eager
    PyTorch, returns the ones it returned."""
    from hiertag import carry_check, checks
    table = checks.module_table(carried)
    right, tried, problems = 0, 0, []
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "module.onnx"
        for tag in table:
            for call in range(checks.call_count(table, tag)):
                key = checks.boundary_key(table, tag, call)
                status = statuses[key]
                if status["status"] in (carry_check.NEVER_RAN, carry_check.NO_NODES):
                    continue
                arguments = [path, "--module", tag, "-o", out, "--json"]
                if key != tag:
                    arguments += ["--call", call]
                done = run_tool("extract", *arguments)
                tried += 1
                if status["status"] == carry_check.DECLARED:
                    ok = done.returncode == 2 and pass_name in done.stderr
                    problem = f"{key}: not refused naming {pass_name} ({done.stderr.strip() or 'written'})"
                elif status["status"] == carry_check.EXPORT:
                    ok = done.returncode == 2 and "cannot be extracted" in done.stderr
                    problem = f"{key}: not refused as its export record says ({done.stderr.strip() or 'written'})"
                elif done.returncode != 0:
                    ok, problem = False, f"{key}: {done.stderr.strip()}"
                elif key not in assignments:
                    ok, problem = False, f"{key}: written, but the boundary check has no eager values for it"
                else:
                    worst = run_extracted(out, json.loads(done.stdout), *assignments[key])
                    ok = worst <= tolerance
                    problem = f"{key}: the extracted model is off by {worst:.1e} of its results' magnitude"
                right += ok
                if not ok:
                    problems.append(problem)
    return right, tried, problems


def run_extracted(path, info, received, returned):
    """How far the extracted model, run on the tensors the call received, is
    from the tensors it returned (relative to their magnitude; inf when ONNX
    Runtime cannot run it)."""
    import onnxruntime
    from hiertag import checks
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        session = onnxruntime.InferenceSession(str(path), options)
        types = {i.name: i.type for i in session.get_inputs()}
        produced = session.run(info["outputs"], {n: received[n].numpy().astype(_numpy_type(types[n]))
                                                 for n in info["inputs"]})
    except Exception:  # ONNX Runtime refuses the extracted file: a problem of the cell
        return float("inf")
    return max((checks.disagreement(p, returned[n].numpy()) for p, n in zip(produced, info["outputs"])), default=0.0)


def _numpy_type(ort_type):
    import numpy as np
    name = ort_type.removeprefix("tensor(").removesuffix(")")
    return {"float": np.float32, "double": np.float64, "float16": np.float16, "bool": np.bool_}.get(name, name)


def first_line(error):
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"[:300]


def loads_in_onnxruntime(path):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def plain_export_error(name, directory):
    """Why torch itself cannot export the model (its own export, without
    hiertag's tagging, fails or writes a file ONNX Runtime refuses with its
    default options, as bench/sweep.py checks), or None."""
    import onnxruntime
    import torch
    from hiertag import OPSET
    path = Path(directory) / f"{name}.plain.onnx"
    try:
        model, args = build(name)
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
        onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    except Exception as error:
        return first_line(error)
    return None


def cell(name, tool, source, directory, eager):
    import onnx
    from hiertag import carry_check, checks, core
    from hiertag.verbs import carry
    from hiertag.models import quiet
    started = time.perf_counter()
    target = Path(directory) / f"{name}.{tool}.onnx"
    try:
        with quiet():
            TOOLS[tool][1](source, target, name)
        loads_in_onnxruntime(target)
    except Exception as error:  # the tool fails on the model, or writes a file ONNX Runtime refuses
        return {"model": name, "tool": tool, "family": family(name), "passed": None, "tool_error": first_line(error)}
    transformed = onnx.load(str(target))
    nodes = list(checks.walk_nodes(transformed.graph))
    original = onnx.load(str(source))
    with quiet():
        carried, summary = carry.carry(original, transformed, tool)
    out = Path(directory) / f"{name}.{tool}.carried.onnx"
    onnx.save(carried, str(out))
    validate = run_tool("validate", out)
    tree = run_tool("tree", out, "--depth", "1")
    calls = summary["calls"]
    statuses = {entry["call"]: entry for entry in summary["results"]}
    # A tool that keeps values is held to float32 rounding against eager
    # PyTorch; one that changes precision is held to identity on values: each
    # boundary value nearest to one of the call's original boundary values.
    tolerance = calls["tolerance"]
    with quiet():
        results, assignments = eager_check(carried, eager, tolerance)
    undecided = {}
    if calls["method"] == carry_check.BY_CORRESPONDENCE:
        results, undecided = identification_check(original, carried, eager, statuses)
    # Wrong: a call carry did not declare whose carried boundary is not what it received and returned.
    wrong = [failure for key, failures in results.items() for failure in failures
             if statuses[key]["status"] not in (carry_check.DECLARED, carry_check.EXPORT)]
    right, tried, problems = extraction_check(out, carried, statuses, assignments, tolerance, f"carry: {tool}")
    result = {
        "model": name, "tool": tool, "family": family(name), "nodes": len(nodes),
        "tagged_by_tool": sum(core.TAG_KEY in checks.node_props(node) for node in nodes),
        **{key: summary[key] for key in ("exact", "shared", "span", "rule", "rules", "unplaced")},
        "tagged_after": sum(core.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(carried.graph)),
        "validate": validate.returncode == 0, "validate_line": validate.stdout.strip().splitlines()[-1:],
        "tree": tree.returncode == 0 and tree.stdout.startswith(next(iter(checks.module_table(carried)))
                                                               .rsplit("/", 1)[-1]),
        **{key: calls[key] for key in ("calls", "verified", "declared_by_tool", "declared_by_carry",
                                       "declared_at_export", "never_ran", "no_nodes", "method", "tolerance",
                                       "drift")},
        "eager_checked": len(results), "export_failures": eager.export_failures[:5], "wrong": len({line.split(": ")[0] for line in wrong}), "wrong_lines": wrong[:20],
        "undecided": len([key for key in undecided if not results.get(key)]),
        "undecided_lines": [line for key, lines in undecided.items() if not results.get(key) for line in lines][:20],
        "declared": summary["declared"], "extract_right": right, "extract_tried": tried,
        "extract_problems": problems[:20],
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["passed"] = (result["tagged_after"] == result["nodes"] and result["validate"] and result["tree"]
                        and not summary["unplaced"] and result["wrong"] == 0 and right == tried
                        and not eager.export_failures)
    return result


def worker(name, tools, out_json):
    """One model through every tool, in this process: the cells as JSON lines."""
    import onnxruntime
    import torch
    import hiertag
    from hiertag.models import quiet
    warnings.simplefilter("ignore")
    onnxruntime.set_default_logger_severity(3)
    torch.ops.load_library(hiertag.library_path())
    cells = []
    with tempfile.TemporaryDirectory() as directory:
        source = Path(directory) / f"{name}.onnx"
        try:
            with quiet():
                export_tagged(name, source)
                eager = Eager(name, source)
        except Exception:
            with quiet():
                cannot = plain_export_error(name, directory)
            if cannot is None:
                raise
            Path(out_json).write_text(json.dumps([{"model": name, "tool": tool, "family": family(name),
                                                   "passed": None, "not_exportable": cannot} for tool in tools]))
            return
        for tool in tools:
            try:
                result = cell(name, tool, source, directory, eager)
            except Exception as error:  # a tool that fails on a model is a result of the matrix
                result = {"model": name, "tool": tool, "family": family(name), "passed": False,
                          "error": f"{type(error).__name__}: {str(error).strip()[:300]}"}
            cells.append(result)
    Path(out_json).write_text(json.dumps(cells))


def run_model(name, tools, timeout=1800):
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "cells.json"
        started = time.perf_counter()
        try:
            done = subprocess.run([sys.executable, __file__, "--worker", name, "--tools", ",".join(tools),
                                   "--out", str(out)], capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        except subprocess.TimeoutExpired:
            return [{"model": name, "tool": tool, "passed": False, "error": f"timed out after {timeout} s"}
                    for tool in tools]
        if done.returncode != 0 or not out.exists():
            lines = (done.stderr or done.stdout).strip().splitlines()
            return [{"model": name, "tool": tool, "passed": False,
                     "error": f"worker exited {done.returncode}: {lines[-1] if lines else ''}",
                     "seconds": round(time.perf_counter() - started, 1)} for tool in tools]
        return json.loads(out.read_text())


def versions():
    return provenance.versions("torch", "transformers", "onnx", "onnxruntime", "onnxsim", "onnxslim",
                               "onnxconverter-common")


COUNTS = ("calls", "verified", "declared_by_tool", "declared_by_carry", "declared_at_export", "never_ran", "no_nodes",
          "wrong", "undecided")


def totals(cells):
    return {key: sum(c.get(key, 0) for c in cells if "calls" in c) for key in COUNTS}


def _how(cells):
    """How carry verified these cells' calls: by value within float32 rounding,
    or by correspondence, with the tools' median drift."""
    from hiertag import carry_check
    if cells[0]["method"] == carry_check.BY_VALUE:
        return f"{carry_check.BY_VALUE} ({cells[0]['tolerance']:.0e})"
    drifts = [c["drift"] for c in cells]
    span = f"{min(drifts):.0e}" + (f" to {max(drifts):.0e}" if max(drifts) > min(drifts) else "")
    return f"{carry_check.BY_CORRESPONDENCE} (median drift {span})"


def render(report):
    every_cell = report["cells"]
    # A cell whose tool fails on the model, or whose model torch itself cannot export, is not counted.
    cells = [c for c in every_cell if c["passed"] is not None]
    good = [c for c in cells if "calls" in c]
    models = [m for m in report["models"] if any(c["model"] == m for c in cells)]
    every = totals(cells)
    lines = ["# hiertag carry: tags after the tools that come next", "",
             f"Command: `.venv/bin/python bench/carry_matrix.py{report['arguments']}` ({report['date']}, "
             f"{provenance.describe(report)}, " + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ").", "",
             f"{len(models)} models (trained-like weights) by {len(report['tools'])} tools: "
             f"**{sum(c['passed'] for c in cells)} of {len(cells)} cells pass** (every node tagged, `hiertag "
             f"validate` and `tree` accept the file, no call wrong, `extract` as the file says). Of "
             f"{every['calls']:,} module calls, **{every['verified']:,} verified**, "
             f"{every['declared_by_tool']:,} declared by the tool (it fused, removed or converted the boundary), "
             f"{every['declared_by_carry']:,} declared by carry (it could not establish the boundary), "
             f"{every['declared_at_export']:,} declared at export, {every['never_ran']:,} never ran, "
             f"{every['no_nodes']:,} left no node; **{every['wrong']} wrong** (a call carry presented whose boundary "
             f"is not what it received and returned in eager PyTorch)"
             + (f"; of the verified, {every['undecided']} undecided by values (section Undecided by values)"
                if every["undecided"] else "") + ".", "",
             "## Per tool", "",
             "| tool | cells passing | calls | verified | declared by the tool | declared by carry | at export | "
             "never ran / no node | wrong | how verified |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for tool in report["tools"]:
        mine = [c for c in cells if c["tool"] == tool]
        count = totals(mine)
        how = "; ".join(_how([c for c in mine if c.get("method") == method])
                        for method in sorted({c["method"] for c in mine if "method" in c}))
        lines.append(f"| {TOOLS[tool][0]} | {sum(c['passed'] for c in mine)} of {len(mine)} | {count['calls']} | "
                     f"{count['verified']} | {count['declared_by_tool']} | {count['declared_by_carry']} | "
                     f"{count['declared_at_export']} | {count['never_ran'] + count['no_nodes']} | {count['wrong']} | "
                     f"{how} |")
    lines += ["", "## Per model and tool", "",
              "Each cell: calls verified / declared by the tool / declared by carry / wrong, of the model's calls "
              "(the rest declared at export, never ran or left no node); `tool fails` where the tool itself fails on "
              "the model.", "",
              "| model | calls | " + " | ".join(report["tools"]) + " |",
              "|---|---|" + "---|" * len(report["tools"])]
    by_cell = {(c["model"], c["tool"]): c for c in every_cell}
    for name in models:
        row = [name]
        counted = [c for c in cells if c["model"] == name and "calls" in c]
        row.append(str(counted[0]["calls"]) if counted else "-")
        for tool in report["tools"]:
            c = by_cell.get((name, tool))
            row.append("-" if c is None else "error" if "error" in c else "tool fails" if "tool_error" in c else
                       f"{c['verified']}/{c['declared_by_tool']}/{c['declared_by_carry']}/{c['wrong']}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Every cell", "",
              "Columns: *nodes* of the transformed model; *by tool* nodes that still carried a tag; *exact* placed "
              "in one module call; *shared* kept for several calls; *span* a fused node across calls; *rule* a "
              "node standing for no original node; *calls* verified / declared by the tool / by carry / at export; "
              "*eager* calls the boundary check against eager PyTorch held (every call not declared), *wrong* "
              "those failing it; *extract* calls `hiertag extract` handled as the file says / tried.", "",
              "| model | tool | nodes | by tool | exact | shared | span | rule | validate | tree | calls | how | "
              "eager | wrong | extract | s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if "tool_error" in c:
            continue
        if "error" in c:
            lines.append(f"| {c['model']} | {c['tool']} | error: {c['error']} |" + " |" * 13)
            continue
        lines.append(f"| {c['model']} | {c['tool']} | {c['nodes']} | {c['tagged_by_tool']} | {c['exact']} | "
                     f"{c['shared']} | {c['span']} | {c['rule']} | {'ok' if c['validate'] else 'FAIL'} | "
                     f"{'ok' if c['tree'] else 'FAIL'} | {c['verified']}/{c['declared_by_tool']}/"
                     f"{c['declared_by_carry']}/{c['declared_at_export']} | {_how([c])} | "
                     f"{c['eager_checked']} | {c['wrong']} | {c['extract_right']}/{c['extract_tried']} | "
                     f"{c['seconds']} |")
    by_carry = [(c, d) for c in good for d in c["declared"] if d["cause"] == "carry"]
    if by_carry:
        lines += ["", "## Declared by carry", "",
                  "Calls whose boundary values all still exist in the transformed model, which carry's placement "
                  "did not make the call's boundary (so they are declared, not presented):", ""]
        lines += [f"- {c['model']} / {c['tool']}: `{d['call']}`: {d['reason']}" for c, d in by_carry[:40]]
        if len(by_carry) > 40:
            lines.append(f"- ... {len(by_carry) - 40} more (carry.json lists them)")
    undecided = [(c, line) for c in good for line in c.get("undecided_lines", [])]
    if undecided:
        lines += ["", "## Undecided by values", "",
                  "Calls of a precision-changing tool that carry verified by correspondence, where the independent "
                  f"check by values could not decide: a value crossing the call's carried boundary is nearest to "
                  f"another value of the original, but at most {UNDECIDED_RATIO} times as far from one that crossed "
                  "the call's boundary there; the tool's drift is as large as the gap between the two (neither "
                  "wrong nor established by this check):", ""]
        lines += [f"- {c['model']} / {c['tool']}: {line}" for c, line in undecided[:40]]
        if len(undecided) > 40:
            lines.append(f"- ... {len(undecided) - 40} more (carry.json lists them)")
    problems = [(c, line) for c in good for line in c["wrong_lines"] + c["extract_problems"]]
    if problems or len(good) < len(cells):
        lines += ["", "## Problems", ""]
        lines += [f"- {c['model']} / {c['tool']}: {line}" for c, line in problems]
        lines += [f"- {c['model']} / {c['tool']}: {c['error']}" for c in cells if c.get("error")]
    failing = [c for c in every_cell if "tool_error" in c]
    if failing:
        lines += ["", "## Where the tool fails (not counted)", "",
                  "The tool raised, or wrote a file ONNX Runtime refuses to load; carry has nothing to tag.", ""]
        lines += [f"- {c['model']} / {c['tool']}: {c['tool_error']}" for c in failing]
    refused = {c["model"]: c["not_exportable"] for c in every_cell if "not_exportable" in c}
    if refused:
        lines += ["", "## Not exportable by torch (not counted)", "",
                  "torch's own export, without hiertag, fails on these or writes a file ONNX Runtime refuses:", ""]
        lines += [f"- {model}: {reason}" for model, reason in refused.items()]
    return "\n".join(lines) + "\n"


def write_json(path, report):
    """The report as JSON, one cell a line."""
    head = json.dumps({key: value for key, value in report.items() if key != "cells"})
    Path(path).write_text(head[:-1] + ', "cells": [\n' + ",\n".join(json.dumps(c) for c in report["cells"]) + "\n]}\n")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="carry_matrix.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"models (default: the matrix's {len(MODELS)}; any model of the sweep is accepted)")
    parser.add_argument("--tools", default=",".join(TOOLS), help=f"tools (default: all {len(TOOLS)})")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where carry.md and carry.json go")
    parser.add_argument("--worker", metavar="MODEL", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    tools = options.tools.split(",")
    if options.worker:
        worker(options.worker, tools, options.out)
        return 0
    models = options.models.split(",")
    from hiertag.zoo import sweep_models
    known = set(MODELS) | set(sweep_models.MODELS)  # the matrix's, or any other of the sweep's
    unknown = [m for m in models if m not in known] + [t for t in tools if t not in TOOLS]
    if unknown:
        print(f"carry_matrix.py: unknown model or tool: {', '.join(unknown)} "
              f"(models {', '.join(MODELS)}; tools {', '.join(TOOLS)})", file=sys.stderr)
        return 2
    arguments = "".join(f" --{k} {v}" for k, v in (("models", options.models), ("tools", options.tools))
                        if v != parser.get_default(k))
    import hiertag
    native = Path(hiertag.library_path()).parent  # what the workers load: build/, brought up to date first
    problem = provenance.build_what_loads(native)
    if problem:
        print(f"carry_matrix.py: {problem}", file=sys.stderr)
        return 1
    report = {"arguments": arguments, "date": time.strftime("%Y-%m-%d"), **provenance.state(directory=native),
              "versions": versions(), "models": models, "tools": tools, "cells": []}
    for name in models:
        found = run_model(name, tools)
        report["cells"] += found
        for result in found:
            counts = next((f"{label}: {result[key][:120]}" for key, label in (
                ("error", "error"), ("tool_error", "the tool fails"), ("not_exportable", "torch cannot export"))
                if key in result), None) or \
                "/".join(str(result[key]) for key in ("verified", "declared_by_tool", "declared_by_carry", "wrong"))
            verdict = {True: "ok", False: "FAIL", None: "-"}[result["passed"]]
            print(f"{name:18s} {result['tool']:13s} {verdict:4s} {counts}", flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "carry.json", report)
    (out / "carry.md").write_text(render(report))
    return 0 if all(c["passed"] is not False for c in report["cells"]) else 1


if __name__ == "__main__":
    sys.exit(main())
