"""hiertag on torch's dynamo exporter, measured (issue 47, "Measured"): per model,
the tagged default export checked call by call, hiertag's own work as a share
of the plain export, and the module table against the TorchScript path's.

Per model, each in a fresh process (--one), torch's default call
torch.onnx.export(model, args, f, kwargs=..., dynamo=True) (optimize=True):
  exportable  torch's untagged dynamo export, in a process that never loaded the
              plugin (--plain); a model it cannot export, or whose file ONNX
              Runtime refuses, is listed with torch's error and not counted;
  timing      with the plugin loaded, after a warm-up export of a small MLP
              plain and tagged (one-time imports not counted) and one of the
              model with HIERTAG=0: three plain exports (HIERTAG unset) and
              three tagged ones (HIERTAG=1, HIERTAG_REPORT=1), alternating,
              each the wall time of the export call; hiertag's own work is the
              report line's `hiertag work`, its share the median work over the
              median plain export;
  torch's     the files against torch's untagged ones: the --plain process
              replays the first exports of this one without hiertag (the
              warm-up, then the model three times), so each file is held
              against the file made at the same point of a process that never
              loaded hiertag (torch's stack-trace metadata names FX's generated
              code by a counter of the process: M2M100's, Speech2Text's files
              differ from one export to the next). The HIERTAG=0 export and the
              first plain one byte for byte equal to their twins (model and
              external data); the first tagged file, once hiertag's entries are
              stripped, equal to its twin, through onnx's full check, and ONNX
              Runtime's outputs of both identical on the model's inputs;
  tagged      the first tagged file: nodes, nodes tagged with a tag of its
              table, `hiertag validate`, and every module call through the
              verifier (hiertag.verbs.verify.verify_file): exact (extracted and
              boundary-checked against eager PyTorch), declared (refused naming
              the pass the file records, ran and left no node, never ran) or
              wrong;
  torchscript the same model exported with HIERTAG=1, dynamo=False: for every
              module path both tables list, whether its tag, class, calls and
              parent calls are the same;
  metadata    for contrast, torch's own metadata: the untagged file turned into
              tags by hiertag.verbs.import_dynamo and scored by the same verifier.

usage: .venv/bin/python bench/dynamo_vs_hiertag.py [--sweep] [--models a,b,...] [--out DIR] [--timeout S] [--render]
Writes DIR/dynamo.md and DIR/dynamo.json for the bundled models of hiertag.zoo
(about 15 minutes), or, with --sweep, DIR/dynamo-sweep.{md,json} for the
sweep's architectures (python/hiertag/zoo/sweep_models.py, about an hour);
default DIR: bench/results. --render writes the report again from the JSON."""

import argparse
import gc
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import provenance  # bench/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ".venv/bin/python bench/dynamo_vs_hiertag.py"
ROUNDS = 3
WORK_GOAL = 0.02  # issue 47: hiertag's own work at most 2 % of the plain dynamo export
REPORT_LINE = re.compile(r"^hiertag: \d+ nodes:.*hiertag work ([0-9.]+) ms.*?, writing ([0-9.]+) ms", re.MULTILINE)
DECLARED = ("refused", "no nodes", "written (never ran)")


def builder(name, sweep):
    """(family, a function building (model, args) afresh) of a bundled or sweep model."""
    if sweep:
        from hiertag.zoo import sweep_models
        return sweep_models.MODELS[name]
    from hiertag import zoo
    return "bundled", zoo.ALL[name]


def torch_error(error):
    """One line of torch's error: the dynamo exporter's summary line
    ("<class 'ValueError'>: ...", the last of its message), else the innermost
    cause's first line."""
    summary = [line for line in str(error).splitlines() if line.startswith("<class '")]
    if summary:
        return summary[-1][:300]
    while error.__cause__ is not None:
        error = error.__cause__
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"[:300]


