"""Which exporter's module metadata to trust: torch's dynamo exporter (its
pkg.torch.onnx.name_scopes, turned into tags by `hiertag import-dynamo`) against
hiertag's TorchScript-based tags, scored by the same verifier on the bundled models.

Per model, each in a fresh process, all three exports making the same call (the
forward narrowed to the supplied arguments, as `hiertag export` does):
  hiertag   the tagged TorchScript export (HIERTAG=1, dynamo=False), checked by
            the verifier (hiertag.verbs.verify.verify_file): every call of every module
            of its table extracted and boundary-checked against eager PyTorch;
  dynamo    torch.onnx.export(..., dynamo=True) with HIERTAG unset, as torch's
            default call makes it (optimize=True) and with optimize=False, each
            converted by hiertag.verbs.import_dynamo, checked by `hiertag validate` and by the
            same verifier against its own table; its passing calls matched to
            hiertag's by module path and instance call;
  tags      for every module path both tables list, whether the import's tag is
            one the TorchScript table gives that path, and whether its calls agree.

usage: .venv/bin/python bench/dynamo_vs_hiertag.py [--models a,b,...] [--out DIR] [--timeout S] [--render]
Writes DIR/dynamo.md and DIR/dynamo.json (default DIR: bench/results), about
4 minutes for all bundled models; --render writes dynamo.md again from dynamo.json."""

import argparse
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import provenance  # bench/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]


def first_line(error):
    """The innermost cause's first line: torch's ConversionError wraps the real one."""
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:240]


def score(rows, failures, table):
    """The verifier's rows summed: calls checked, boundary passing, extraction
    passing (or refused with the file's reason), both; the first failure lines;
    and the calls passing both as [module path, its instance's call number], so
    two tables naming one call differently can be compared."""
    from hiertag import checks
    reasons = [f"boundary: {line}" for line in failures]
    reasons += [f"extract: {key}: {extract}" for key, _, extract, _, _ in rows
                if not extract.startswith(("ok", "refused", "no nodes"))]
    passing = []
    for key, *_, passed in rows:
        entry = table[checks.key_tag(table, key)]
        call = int(key.rsplit("#", 1)[1]) if key not in table else 0
        if passed:
            passing.append([entry["path"], entry.get("calls", [0])[call]])
    return {"calls": len(rows),
            "boundary_pass": sum(not boundary.startswith("FAIL") for _, _, _, boundary, _ in rows),
            "extract_pass": sum(extract.startswith(("ok", "refused", "no nodes")) for _, _, extract, _, _ in rows),
            "passed": sum(row[-1] for row in rows), "passing_calls": passing, "failures": reasons}


def compare_tables(hiertag_table, dynamo_table):
    """Paths both tables list: how many of the import's tags the TorchScript table
    gives the same path, and where the number of calls differs."""
    by_path = {}
    for tag, entry in hiertag_table.items():
        by_path.setdefault(entry["path"], {})[tag] = len(entry.get("calls", [0]))
    shared, equal, differ, calls_differ = 0, 0, [], []
    for tag, entry in dynamo_table.items():
        tags = by_path.get(entry["path"])
        if tags is None:
            continue
        shared += 1
        if tag in tags:
            equal += 1
            if tags[tag] != len(entry.get("calls", [0])):
                calls_differ.append(f"{tag}: {len(entry.get('calls', [0]))} calls, hiertag {tags[tag]}")
        else:
            differ.append(f"{entry['path']}: {tag} (hiertag: {', '.join(tags)})")
    return {"paths_in_both": shared, "tags_equal": equal, "tags_differ": differ, "calls_differ": calls_differ,
            "only_hiertag": sorted({e["path"] for e in hiertag_table.values()} -
                                   {e["path"] for e in dynamo_table.values()}),
            "only_dynamo": sorted({e["path"] for e in dynamo_table.values()} -
                                  {e["path"] for e in hiertag_table.values()})}


def narrowed(model, args):
    """The model with its forward narrowed to the parameters `args` supplies
    (hiertag.models.bind_inputs, as `hiertag export` does), so both exporters
    and the eager recording of the boundary check make the same call: the
    TorchScript exporter would otherwise pass every later parameter's default
    positionally, traced as a tensor (GPT-2's logits_to_keep=0 then selects one
    position), while the dynamo exporter leaves defaults alone."""
    import inspect

    from hiertag import models
    from hiertag.verbs import import_dynamo
    positional, keywords = import_dynamo.export_arguments(args)
    names = list(inspect.signature(model.forward).parameters)[:len(positional)] + list(keywords)
    return models.bind_inputs(model, names), args


