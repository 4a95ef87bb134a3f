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
declared at export, never ran, left no node); and the judge
(bench/carry_judge.py), which shares no code with carry and its check: on the
eager inputs, every call the carried file does not declare is held against
what it received and returned in eager PyTorch, for every tool alike (fp16 and
int8 too). Each value crossing its carried boundary must be a tensor that
crossed the same call's boundary in the tagged file, within the tool's
precision as the judge measures it against eager PyTorch and at least
carry_judge.MARGIN times nearer to it than to any other value of its shape;
every such tensor must still cross. A call failing that is *wrong*: carry
presented a boundary that is not the call's; one whose values cannot tell
(within the margin either way) is *undecided*, and fails its cell too (carry
declares what values cannot tell). The tagged file's own boundaries are held
against eager PyTorch within float32 rounding (the verifier's check).
`hiertag extract` on every call: refused, naming the transformation or the
export pass, where the file declares the call; written otherwise, and a call
the judge found right, run on the tensors it received in eager PyTorch,
returns the ones it returned within the precision the judge measured at its
outputs.

Each model runs in a fresh process (torch names a scripted class's nodes
differently after its first export in a process).

usage: .venv/bin/python bench/carry_matrix.py [--models a,b] [--tools x,y] [--out DIR]
Writes DIR/carry.md and DIR/carry.json (default DIR: bench/results); exits 0
only when every cell passes: every node tagged, validate and tree accept the
file, no call wrong or undecided, extract as the file says."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import carry_judge  # bench/ is this script's folder
import provenance

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
    """The native tool's command `tool` in process (core.run_tool), its output as text."""
    from hiertag import core
    return core.run_tool([tool, *arguments]).text()


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
        # The tagged export's own boundaries (the verifier's check), which the judge's reference rests on.
        results, _ = checks.module_boundary_results(onnx.load(str(source)), self.model, self.args, self.feeds,
                                                    recorded=self.recorded)
        self.export_failures = [line for lines in results.values() for line in lines]


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

    from hiertag import checks, core, verbs
    from hiertag.models import quiet
    from hiertag.verbs import carry
    started = time.perf_counter()
    target = Path(directory) / f"{name}.{tool}.onnx"
    try:
        with quiet():
            TOOLS[tool][1](source, target, name)
        loads_in_onnxruntime(target)
    except Exception as error:  # the tool fails on the model, or writes a file ONNX Runtime refuses
        return {"model": name, "tool": tool, "family": family(name), "passed": None, "tool_error": first_line(error)}
    nodes = list(checks.walk_nodes(onnx.load(str(target)).graph))
    out = Path(directory) / f"{name}.{tool}.carried.onnx"
    # As `hiertag carry` runs: both read with their weights left in their files.
    with quiet():
        carried, summary = carry.carry(verbs.load_model(source, weights_in_place=True),
                                       verbs.load_model(target, weights_in_place=True), tool,
                                       data_folders=(Path(source).parent, target.parent), in_place=True)
    verbs.save_model(carried, out, sources=[source, target], data_from=target)
    original, carried = onnx.load(str(source)), onnx.load(str(out))
    validate = run_tool("validate", out)
    tree = run_tool("tree", out, "--depth", "1")
    calls = summary["calls"]
    with quiet():
        judgement = carry_judge.Judgement(original, carried, eager.recorded, eager.feeds)
    right, tried, problems = carry_judge.extraction(judgement, out, f"carry: {tool}", run_tool)
    judged = judgement.counts()
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
        # The judge's (bench/carry_judge.py): every call the file does not declare, held against eager PyTorch.
        "eager_checked": judged["judged"], "wrong": judged["wrong"], "undecided": judged["undecided"],
        "precision": judgement.precision, "export_failures": eager.export_failures[:5],
        "judge_problems": judgement.problems[:5], "wrong_lines": judgement.wrong_lines()[:20],
        "undecided_lines": judgement.undecided_lines()[:20],
        "declared": summary["declared"], "extract_right": right, "extract_tried": tried,
        "extract_problems": problems[:20],
    }
    result["seconds"] = round(time.perf_counter() - started, 1)
    # An undecided call fails its cell as a wrong one does: carry declares what values cannot tell.
    result["passed"] = (result["tagged_after"] == result["nodes"] and result["validate"] and result["tree"]
                        and not summary["unplaced"] and result["wrong"] == 0 and result["undecided"] == 0
                        and right == tried and not eager.export_failures and not judgement.problems)
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
    from hiertag.verbs.carry import check as carry_check
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
             f"{provenance.describe(report)}, "
             + ", ".join(f"{k} {v}" for k, v in report["versions"].items()) + ").", "",
             f"{len(models)} models (trained-like weights) by {len(report['tools'])} tools: "
             f"**{sum(c['passed'] for c in cells)} of {len(cells)} cells pass** (every node tagged, `hiertag "
             f"validate` and `tree` accept the file, no call wrong or undecided, `extract` as the file says). Of "
             f"{every['calls']:,} module calls, **{every['verified']:,} verified**, "
             f"{every['declared_by_tool']:,} declared by the tool (it fused, removed or converted the boundary), "
             f"{every['declared_by_carry']:,} declared by carry (it could not establish the boundary), "
             f"{every['declared_at_export']:,} declared at export, {every['never_ran']:,} never ran, "
             f"{every['no_nodes']:,} left no node; by the judge (bench/carry_judge.py), **{every['wrong']} wrong** (a "
             f"call the file presents whose boundary is not what it received and returned in eager PyTorch) and "
             f"**{every['undecided']} undecided** (values cannot tell whether it is: section Undecided by values).",
             "",
             "## Per tool", "",
             "| tool | cells passing | calls | verified | declared by the tool | declared by carry | at export | "
             "never ran / no node | wrong | undecided | how verified |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for tool in report["tools"]:
        mine = [c for c in cells if c["tool"] == tool]
        count = totals(mine)
        how = "; ".join(_how([c for c in mine if c.get("method") == method])
                        for method in sorted({c["method"] for c in mine if "method" in c}))
        lines.append(f"| {TOOLS[tool][0]} | {sum(c['passed'] for c in mine)} of {len(mine)} | {count['calls']} | "
                     f"{count['verified']} | {count['declared_by_tool']} | {count['declared_by_carry']} | "
                     f"{count['declared_at_export']} | {count['never_ran'] + count['no_nodes']} | {count['wrong']} | "
                     f"{count['undecided']} | {how} |")
    lines += ["", "## Per model and tool", "",
              "Each cell: calls verified / declared by the tool / declared by carry / wrong / undecided, of the "
              "model's calls "
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
                       f"{c['verified']}/{c['declared_by_tool']}/{c['declared_by_carry']}/{c['wrong']}/"
                       f"{c.get('undecided', 0)}")
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "## Every cell", "",
              "Columns: *nodes* of the transformed model; *by tool* nodes that still carried a tag; *exact* placed "
              "in one module call; *shared* kept for several calls; *span* a fused node across calls; *rule* a "
              "node standing for no original node; *calls* verified / declared by the tool / by carry / at export; "
              "*eager* calls the judge held against eager PyTorch (every call the file does not declare), *wrong* "
              "and *undecided* its findings, *precision* the tool's precision it measured against eager PyTorch; "
              "*extract* calls `hiertag extract` handled as the file says / tried.", "",
              "| model | tool | nodes | by tool | exact | shared | span | rule | validate | tree | calls | how | "
              "eager | wrong | undecided | precision | extract | s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in cells:
        if "tool_error" in c:
            continue
        if "error" in c:
            lines.append(f"| {c['model']} | {c['tool']} | error: {c['error']} |" + " |" * 15)
            continue
        lines.append(f"| {c['model']} | {c['tool']} | {c['nodes']} | {c['tagged_by_tool']} | {c['exact']} | "
                     f"{c['shared']} | {c['span']} | {c['rule']} | {'ok' if c['validate'] else 'FAIL'} | "
                     f"{'ok' if c['tree'] else 'FAIL'} | {c['verified']}/{c['declared_by_tool']}/"
                     f"{c['declared_by_carry']}/{c['declared_at_export']} | {_how([c])} | "
                     f"{c['eager_checked']} | {c['wrong']} | {c.get('undecided', 0)} | "
                     + (f"{c['precision']:.0e}" if "precision" in c else "-")
                     + f" | {c['extract_right']}/{c['extract_tried']} | {c['seconds']} |")
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
                  "Calls the file presents where the judge's values could not decide: a value crossing the call's "
                  "carried boundary is less than "
                  f"{carry_judge.MARGIN:g} times nearer to the tensor that crossed there in eager PyTorch than to "
                  "another value, or nearer to another by less than that; the tool's drift on the eager inputs is as "
                  "large as the gap between the two. Each fails its cell: carry declares what values cannot tell.",
                  ""]
        lines += [f"- {c['model']} / {c['tool']}: {line}" for c, line in undecided[:40]]
        if len(undecided) > 40:
            lines.append(f"- ... {len(undecided) - 40} more (carry.json lists them)")
    problems = [(c, line) for c in good
                for line in c.get("judge_problems", []) + c["wrong_lines"] + c["extract_problems"]]
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
                "/".join(str(result[key]) for key in ("verified", "declared_by_tool", "declared_by_carry", "wrong",
                                                      "undecided"))
            verdict = {True: "ok", False: "FAIL", None: "-"}[result["passed"]]
            print(f"{name:18s} {result['tool']:13s} {verdict:4s} {counts}", flush=True)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "carry.json", report)
    (out / "carry.md").write_text(render(report))
    return 0 if all(c["passed"] is not False for c in report["cells"]) else 1


if __name__ == "__main__":
    sys.exit(main())