def dynamo_export(build, path):
    """torch's default call on a freshly built model: the dynamo exporter,
    optimize=True; the wall seconds of the call and what it printed (file
    descriptors 1 and 2: the plugin's report line among them)."""
    import torch

    from hiertag import checks, models
    model, args = build()
    positional, keywords = checks.dynamo_arguments(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    gc.collect()
    with models.quiet() as printed:
        started = time.perf_counter()
        torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True)
        seconds = time.perf_counter() - started
    return seconds, "".join(printed)


# The first exports of a model's measurement, (folder, HIERTAG) in order,
# after the warm-up: the files held against torch's, which the --plain
# process makes at the same points without hiertag.
TWINNED = (("off", "0"), ("plain-0", None), ("tagged-0", "1"))


def warm_up(work):
    """A small MLP exported plain and tagged: one-time imports not counted."""
    import torch
    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    for flag in (None, "1"):
        flagged(flag)
        dynamo_export(lambda: (tiny, (torch.randn(1, 8),)), work / "warm-up" / "model.onnx")
    flagged(None)


def plain(name, sweep, work):
    """--plain: in this process that never loads the plugin, the warm-up and
    torch's own dynamo exports at the points of TWINNED, into WORK/FOLDER/;
    on failure WORK/error holds torch's error."""
    warnings.simplefilter("ignore")
    import onnxruntime
    _, build = builder(name, sweep)
    warm_up(work)
    first = work / TWINNED[0][0] / "model.onnx"
    try:
        dynamo_export(build, first)
    except Exception as error:  # torch cannot export it: say so in one line
        (work / "error").write_text(torch_error(error))
        return
    try:
        onnxruntime.InferenceSession(str(first))
    except Exception as error:  # torch wrote a file ONNX Runtime refuses
        (work / "error").write_text(
            f"torch's file does not load in ONNX Runtime: {str(error).strip().splitlines()[0][:200]}")
        return
    for folder, _ in TWINNED[1:]:
        dynamo_export(build, work / folder / "model.onnx")
    (work / "done").write_text("")


def without_hiertag():
    return {key: value for key, value in os.environ.items() if not key.startswith("HIERTAG")}


def flagged(flag):
    """HIERTAG and HIERTAG_REPORT set (flag "1") or unset (None) for what follows."""
    for key in ("HIERTAG", "HIERTAG_REPORT"):
        os.environ.pop(key, None)
    if flag:
        os.environ.update(HIERTAG=flag, HIERTAG_REPORT=flag)


