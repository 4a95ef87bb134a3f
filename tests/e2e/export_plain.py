"""Exports zoo models (or the sweep's) in a process of its own, so the tests can compare
flag-off exports byte for byte between processes with the same history, and
tell the models torch itself cannot export on this release (NAME.error holds
what went wrong, in place of NAME.onnx: tests/e2e/expected_skips.py judges it).

usage: export_plain.py OUT_DIR [--load-plugin] [--dynamo] MODEL...
--load-plugin loads the plugin first (run it with HIERTAG off); --dynamo exports with
torch's dynamo exporter instead, each model to OUT_DIR/NAME/model.onnx (with its
external data beside it).

NAME.error is JSON: {"stage": "build" or "export", "error": one line, "text": the
error's type and whole message, "origin": the module whose code raised it}. A
model that cannot be built (a bug in the zoo, a transformers release missing a
class) fails at "build", before torch's exporter is called; "origin" is the
module of the innermost frame of the error the export raised (of the error it
was raised from, when torch wraps it), so a model's own code failing under the
exporter tells itself apart from torch's exporter refusing it."""

import contextlib
import functools
import io
import json
import sys
from pathlib import Path

import torch

import hiertag
from hiertag import OPSET, zoo
from hiertag.checks import dynamo_arguments
from hiertag.zoo import sweep_models


def build(name):
    return zoo.ALL[name]() if name in zoo.ALL else sweep_models.MODELS[name][1]()


def export_bytes(model, args):
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
    return buffer.getvalue()


def export_dynamo(model, args, path):
    positional, keywords = dynamo_arguments(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
        torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True)


def one_line(error):
    """The error in one line: its type and first line, and the symbolic function the
    TorchScript exporter was in (its last line, "(Occurred when translating X)").
    The dynamo exporter's error ends in a summary of the error it wraps:
    "<class 'ValueError'>: ..."."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    summary = [line for line in lines if line.startswith("<class '")]
    if summary:
        return summary[0]
    where = f" ... {lines[-1]}" if len(lines) > 1 and lines[-1].startswith("(Occurred when translating") else ""
    return f"{type(error).__name__}: {lines[0] if lines else ''}{where}"


def origin(error):
    """The module of the innermost frame of the error the chain began with."""
    while error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
        error = error.__cause__ or error.__context__
    frames = []
    traceback = error.__traceback__
    while traceback is not None:
        frames.append(traceback.tb_frame)
        traceback = traceback.tb_next
    return frames[-1].f_globals.get("__name__", "?") if frames else "?"


def attempt(build, export):
    """export(*build()): (its result, None), or (None, the failure's record)."""
    stage = "build"
    try:
        model, args = build()
        stage = "export"
        return export(model, args), None
    except Exception as error:
        return None, {"stage": stage, "error": one_line(error), "text": f"{type(error).__name__}: {error}",
                      "origin": origin(error)}


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    names = sys.argv[2:]
    if names and names[0] == "--load-plugin":
        torch.ops.load_library(hiertag.library_path())
        names = names[1:]
    dynamo = bool(names) and names[0] == "--dynamo"
    names = names[1:] if dynamo else names
    for name in names:
        export = functools.partial(export_dynamo, path=out_dir / name / "model.onnx") if dynamo else export_bytes
        exported, failure = attempt(functools.partial(build, name), export)
        if failure is not None:
            (out_dir / f"{name}.error").write_text(json.dumps(failure))
        elif not dynamo:
            (out_dir / f"{name}.onnx").write_bytes(exported)