def measure(name):
    """One model, in this process: both exports, the import, the verifier."""
    warnings.simplefilter("ignore")
    import onnx
    import onnxruntime
    import torch

    import hiertag
    from hiertag import OPSET, checks, zoo
    from hiertag.verbs import verify

    onnxruntime.set_default_logger_severity(3)
    torch.ops.load_library(hiertag.library_path())
    os.environ.pop("HIERTAG", None)
    result = {"model": name}

    def build():
        model, args = zoo.ALL[name]()
        return (model, args) if isinstance(model, torch.jit.ScriptModule) else narrowed(model, args)

    with tempfile.TemporaryDirectory() as work:
        work = Path(work)
        tagged = work / "hiertag.onnx"
        model, args = build()
        with hiertag.tagging():
            torch.onnx.export(model, args, str(tagged), dynamo=False, opset_version=OPSET)
        hiertag_model = onnx.load(tagged)
        hiertag_table = checks.module_table(hiertag_model)
        rows, failures = verify.verify_file(tagged, *build(), work)
        result["hiertag"] = {"nodes": sum(1 for _ in checks.walk_nodes(hiertag_model.graph)),
                             "modules": len(hiertag_table), **score(rows, failures, hiertag_table)}
        hiertag_calls = {tuple(call) for call in result["hiertag"]["passing_calls"]}
        for variant, optimize in (("dynamo", True), ("dynamo_unoptimized", False)):
            result[variant] = dynamo_side(build, work / variant, optimize, hiertag_table)
            if "passing_calls" in result[variant]:
                result[variant]["passing_of_hiertag_calls"] = len(
                    hiertag_calls & {tuple(call) for call in result[variant]["passing_calls"]})
    return result


def dynamo_side(build, work, optimize, hiertag_table):
    """torch's dynamo export (optimize as given; True is torch.onnx.export's
    default), imported, validated and verified; its tags against hiertag's."""
    import onnx
    import torch

    import hiertag
    from hiertag import checks
    from hiertag.verbs import import_dynamo, verify

    work.mkdir()
    exported = work / "dynamo.onnx"
    model, args = build()
    positional, keywords = import_dynamo.export_arguments(args)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, positional, str(exported), kwargs=keywords, dynamo=True, optimize=optimize)
    except Exception as error:
        return {"export": first_line(error)}
    imported = work / "imported.onnx"
    summary = import_dynamo.import_file(exported, imported)
    validate = subprocess.run([hiertag.tool_path(), "validate", str(imported)], capture_output=True, text=True)
    table = checks.module_table(onnx.load(imported))
    rows, failures = verify.verify_file(imported, *build(), work)
    return {"export": "ok", "nodes": summary["nodes"], "tagged_by": summary["tagged_by"],
            "function_nodes_untagged": summary["function_nodes_untagged"], "modules": summary["modules"],
            "validate": (validate.stdout + validate.stderr).strip().splitlines()[-1].split(": ", 1)[-1],
            "valid": validate.returncode == 0, **score(rows, failures, table),
            "tags": compare_tables(hiertag_table, table)}


def run_all(names, timeout):
    results = []
    for name in names:
        started = time.time()
        with tempfile.NamedTemporaryFile(suffix=".json") as out:
            try:
                done = subprocess.run([sys.executable, __file__, "--one", name, "--result", out.name],
                                      capture_output=True, text=True, timeout=timeout, cwd=ROOT)
                result = (json.loads(Path(out.name).read_text()) if done.returncode == 0 else
                          {"model": name, "error": (done.stderr.strip().splitlines() or ["exit " + str(done.returncode)])[-1]})
            except subprocess.TimeoutExpired:
                result = {"model": name, "error": f"timed out after {timeout} s"}
        result["seconds"] = round(time.time() - started, 1)
        print(f"{name}: {summary_line(result)}", flush=True)
        results.append(result)
    return results


def summary_line(result):
    if "error" in result:
        return f"ERROR {result['error']}"
    ours, theirs = result["hiertag"], result["dynamo"]
    if theirs["export"] != "ok":
        return f"hiertag {ours['passed']}/{ours['calls']}; dynamo export fails: {theirs['export']}"
    return (f"hiertag {ours['passed']}/{ours['calls']}; dynamo {theirs['passed']}/{theirs['calls']} "
            f"(boundary {theirs['boundary_pass']}, extract {theirs['extract_pass']}; {theirs['validate']}); "
            f"optimize=False {passing(result['dynamo_unoptimized'])}")