def measure(name, sweep, timeout):
    """One model, in this process: every measurement of the module docstring."""
    warnings.simplefilter("ignore")
    import onnxruntime
    import torch

    import hiertag

    onnxruntime.set_default_logger_severity(3)
    family, build = builder(name, sweep)
    result = {"model": name, "family": family}
    with tempfile.TemporaryDirectory(prefix="dynamo-") as work:
        work = Path(work)
        twins = work / "torch"
        twins.mkdir()
        subprocess.run([sys.executable, __file__, "--plain", name, "--result", str(twins),
                        *(["--sweep"] if sweep else [])], env=without_hiertag(), cwd=ROOT, timeout=timeout,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not (twins / "done").exists():
            error = twins / "error"
            result.update(exportable=False, error=error.read_text() if error.exists() else "the plain export crashed")
            return result
        result["exportable"] = True
        untagged = twins / "tagged-0" / "model.onnx"

        torch.ops.load_library(hiertag.library_path())
        warm_up(work)
        timing = {"plain_seconds": [], "tagged_seconds": [], "work_ms": [], "writing_ms": []}
        tagged = work / "tagged-0" / "model.onnx"
        try:
            flagged("0")
            dynamo_export(build, work / "off" / "model.onnx")
            for round_ in range(ROUNDS):
                for flag in ((None, "1") if round_ % 2 == 0 else ("1", None)):
                    flagged(flag)
                    seconds, printed = dynamo_export(build, work / f"{'tagged' if flag else 'plain'}-{round_}" /
                                                     "model.onnx")
                    if not flag:
                        timing["plain_seconds"].append(seconds)
                        continue
                    found = REPORT_LINE.search(printed)
                    if found is None:
                        raise RuntimeError(f"no HIERTAG_REPORT line in what the tagged export printed: "
                                           f"{printed.strip()[-300:]!r}")
                    timing["tagged_seconds"].append(seconds)
                    timing["work_ms"].append(float(found.group(1)))
                    timing["writing_ms"].append(float(found.group(2)))
                    timing.setdefault("report", found.group(0))
        except Exception as error:  # an export torch makes untagged that fails tagged
            result["tagged"] = {"export": torch_error(error)}
            return result
        finally:
            flagged(None)
        result["torch"] = against_torch(twins, work, build)
        plain_ms = 1000 * statistics.median(timing["plain_seconds"])
        work_ms = statistics.median(timing["work_ms"])
        result["timing"] = {**timing, "plain_ms": plain_ms, "tagged_ms": 1000 * statistics.median(
            timing["tagged_seconds"]), "median_work_ms": work_ms, "work_share": work_ms / plain_ms}

        (work / "verify").mkdir()
        result["tagged"] = {"export": "ok", **file_summary(tagged), **verified(tagged, build, work / "verify")}
        result["torchscript"] = torchscript_agreement(build, tagged, work / "torchscript.onnx")
        result["metadata"] = metadata_side(untagged, build, work, result["tagged"]["passing_calls"])
    return result


def file_bytes(path):
    """A file as written: the model and its external data."""
    data = Path(f"{path}.data")
    return path.read_bytes(), data.read_bytes() if data.exists() else b""


def against_torch(twins, work, build):
    """The files of WORK against their twins in TWINS (TWINNED): how many
    flag-off files are their twins' bytes, whether the stripped tagged file
    equals its twin, onnx's full check of the tagged file, and whether ONNX
    Runtime's outputs of both are identical."""
    import numpy as np
    import onnx
    import onnxruntime

    from hiertag import checks
    flag_off = [folder for folder, flag in TWINNED if flag != "1"]
    found = {"flag_off_files": len(flag_off), "flag_off_equal": sum(
        file_bytes(work / folder / "model.onnx") == file_bytes(twins / folder / "model.onnx") for folder in flag_off)}
    tagged, untagged = work / "tagged-0" / "model.onnx", twins / "tagged-0" / "model.onnx"
    stripped = checks.strip_tags(onnx.load(tagged, load_external_data=False))
    found["stripped_equal"] = stripped.SerializeToString() == onnx.load(
        untagged, load_external_data=False).SerializeToString()
    try:
        onnx.checker.check_model(str(tagged), full_check=True)
        found["checker"] = "ok"
    except Exception as error:
        found["checker"] = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
    model, args = build()
    feeds = checks.feeds_for(str(untagged), model, args)
    ours = onnxruntime.InferenceSession(str(tagged)).run(None, feeds)
    torchs = onnxruntime.InferenceSession(str(untagged)).run(None, feeds)
    found["outputs"] = len(torchs)
    found["outputs_identical"] = len(ours) == len(torchs) and all(
        mine.dtype == other.dtype and mine.shape == other.shape
        and np.array_equal(mine, other, equal_nan=mine.dtype.kind in "fc")
        for mine, other in zip(ours, torchs, strict=True))
    return found


def same_as_torch(r):
    """Whether a model's files are torch's in every way against_torch measures."""
    found = r["torch"]
    return (found["flag_off_equal"] == found["flag_off_files"] and found["stripped_equal"]
            and found["checker"] == "ok" and found["outputs_identical"])


def file_summary(path):
    """Nodes, nodes tagged with a tag of the file's table, modules and `hiertag validate`."""
    import onnx

    import hiertag
    from hiertag import checks, core
    model = onnx.load(path, load_external_data=False)
    table = checks.module_table(model)
    nodes = list(checks.walk_nodes(model.graph))
    validate = subprocess.run([hiertag.tool_path(), "validate", str(path)], capture_output=True, text=True)
    lines = (validate.stdout + validate.stderr).strip().splitlines()
    return {"nodes": len(nodes), "modules": len(table),
            "nodes_tagged": sum(checks.node_props(node).get(core.TAG_KEY) in table for node in nodes),
            "valid": validate.returncode == 0,  # its last line, without the file's name
            "validate": lines[-1].split(": ", 1)[-1] if lines else f"exit {validate.returncode}"}


def verified(path, build, work):
    """Every module call of the file through the verifier: exact, declared (with
    the reason its file records) or wrong; and the calls passing as [module path,
    its instance's call number], so two files' calls can be matched."""
    import onnx

    from hiertag import checks
    from hiertag.verbs import verify
    table = checks.module_table(onnx.load(path, load_external_data=False))
    rows, failures = verify.verify_file(path, *build(), work)
    declared, wrong, passing = [], [], []
    for key, _, extract, boundary, passed in rows:
        if passed:
            entry = table[checks.key_tag(table, key)]
            call = int(key.rsplit("#", 1)[1]) if key not in table else 0
            passing.append([entry["path"], entry.get("calls", [0])[call]])
        if not passed:
            wrong.append(f"{key}: extract {extract}; boundary {boundary}")
        elif not extract.startswith("ok"):
            declared.append({"call": key, "extract": extract, "boundary": boundary, "reason": declared_reason(
                extract, boundary)})
    return {"calls": len(rows), "exact": sum(row[-1] and row[2].startswith("ok") for row in rows),
            "declared": len(declared), "wrong": len(wrong), "declared_calls": declared, "wrong_calls": wrong,
            "boundary_failures": failures[:20], "passing_calls": passing}


def declared_reason(extract, boundary):
    """Why a call passes as declared: the pass its file names and what it did
    (the verifier's "no boundary (PASS fused ...)"), or what the extraction said."""
    if extract.startswith("refused (rewrite)") and boundary.startswith("no boundary ("):
        return " ".join(boundary[len("no boundary ("):].split(" ", 2)[:2])
    if extract.startswith("no nodes"):
        return "ran and left no node" + extract[len("no nodes"):]
    if "never ran" in extract:
        return "never ran (a container its caller reached past)"
    return extract


def torchscript_agreement(build, tagged, path):
    """The same model through the TorchScript path (HIERTAG=1, dynamo=False):
    for every module path both tables list, whether its tag, class, calls and
    parent calls are the same there; the differences, one line each."""
    import onnx
    import torch

    from hiertag import OPSET, checks, models
    model, args = build()
    flagged("1")
    try:
        with models.quiet():
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    except Exception as error:
        return {"export": torch_error(error)}
    finally:
        flagged(None)
    ours = by_path(checks.module_table(onnx.load(tagged, load_external_data=False)))
    theirs = by_path(checks.module_table(onnx.load(path, load_external_data=False)))
    both = sorted(ours.keys() & theirs.keys())
    differences = []
    for module_path in both:
        if ours[module_path] != theirs[module_path]:
            differences.append(f"{module_path or '(root)'}: {describe_entries(ours[module_path])} here, "
                               f"{describe_entries(theirs[module_path])} on the TorchScript path")
    return {"export": "ok", "paths_in_both": len(both), "paths_equal": len(both) - len(differences),
            "differences": differences, "only_dynamo": sorted(ours.keys() - theirs.keys()),
            "only_torchscript": sorted(theirs.keys() - ours.keys())}


def by_path(table):
    """{module path: {tag: (class, calls, parent calls)}}."""
    found = {}
    for tag, entry in table.items():
        found.setdefault(entry["path"], {})[tag] = (entry["class"], entry.get("calls", [0]),
                                                    entry.get("parent_calls"))
    return found


def describe_entries(entries):
    return "; ".join(f"{tag} ({cls}, calls {calls}" + (f", parent calls {parents}" if parents is not None else "") + ")"
                     for tag, (cls, calls, parents) in sorted(entries.items()))


def metadata_side(untagged, build, work, tagged_passing):
    """torch's own metadata: the untagged file turned into tags by import-dynamo,
    validated, and scored by the verifier against its own table; how many of the
    tagged file's passing calls pass there too."""
    from hiertag.verbs import import_dynamo
    imported = work / "imported.onnx"
    try:
        summary = import_dynamo.import_file(untagged, imported)
    except Exception as error:
        return {"import": f"{type(error).__name__}: {str(error).strip()[:300]}"}
    (work / "verify-import").mkdir()
    scored = verified(imported, build, work / "verify-import")
    calls = {tuple(call) for call in scored.pop("passing_calls")}
    file = file_summary(imported)
    return {"import": "ok", "nodes": summary["nodes"], "tagged_by": summary["tagged_by"], "modules": summary["modules"],
            "valid": file["valid"], "validate": file["validate"], "calls": scored["calls"],
            "passed": scored["calls"] - scored["wrong"], "failing": scored["wrong_calls"][:5],
            "tagged_calls_passing": len(calls & {tuple(call) for call in tagged_passing})}


def run_one(name, sweep, timeout):
    """measure() in a fresh process (its own process group: on a timeout the
    --plain export it started ends with it)."""
    started = time.time()
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--one", name, "--result", out.name, "--timeout", str(timeout),
                   *(["--sweep"] if sweep else [])]
        worker = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                                  env=without_hiertag(), start_new_session=True)
        try:
            _, stderr = worker.communicate(timeout=timeout)
            lines = stderr.strip().splitlines()
            result = (json.loads(Path(out.name).read_text()) if worker.returncode == 0 else
                      {"model": name, "error": f"exit {worker.returncode}: {lines[-1] if lines else ''}"[:400]})
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.communicate()
            result = {"model": name, "error": f"timed out after {timeout:.0f} s"}
    result["seconds"] = round(time.time() - started, 1)
    return result


