"""The broad sweep: every architecture of python/hiertag/zoo/sweep_models.py (and,
named with --models, the bundled zoo:NAME models) exported with hiertag and
checked in full, each model in a fresh process of its own.

Per model: torch's own export in a process that never loaded hiertag (a model
torch cannot export, or whose file ONNX Runtime refuses, is listed with that
error and not counted); the export
with the plugin loaded and HIERTAG=0 must be those bytes; the tagged export
must tag every node with a tag of the module table, name real module paths
and classes there, pass the checker (full_check) and `hiertag validate`, give
ONNX Runtime outputs identical to torch's file, and equal torch's file once
hiertag's entries are stripped; and every call of every module must pass the
verifier (hiertag verify, hiertag/verbs/verify.py): its boundary check, and its extraction
reproducing the full model's values, or a refusal the file records.

usage: .venv/bin/python bench/sweep.py [--models a,b,...] [--out DIR] [--timeout S] [--build DIR]
Writes DIR/sweep.md and DIR/sweep.json (default DIR: bench/results); exits 0
only when every exportable model passes every check."""

import argparse
import io
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import provenance  # bench/ is this script's folder
from hiertag import OPSET

ROOT = Path(__file__).resolve().parents[1]

CHECKS = ["tagged", "table", "checker", "validate", "runtime", "stripped", "flag_off"]


def build_model(name):
    from hiertag import zoo
    from hiertag.zoo import sweep_models
    if name.startswith("zoo:"):
        return "bundled", zoo.ALL[name[4:]]
    family, builder = sweep_models.MODELS[name]
    return family, builder


def export_bytes(model, args):
    buffer = io.BytesIO()
    import torch
    torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
    return buffer.getvalue()


def plain(name, out):
    """torch's own export, in this process that never loads hiertag."""
    warnings.simplefilter("ignore")
    _, builder = build_model(name)
    model, args = builder()  # a model that cannot be built is no torch limit: the run fails
    try:
        Path(out).write_bytes(export_bytes(model, args))
    except Exception as error:  # torch cannot export it: say so in one line
        message = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
        Path(out).with_suffix(".error").write_text(message[:300])


