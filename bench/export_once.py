"""One measured export in a fresh process: the harness's worker.

usage: .venv/bin/python bench/export_once.py plain|hiertag|legacy MODEL OUT.onnx

MODEL is a suite model (bench/suite.py: bert-12, ...) or zoo:NAME. Prints one
JSON object on stdout:
  seconds            wall time of the export call, writing the file included
                     (legacy: its projection, fill and rewrite of the file too)
  rss_before_bytes   resident set just before the export (model built)
  peak_rss_bytes     the process's peak resident set during the export
                     (Linux: the peak is reset just before it, /proc/self/clear_refs)
  hiertag_work_ms    hiertag's own work in the export (HIERTAG_REPORT), hiertag only
  hiertag_work_parts its parts as the report line breaks it down: {part: ms}
  hiertag_pass_parts the passes part broken down (snapshot, check, matching,
                     classify: RewriteTimes in record_rewrites.h): {part: ms}
  root_fallback      nodes that only a fallback put on the root module
                     (hiertag: its "root" rule; legacy: its fallback tag)

Methods: `plain` never loads the plugin (what a user without hiertag runs);
`hiertag` loads build/libhiertag.so with HIERTAG=1; `legacy` runs the baseline
of bench/legacy_htp.py. Before the measured export every method exports a
small MLP, so one-time imports of the exporter are not counted (legacy warms
up with a plain export: a legacy export leaves the process damaged)."""

import contextlib
import gc
import io
import json
import os
import re
import sys
import time
import warnings

import onnx  # noqa: F401  (legacy uses it in its timed part; import it outside for all)
import torch

import hiertag
import suite
from hiertag import OPSET

METHODS = ("plain", "hiertag", "legacy")
_REPORT = re.compile(r"root (\d+);.*hiertag work ([0-9.]+) ms(?: \(([^)]*)\))?")
_PART = re.compile(r"(?:^|, )([a-z-]+) ([0-9.]+)")
_PASS_PARTS = re.compile(r"; observed passes: ([^\n]*)")


def _status_bytes(field):
    """A /proc/self/status memory field in bytes (None off Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def _warm_up(method):
    tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).eval()
    os.environ["HIERTAG"] = "1" if method == "hiertag" else "0"
    torch.onnx.export(tiny, (torch.randn(1, 8),), io.BytesIO(), dynamo=False, opset_version=OPSET)


def measure(method, model_name, path):
    return measure_built(method, model_name, lambda: suite.build(model_name), path)


def measure_built(method, model_name, build, path):
    """measure() on the (model, args) that build() returns: for models that
    are not in the suite (bench/deep_decoder.py). Call it once per process."""
    if method not in METHODS:
        raise ValueError(f"unknown method '{method}' (known: {', '.join(METHODS)})")
    warnings.simplefilter("ignore")
    if method == "hiertag":
        torch.ops.load_library(hiertag.library_path())
    model, args = build()
    _warm_up(method)
    if method == "legacy":
        import legacy_htp
        export = legacy_htp.export
    else:
        def export(model, args, path, opset_version):
            torch.onnx.export(model, args, path, dynamo=False, opset_version=opset_version)
    os.environ.update(HIERTAG="1" if method == "hiertag" else "0", HIERTAG_REPORT="1")
    gc.collect()
    rss_before = _status_bytes("VmRSS")
    peak_known = _reset_peak_rss()
    report = io.StringIO()
    with contextlib.redirect_stderr(report):
        start = time.perf_counter()
        result = export(model, args, path, opset_version=OPSET)
        seconds = time.perf_counter() - start
    measured = {"method": method, "model": model_name, "seconds": seconds,
                "rss_before_bytes": rss_before,
                "peak_rss_bytes": _status_bytes("VmHWM") if peak_known else None,
                "hiertag_work_ms": None, "root_fallback": None}
    if method == "hiertag":
        found = _REPORT.search(report.getvalue())
        if not found:
            raise RuntimeError("the hiertag export printed no HIERTAG_REPORT line: was the plugin loaded?")
        measured["root_fallback"] = int(found.group(1))
        measured["hiertag_work_ms"] = float(found.group(2))
        # Its parts (set-up, inlining, passes, cse, tagging, entries, plan), in ms.
        measured["hiertag_work_parts"] = {part: float(ms) for part, ms in _PART.findall(found.group(3) or "")}
        passes = _PASS_PARTS.search(report.getvalue())
        measured["hiertag_pass_parts"] = {part: float(ms) for part, ms in _PART.findall(passes.group(1))} \
            if passes else {}
    elif method == "legacy":
        measured["root_fallback"] = result["root_fallback"]
    return measured


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: export_once.py plain|hiertag|legacy MODEL OUT.onnx")
    try:
        print(json.dumps(measure(*sys.argv[1:])))
    except (KeyError, ValueError) as error:
        sys.exit(f"export_once: {error.args[0] if error.args else error}")


if __name__ == "__main__":
    main()