def summary_line(result):
    if "error" in result and result.get("exportable") is not False:
        return f"MEASUREMENT FAILED {result['error']}"
    if not result["exportable"]:
        return f"not exportable by torch's dynamo exporter: {result['error']}"
    tagged = result["tagged"]
    if tagged["export"] != "ok":
        return f"TAGGED EXPORT FAILED (plain export works): {tagged['export']}"
    agreement = result["torchscript"]
    tables = (f"{agreement['paths_equal']}/{agreement['paths_in_both']} paths equal" if agreement["export"] == "ok"
              else "TorchScript export fails")
    return (f"{tagged['nodes_tagged']}/{tagged['nodes']} nodes tagged, {tagged['calls']} calls: "
            f"{tagged['exact']} exact "
            f"{tagged['declared']} declared {tagged['wrong']} wrong, validate {'ok' if tagged['valid'] else 'FAIL'}, "
            f"torch's file {'same' if same_as_torch(result) else 'DIFFERS: ' + json.dumps(result['torch'])}, "
            f"work {result['timing']['median_work_ms']:.1f} ms = {100 * result['timing']['work_share']:.2f} % "
            f"of {result['timing']['plain_ms']:.0f} ms; {tables} ({result['seconds']} s)")


def counted(results):
    """The models torch's dynamo exporter exports and whose measurement ran."""
    return [r for r in results if r.get("exportable") and "error" not in r]