def worker(name, out_json, build_dir):
    import numpy as np
    import onnx
    import onnxruntime
    import torch

    import hiertag
    from hiertag import checks, core
    from hiertag.verbs import verify

    if build_dir:
        os.environ["HIERTAG_NATIVE_DIR"] = build_dir

    warnings.simplefilter("ignore")
    onnxruntime.set_default_logger_severity(3)
    family, builder = build_model(name)
    result = {"model": name, "family": family}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        subprocess.run([sys.executable, __file__, "--plain", name, str(tmp / "plain.onnx")], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env_without_hiertag())
        if not (tmp / "plain.onnx").exists():
            result["exportable"] = False
            result["error"] = (tmp / "plain.error").read_text()
            Path(out_json).write_text(json.dumps(result))
            return
        plain_bytes = (tmp / "plain.onnx").read_bytes()
        try:
            onnxruntime.InferenceSession(plain_bytes)
        except Exception as error:  # torch wrote a file ONNX Runtime refuses
            result["exportable"] = False
            result["error"] = f"torch's file does not load in ONNX Runtime: {str(error).splitlines()[0][:200]}"
            Path(out_json).write_text(json.dumps(result))
            return
        result["exportable"] = True
        torch.ops.load_library(hiertag.library_path())
        os.environ["HIERTAG"] = "0"
        result["flag_off"] = export_bytes(*builder()) == plain_bytes
        os.environ["HIERTAG"] = "1"
        torch_model, args = builder()
        source = tmp / "tagged.onnx"
        source.write_bytes(export_bytes(torch_model, args))
        # torch names a scripted class's nodes differently from its second
        # export in a process on, so the untagged twin is a later export too.
        os.environ["HIERTAG"] = "0"
        twin_bytes = export_bytes(*builder())
        os.environ.pop("HIERTAG")
        model = onnx.load(source)
        table = checks.module_table(model)
        nodes = list(checks.walk_nodes(model.graph))
        tagged = [n for n in nodes if core.TAG_KEY in checks.node_props(n)]
        result["nodes"], result["modules"] = len(nodes), len(table)
        result["tagged"] = len(tagged) == len(nodes) and all(
            checks.node_props(n)[core.TAG_KEY] in table for n in tagged)
        reference = dict(checks.eager_reference(torch_model).named_modules())
        result["table"] = all(entry["path"] in reference and
                              entry["class"] == torch.typename(type(reference[entry["path"]]))
                              for entry in table.values())
        try:
            onnx.checker.check_model(model, full_check=True)
            result["checker"] = True
        except onnx.checker.ValidationError:
            result["checker"] = False
        validate = subprocess.run([hiertag.tool_path(), "validate", str(source)], capture_output=True, text=True)
        result["validate"] = validate.returncode == 0
        if not result["validate"]:
            result["validate_problems"] = validate.stdout.strip().splitlines()[:5]
        feeds = checks.feeds_for(plain_bytes, torch_model, args)
        ours = onnxruntime.InferenceSession(str(source)).run(None, feeds)
        theirs = onnxruntime.InferenceSession(plain_bytes).run(None, feeds)
        result["runtime"] = all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        result["stripped"] = (checks.strip_tags(model).SerializeToString() ==
                              onnx.load_from_string(twin_bytes).SerializeToString())
        # The check runs the model again: a fresh one, as models cache state
        # across calls (Levit keeps its attention biases after the first).
        rows, failures = verify.verify_file(source, *builder(), tmp)
        result["calls"] = len(rows)
        result["calls_passed"] = sum(row[-1] for row in rows)
        result["boundary_failed"] = sum(row[3].startswith("FAIL") for row in rows)
        result["extracted"] = sum(row[2].startswith("ok") for row in rows)
        result["refused"] = [f"{row[0]}: {row[3]}" for row in rows if row[2].startswith("refused")]
        result["no_nodes"] = [f"{row[0]}: {row[2]}" for row in rows if row[2].startswith("no nodes")]
        result["failures"] = [f"{row[0]}: extract {row[2]}; boundary {row[3]}" for row in rows if not row[-1]]
        result["failures"] += failures[:20]
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["passed"] = all(result[c] for c in CHECKS) and result["calls_passed"] == result["calls"]
    Path(out_json).write_text(json.dumps(result))