def passing(side):
    return f"{side['passed']}/{side['calls']}" if side["export"] == "ok" else "export fails"


def versions(state):
    return {**provenance.versions("torch", "onnxscript", "transformers", "onnx", "onnxruntime"),
            **state, "date": time.strftime("%Y-%m-%d")}


def render(results, environment):
    measured = [r for r in results if "error" not in r]
    both = [r for r in measured if r["dynamo"]["export"] == "ok"]

    def total(side, key, rows=both):
        return sum(r[side][key] for r in rows)

    unoptimized = [r for r in both if r["dynamo_unoptimized"]["export"] == "ok"]
    lines = [
        "# Module metadata: torch's dynamo exporter against hiertag", "",
        f"Command: `.venv/bin/python bench/dynamo_vs_hiertag.py` ({environment['date']}, "
        f"{provenance.describe(environment)}, torch {environment['torch']}, onnxscript {environment['onnxscript']}, transformers "
        f"{environment['transformers']}, onnx {environment['onnx']}, onnxruntime {environment['onnxruntime']}, python "
        f"{environment['python']}" + (f", {environment['cpu']}" if "cpu" in environment else "") + ").", "",
        "Every bundled model of `hiertag.zoo`, each in a fresh process, exported three ways with the same call "
        "(the forward narrowed to the supplied arguments, as `hiertag export` does): hiertag's tagged export "
        "(`dynamo=False`, `HIERTAG=1`); torch's default export (`dynamo=True`, its default `optimize=True`, HIERTAG "
        "unset); and the same with `optimize=False`. The dynamo files are turned into tags by `hiertag "
        "import-dynamo` and checked with `hiertag validate`. All files are scored by the verifier "
        "(`hiertag.verbs.verify.verify_file`), each against its own module table: per module call, *boundary* the values "
        "its nodes read from outside equal tensors it received in eager PyTorch and the values they hand out equal "
        "tensors it returned; *extract* `hiertag extract` cuts it out and, fed the full model's values, it "
        "reproduces them (or refuses with the reason its file records). *hiertag's calls* counts the calls of "
        "hiertag's table (same module path, same call of the instance) that pass in the dynamo file too: a module "
        "the dynamo metadata does not name, or a call it merges with another, cannot pass there.", "",
        f"**Over the {len(both)} models both exporters export:**", "",
        "| | module calls passing (own table) | boundary | extract | hiertag's calls passing |",
        "|---|---|---|---|---|",
        f"| hiertag (`dynamo=False`, HIERTAG=1) | {total('hiertag', 'passed')} of {total('hiertag', 'calls')} | "
        f"{total('hiertag', 'boundary_pass')} | {total('hiertag', 'extract_pass')} | "
        f"{total('hiertag', 'passed')} of {total('hiertag', 'calls')} |",
        f"| dynamo metadata, torch's default call | {total('dynamo', 'passed')} of {total('dynamo', 'calls')} | "
        f"{total('dynamo', 'boundary_pass')} | {total('dynamo', 'extract_pass')} | "
        f"{total('dynamo', 'passing_of_hiertag_calls')} of {total('hiertag', 'calls')} |",
        f"| dynamo metadata, `optimize=False` ({len(unoptimized)} models) | "
        f"{total('dynamo_unoptimized', 'passed', unoptimized)} of {total('dynamo_unoptimized', 'calls', unoptimized)} | "
        f"{total('dynamo_unoptimized', 'boundary_pass', unoptimized)} | "
        f"{total('dynamo_unoptimized', 'extract_pass', unoptimized)} | "
        f"{total('dynamo_unoptimized', 'passing_of_hiertag_calls', unoptimized)} of "
        f"{total('hiertag', 'calls', unoptimized)} |", "",
        f"Models whose dynamo file passes every call of its own table: {sum(r['dynamo']['passed'] == r['dynamo']['calls'] for r in both)} "
        f"of {len(both)} (hiertag: {sum(r['hiertag']['passed'] == r['hiertag']['calls'] for r in measured)} of "
        f"{len(measured)}). Models torch's dynamo exporter cannot export: {len(measured) - len(both)} of "
        f"{len(measured)} (listed below). Tags the import gives equal hiertag's for the same module path: "
        f"{sum(r['dynamo']['tags']['tags_equal'] for r in both)} of "
        f"{sum(r['dynamo']['tags']['paths_in_both'] for r in both)} paths both tables list.", "",
        "| model | hiertag nodes | hiertag calls passing | dynamo nodes | by metadata / by rule | dynamo modules "
        "| validate | boundary | extract | dynamo calls passing | hiertag's calls passing in dynamo's file "
        "| tags equal / paths in both | `optimize=False`: calls passing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['model']} | measurement failed: {r['error']} |" + " |" * 11)
            continue
        ours, theirs = r["hiertag"], r["dynamo"]
        head = f"| {r['model']} | {ours['nodes']} | {ours['passed']}/{ours['calls']} |"
        if theirs["export"] != "ok":
            lines.append(head + f" dynamo export fails: `{theirs['export']}` |" + " |" * 9)
            continue
        ruled = theirs["nodes"] - theirs["tagged_by"]["metadata"]
        tags = theirs["tags"]
        lines.append(head + f" {theirs['nodes']} | {theirs['tagged_by']['metadata']} / {ruled} | {theirs['modules']} | "
                     f"{'ok' if theirs['valid'] else 'INVALID'} | {theirs['boundary_pass']}/{theirs['calls']} | "
                     f"{theirs['extract_pass']}/{theirs['calls']} | {theirs['passed']}/{theirs['calls']} | "
                     f"{theirs['passing_of_hiertag_calls']}/{ours['calls']} | "
                     f"{tags['tags_equal']}/{tags['paths_in_both']} | {passing(r['dynamo_unoptimized'])} |")
    lines += ["", "## Where the dynamo metadata fails, and where the tables differ", ""]
    for r in both:
        notes = []
        for variant, label in (("dynamo", "default call"), ("dynamo_unoptimized", "optimize=False")):
            side = r[variant]
            if side["export"] == "ok" and side["failures"]:
                count = len(side["failures"])
                notes.append(f"{label}: {count} failure line{'s' if count > 1 else ''}; first: " +
                             "; ".join(f"`{line}`" for line in side["failures"][:3]))
        theirs, tags = r["dynamo"], r["dynamo"]["tags"]
        ruled = {rule: n for rule, n in theirs["tagged_by"].items() if rule != "metadata" and n}
        if ruled:
            notes.append("nodes without a module chain, tagged by rule: " +
                         ", ".join(f"{rule} {n}" for rule, n in ruled.items()))
        if tags["tags_differ"]:
            notes.append("tags differing from hiertag's: " + "; ".join(f"`{d}`" for d in tags["tags_differ"][:3]))
        if tags["calls_differ"]:
            notes.append("calls differing: " + "; ".join(f"`{d}`" for d in tags["calls_differ"][:3]))
        if tags["only_hiertag"]:
            notes.append("module paths only in hiertag's table: " + ", ".join(f"`{p}`" for p in tags["only_hiertag"][:4]))
        if r["hiertag"]["failures"]:
            notes.append("hiertag failures: " + "; ".join(f"`{line}`" for line in r["hiertag"]["failures"][:2]))
        if notes:
            lines.append(f"- **{r['model']}**: " + ". ".join(notes) + ".")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dynamo_vs_hiertag.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma list of bundled model names (default: all of hiertag.zoo)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where dynamo.md and dynamo.json go")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--render", action="store_true", help="write dynamo.md again from DIR/dynamo.json")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.one:
        Path(options.result).write_text(json.dumps(measure(options.one)))
        return 0
    out = Path(options.out)
    if options.render:
        measured = json.loads((out / "dynamo.json").read_text())
        (out / "dynamo.md").write_text(render(measured["results"], measured["environment"]))
        print(f"wrote {out / 'dynamo.md'}")
        return 0
    from hiertag import zoo
    names = options.models.split(",") if options.models else list(zoo.ALL)
    unknown = [name for name in names if name not in zoo.ALL]
    if unknown:
        print(f"dynamo_vs_hiertag.py: unknown model(s) {', '.join(unknown)} (one of {', '.join(zoo.ALL)})",
              file=sys.stderr)
        return 2
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what the commit names
    if problem:
        print(f"dynamo_vs_hiertag.py: {problem}", file=sys.stderr)
        return 2
    state = provenance.git_state()  # before the run: a commit made during it is not what ran
    results = run_all(names, options.timeout)
    environment = versions(state)
    out.mkdir(parents=True, exist_ok=True)
    (out / "dynamo.json").write_text(json.dumps({"environment": environment, "results": results}, indent=1) + "\n")
    (out / "dynamo.md").write_text(render(results, environment))
    print(f"wrote {out / 'dynamo.md'} and {out / 'dynamo.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