def percent(part, whole):
    return f"{100 * part / whole:.1f} %" if whole else "-"


def render(measured):
    results, machine = measured["results"], measured["machine"]
    models = counted(results)
    tagged = [r for r in models if r["tagged"]["export"] == "ok"]
    compared = [r for r in tagged if r["torchscript"]["export"] == "ok"]
    imported = [r for r in tagged if r["metadata"]["import"] == "ok"]
    failed = [r for r in results if "error" in r and r.get("exportable") is not False]
    refused = [r for r in results if r.get("exportable") is False]
    shares = sorted((r["timing"]["work_share"], r["model"]) for r in tagged)

    def total(rows, side, key):
        return sum(r[side][key] for r in rows)

    what = "the sweep's architectures (`python/hiertag/zoo/sweep_models.py`)" if measured["sweep"] else \
        "the bundled models of `hiertag.zoo`"
    lines = [
        "# hiertag on torch's dynamo exporter", "",
        f"Command: `{measured['command']}`. {provenance.ran({**measured, 'machine': machine})}", "",
        f"Each of {what}, in a fresh process, exported with torch's default call "
        "(`torch.onnx.export(model, args, f, kwargs=...)`: the dynamo exporter, `optimize=True`). A model torch's "
        "dynamo exporter cannot export without hiertag (judged in a process that never loaded the plugin), or whose "
        "file ONNX Runtime refuses, is listed with torch's error and not counted. With the plugin loaded, after a "
        "warm-up export of a small MLP plain and tagged and one of the model with `HIERTAG=0`: three plain exports "
        "(`HIERTAG` unset) and three tagged ones "
        f"(`HIERTAG=1`, `HIERTAG_REPORT=1`), alternating, each timed around the export call; *own work* is the "
        "report line's `hiertag work` (median of three), its *share* that over the median plain export (goal: at "
        f"most {100 * WORK_GOAL:.0f} %). *torch's file*: the process that never loaded the plugin replays the "
        "warm-up and the model's first three exports untagged, and each file is held against its twin made at the "
        "same point there (torch's stack-trace metadata names FX's generated code by a counter of the process): "
        "the `HIERTAG=0` export and the first with `HIERTAG` unset are byte for byte their twins (model and "
        "external data); the first tagged file equals its twin once hiertag's entries are stripped, passes onnx's "
        "full check, and gives ONNX Runtime outputs identical to it on the model's inputs. The first tagged file: "
        "*nodes tagged* with a tag of its table, `hiertag "
        "validate`, and every module call through the verifier (`hiertag.verbs.verify.verify_file`): *exact* its "
        "boundary holds against eager PyTorch and its extraction reproduces it; *declared* the file records why it "
        "has no boundary (the export pass that cut it, which `extract` names in its refusal; ran and left no node; "
        "never ran); *wrong* anything else. *Tables*: the model exported with `HIERTAG=1, dynamo=False` (opset "
        "`hiertag.OPSET`); a module path both tables list is equal when its tag, class, calls and parent calls are. "
        "*torch's metadata*, for contrast: the untagged dynamo file turned into tags by `hiertag import-dynamo`, "
        "scored by the same verifier against its own table.", "",
        f"**Over the {len(models)} models torch's dynamo exporter exports** "
        f"({len(refused)} it cannot, listed below" + (f"; {len(failed)} whose measurement failed" if failed else "")
        + "):", "",
        "| | result |", "|---|---|",
        f"| models exported tagged | {len(tagged)} of {len(models)} |",
        f"| nodes tagged | {total(tagged, 'tagged', 'nodes_tagged'):,} of {total(tagged, 'tagged', 'nodes'):,} "
        f"({percent(total(tagged, 'tagged', 'nodes_tagged'), total(tagged, 'tagged', 'nodes'))}) |",
        f"| `hiertag validate` passes | {sum(r['tagged']['valid'] for r in tagged)} of {len(tagged)} |",
        f"| flag off (`HIERTAG` unset and `0`) byte for byte torch's file | "
        f"{sum(r['torch']['flag_off_equal'] == r['torch']['flag_off_files'] for r in tagged)} of {len(tagged)} |",
        f"| tagged file, hiertag's entries stripped, equal to torch's | "
        f"{sum(r['torch']['stripped_equal'] for r in tagged)} of {len(tagged)} |",
        f"| onnx full check passes; ONNX Runtime outputs identical to torch's file | "
        f"{sum(r['torch']['checker'] == 'ok' for r in tagged)}; "
        f"{sum(r['torch']['outputs_identical'] for r in tagged)} of {len(tagged)} |",
        f"| module calls: exact / declared / wrong | {total(tagged, 'tagged', 'exact')} / "
        f"{total(tagged, 'tagged', 'declared')} / {total(tagged, 'tagged', 'wrong')} of "
        f"{total(tagged, 'tagged', 'calls')} |",
        f"| tables equal to the TorchScript path's | {total(compared, 'torchscript', 'paths_equal')} of "
        f"{total(compared, 'torchscript', 'paths_in_both')} module paths both list ({len(compared)} models; "
        f"{len(tagged) - len(compared)} the TorchScript exporter cannot export) |",
        "| own work, share of the plain dynamo export | " + (
            f"median {100 * statistics.median(s for s, _ in shares):.2f} %, max {100 * shares[-1][0]:.2f} % "
            f"({shares[-1][1]}): goal of {100 * WORK_GOAL:.0f} % met on {sum(s <= WORK_GOAL for s, _ in shares)} "
            f"of {len(shares)} models |" if shares else "- |"),
        f"| torch's metadata (import-dynamo): calls passing of its own table | {total(imported, 'metadata', 'passed')}"
        f" of {total(imported, 'metadata', 'calls')}; of hiertag's {total(imported, 'tagged', 'calls')} calls, "
        f"{total(imported, 'metadata', 'tagged_calls_passing')} pass there |", "",
        "| model | nodes | tagged | torch's file | calls | exact | declared | wrong | validate | tables equal / paths "
        "in both | plain ms | tagged ms | own work ms | share | torch's metadata: calls passing |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in models:
        if r["tagged"]["export"] != "ok":
            lines.append(f"| {r['model']} | tagged export FAILED (torch exports it untagged): "
                         f"`{r['tagged']['export']}` |" + " |" * 13)
            continue
        t, timing, agreement, metadata = r["tagged"], r["timing"], r["torchscript"], r["metadata"]
        lines.append(
            f"| {r['model']} | {t['nodes']:,} | {percent(t['nodes_tagged'], t['nodes'])} | "
            f"{'same' if same_as_torch(r) else 'DIFFERS'} | {t['calls']} | {t['exact']} "
            f"| {t['declared']} | {t['wrong']} | {'ok' if t['valid'] else 'FAIL'} | "
            + (f"{agreement['paths_equal']} / {agreement['paths_in_both']}" if agreement["export"] == "ok"
               else "TorchScript export fails")
            + f" | {timing['plain_ms']:,.0f} | {timing['tagged_ms']:,.0f} | {timing['median_work_ms']:.1f} | "
            f"{100 * timing['work_share']:.2f} % | "
            + (f"{metadata['passed']}/{metadata['calls']}" if metadata["import"] == "ok" else "import fails")
            + " |")
    lines += ["", "## Notes per model", "",
              "Declared calls with the reason the file records (for a rewrite, the pass `extract` names), and "
              "anything wrong or differing.", ""]
    noted = False
    for r in models:
        notes = model_notes(r)
        if notes:
            noted = True
            lines.append(f"- **{r['model']}**: " + "; ".join(notes) + ".")
    if not noted:
        lines.append("- none")
    if failed:
        lines += ["", "## Measurement failed", ""]
        lines += [f"- {r['model']}: `{r['error']}`" for r in failed]
    lines += ["", "## Not exportable by torch's dynamo exporter (not counted)", ""]
    lines += [f"- {r['model']}: `{r['error']}`" for r in refused] or ["- none"]
    return "\n".join(lines) + "\n"


def model_notes(r):
    """One model's notes: declared calls grouped by reason, wrong calls,
    differing tables, a TorchScript export that fails."""
    t, notes = r["tagged"], []
    if t["export"] != "ok":
        return [f"the tagged export fails where torch's untagged one works: `{t['export']}`"]
    found = r["torch"]
    if found["flag_off_equal"] != found["flag_off_files"]:
        notes.append(f"flag off: {found['flag_off_files'] - found['flag_off_equal']} of {found['flag_off_files']} "
                     "files differ from torch's bytes")
    if not found["stripped_equal"]:
        notes.append("the tagged file differs from torch's beyond hiertag's entries")
    if found["checker"] != "ok":
        notes.append(f"onnx full check: `{found['checker']}`")
    if not found["outputs_identical"]:
        notes.append("ONNX Runtime's outputs differ from those of torch's file")
    if t["nodes_tagged"] != t["nodes"]:
        notes.append(f"{t['nodes'] - t['nodes_tagged']} nodes without a tag of the table")
    if not t["valid"]:
        notes.append(f"`hiertag validate`: `{t['validate']}`")
    by_reason = {}
    for call in t["declared_calls"]:
        by_reason.setdefault(call["reason"], []).append(call["call"])
    for reason, calls in by_reason.items():
        notes.append(f"declared, {reason}: " + ", ".join(f"`{call}`" for call in calls))
    notes += [f"WRONG: `{line}`" for line in t["wrong_calls"][:5]]
    agreement = r["torchscript"]
    if agreement["export"] != "ok":
        notes.append(f"the TorchScript exporter cannot export it: `{agreement['export']}`")
    else:
        notes += [f"table differs: `{line}`" for line in agreement["differences"][:5]]
        for side, label in (("only_dynamo", "only in the dynamo file's table"),
                            ("only_torchscript", "only in the TorchScript file's table")):
            if agreement[side]:
                notes.append(f"module paths {label}: " + ", ".join(f"`{p or '(root)'}`" for p in agreement[side][:6]))
    return notes


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dynamo_vs_hiertag.py", description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma list of model names (default: all of hiertag.zoo, or of the sweep)")
    parser.add_argument("--sweep", action="store_true", help="the sweep's architectures instead of the bundled models")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="where the report and JSON go")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--render", action="store_true", help="write the report again from its JSON")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--plain", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.plain:
        plain(options.plain, options.sweep, Path(options.result))
        return 0
    if options.one:
        Path(options.result).write_text(json.dumps(measure(options.one, options.sweep, options.timeout)))
        return 0
    out = Path(options.out)
    name = "dynamo-sweep" if options.sweep else "dynamo"
    if options.render:
        (out / f"{name}.md").write_text(render(json.loads((out / f"{name}.json").read_text())))
        print(f"wrote {out / (name + '.md')}")
        return 0
    if options.sweep:
        from hiertag.zoo import sweep_models
        known = list(sweep_models.MODELS)
    else:
        from hiertag import zoo
        known = list(zoo.ALL)
    names = options.models.split(",") if options.models else known
    unknown = [model for model in names if model not in known]
    if unknown:
        print(f"dynamo_vs_hiertag.py: unknown model(s) {', '.join(unknown)} (one of {', '.join(known)})",
              file=sys.stderr)
        return 2
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what the commit names
    if problem:
        print(f"dynamo_vs_hiertag.py: {problem}", file=sys.stderr)
        return 2
    state = provenance.state()  # before the run: a commit or a build made during it is not what ran
    started = time.time()
    results = []
    for model in names:
        results.append(run_one(model, options.sweep, options.timeout))
        print(f"{model}: {summary_line(results[-1])}", flush=True)
    import harness  # the other reports' machine block (it imports torch: not in the workers)
    machine = harness.machine(state)
    machine["versions"]["onnxscript"] = provenance.versions("onnxscript")["onnxscript"]
    measured = {**state, "date": machine["date"], "machine": machine, "sweep": options.sweep,
                "command": SCRIPT + (" --sweep" if options.sweep else "")
                + (f" --models {options.models}" if options.models else "") + provenance.out_option(out),
                "seconds": round(time.time() - started), "results": results}
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(measured, indent=1) + "\n")
    (out / f"{name}.md").write_text(render(measured))
    print(f"wrote {out / (name + '.md')} and {out / (name + '.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