def _env_without_hiertag():
    return {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG")}


def run_one(name, timeout, build_dir):
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        started = time.perf_counter()
        try:
            build = ["--build", build_dir] if build_dir else []
            finished = subprocess.run([sys.executable, __file__, "--worker", name, str(out), *build],
                                      capture_output=True, text=True, timeout=timeout, env=_env_without_hiertag(),
                                      cwd=ROOT)
        except subprocess.TimeoutExpired:
            return {"model": name, "exportable": True, "passed": False, "failures": [f"timed out after {timeout} s"]}
        if finished.returncode != 0 or not out.exists():
            lines = (finished.stderr or finished.stdout).strip().splitlines()
            return {"model": name, "exportable": True, "passed": False,
                    "failures": [f"worker exited {finished.returncode}: {lines[-1] if lines else ''}"],
                    "seconds": round(time.perf_counter() - started, 1)}
        return json.loads(out.read_text())


def versions():
    return provenance.versions("torch", "transformers", "onnx", "onnxruntime")


def _mark(value):
    return "ok" if value else "FAIL"


def render(results, meta):
    exportable = [r for r in results if r.get("exportable")]
    passed = [r for r in exportable if r.get("passed")]
    lines = [
        "# hiertag sweep: third-party architectures",
        "",
        f"Command: `.venv/bin/python bench/sweep.py` ({meta['when']}, {provenance.describe(meta)}, "
        f"{', '.join(f'{k} {v}' for k, v in meta['versions'].items())}).",
        "",
        f"**{len(passed)} of {len(exportable)} exportable models pass every check**; "
        f"{len(results) - len(exportable)} more are listed below as not exportable by torch itself. "
        f"Module calls: {sum(r.get('calls_passed', 0) for r in exportable)} of "
        f"{sum(r.get('calls', 0) for r in exportable)} pass; "
        f"{sum(len(r.get('refused', [])) for r in exportable)} refused with the export pass the file names; "
        f"{sum(len(r.get('no_nodes', [])) for r in exportable)} ran and left no node.",
        "",
        "Columns: *tagged* every node has a tag of the table; *table* entries name real paths and classes; "
        "*checker* onnx full_check; *validate* `hiertag validate`; *ORT* outputs identical to torch's file; "
        "*stripped* the file without hiertag's entries is torch's; *flag off* HIERTAG=0 writes torch's bytes; "
        "*calls* module calls passing the boundary check and extraction (or refused with a recorded reason).",
        "",
        "| model | family | nodes | modules | tagged | table | checker | validate | ORT | stripped | flag off "
        "| calls | refused | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in exportable:
        if "nodes" not in r:
            lines.append(f"| {r['model']} | {r.get('family', '')} | | | | | | | | | | FAIL | | "
                         f"{r.get('seconds', '')} |")
            continue
        lines.append(
            f"| {r['model']} | {r['family']} | {r['nodes']} | {r['modules']} | {_mark(r['tagged'])} | "
            f"{_mark(r['table'])} | {_mark(r['checker'])} | {_mark(r['validate'])} | {_mark(r['runtime'])} | "
            f"{_mark(r['stripped'])} | {_mark(r['flag_off'])} | {r['calls_passed']}/{r['calls']} | "
            f"{len(r['refused'])} | {r['seconds']} |")
    failing = [r for r in exportable if not r.get("passed")]
    if failing:
        lines += ["", "## Failures", ""]
        for r in failing:
            for failure in r.get("failures", []) or ["a file check failed (see the table)"]:
                lines.append(f"- {r['model']}: {failure}")
    refused = [(r["model"], line) for r in exportable for line in r.get("refused", [])]
    if refused:
        lines += ["", "## Modules refused with the rewrite the file records", ""]
        lines += [f"- {model}: `{line}`" for model, line in refused]
    lines += ["", "## Not exportable by torch (not counted)", ""]
    lines += [f"- {r['model']}: {r['error']}" for r in results if not r.get("exportable")] or ["- none"]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", help="comma list (default: every sweep model); zoo:NAME for a bundled one")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--timeout", type=int, default=600, help="seconds per model")
    parser.add_argument("--build", default=os.environ.get("HIERTAG_NATIVE_DIR"),
                        help="folder holding libhiertag.so and hiertag (default: the hiertag package's own)")
    parser.add_argument("--worker", nargs=2, metavar=("MODEL", "OUT_JSON"), help=argparse.SUPPRESS)
    parser.add_argument("--plain", nargs=2, metavar=("MODEL", "OUT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.plain:
        return plain(*options.plain)
    if options.worker:
        return worker(*options.worker, options.build)
    from hiertag import zoo
    from hiertag.zoo import sweep_models
    names = options.models.split(",") if options.models else list(sweep_models.MODELS)
    unknown = [n for n in names if n not in sweep_models.MODELS and not (n.startswith("zoo:") and n[4:] in zoo.ALL)]
    if unknown:
        sys.exit(f"sweep: unknown model {', '.join(unknown)} (sweep models: {', '.join(sweep_models.MODELS)}; "
                 f"or zoo:NAME)")
    # The binaries the workers load (--build's, else hiertag's own: build/ in a checkout, made
    # from the checkout first; an installed package's), named by their hashes.
    import hiertag
    native = Path(options.build) if options.build else Path(hiertag.library_path()).parent
    problem = provenance.build_what_loads(native)
    if problem:
        sys.exit(f"sweep: {problem}")
    meta = {"when": time.strftime("%Y-%m-%d"), **provenance.state(directory=native), "versions": versions(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    results = []
    for name in names:
        result = run_one(name, options.timeout, options.build)
        status = ("not exportable by torch" if not result.get("exportable")
                  else "pass" if result.get("passed") else "FAIL")
        print(f"{name}: {status} ({result.get('calls_passed', 0)}/{result.get('calls', 0)} module calls, "
              f"{result.get('seconds', '?')} s)", flush=True)
        results.append(result)
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sweep.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")
    (out / "sweep.md").write_text(render(results, meta))
    exportable = [r for r in results if r.get("exportable")]
    print(f"{sum(r.get('passed', False) for r in exportable)}/{len(exportable)} exportable models pass "
          f"({len(results) - len(exportable)} not exportable by torch); report: {out / 'sweep.md'}")
    return 0 if all(r.get("passed") for r in exportable) else 1


if __name__ == "__main__":
    sys.exit(main())
