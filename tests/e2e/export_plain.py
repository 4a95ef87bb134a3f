"""Exports zoo models (or the sweep's) in a process of its own, so the tests can compare
flag-off exports byte for byte between processes with the same history, and
tell the models torch itself cannot export on this release (NAME.error holds
torch's error, in place of NAME.onnx).

usage: export_plain.py OUT_DIR [--load-plugin] [--dynamo] MODEL...
--load-plugin loads the plugin first (run it with HIERTAG off); --dynamo exports with
torch's dynamo exporter instead, each model to OUT_DIR/NAME/model.onnx (with its
external data beside it)."""

import contextlib
import io
import sys
from pathlib import Path

import torch

import hiertag
from hiertag import OPSET, zoo
from hiertag.checks import dynamo_arguments
from hiertag.zoo import sweep_models


def export_bytes(name):
    model, args = zoo.ALL[name]() if name in zoo.ALL else sweep_models.MODELS[name][1]()
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
    return buffer.getvalue()


def export_dynamo(name, path):
    model, args = zoo.ALL[name]() if name in zoo.ALL else sweep_models.MODELS[name][1]()
    positional, keywords = dynamo_arguments(args)
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
        torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True)


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    names = sys.argv[2:]
    if names and names[0] == "--load-plugin":
        torch.ops.load_library(hiertag.library_path())
        names = names[1:]
    dynamo = bool(names) and names[0] == "--dynamo"
    names = names[1:] if dynamo else names
    for name in names:
        try:
            if dynamo:
                export_dynamo(name, out_dir / name / "model.onnx")
            else:
                exported = export_bytes(name)
        except Exception as error:  # torch cannot export it: its error, in one line
            lines = str(error).strip().splitlines()
            # The dynamo exporter's error ends in a summary: "<class 'ValueError'>: ..."
            summary = [line for line in lines if line.startswith("<class '")]
            line = summary[0] if summary else f"{type(error).__name__}: {lines[-1] if lines else ''}"
            (out_dir / f"{name}.error").write_text(line)
        else:
            if not dynamo:
                (out_dir / f"{name}.onnx").write_bytes(exported)
