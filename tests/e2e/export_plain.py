"""Exports zoo models (or the sweep's) in a process of its own, so the tests can compare
flag-off exports byte for byte between processes with the same history, and
tell the models torch itself cannot export on this release (NAME.error holds
torch's error, in place of NAME.onnx).

usage: export_plain.py OUT_DIR [--load-plugin] MODEL...
--load-plugin loads the plugin first (run it with HIERTAG off)."""

import io
import sys
from pathlib import Path

import torch

import hiertag
from hiertag import OPSET, zoo
from hiertag.zoo import sweep_models


def export_bytes(name):
    model, args = zoo.ALL[name]() if name in zoo.ALL else sweep_models.MODELS[name][1]()
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
    return buffer.getvalue()


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    names = sys.argv[2:]
    if names and names[0] == "--load-plugin":
        torch.ops.load_library(hiertag.library_path())
        names = names[1:]
    for name in names:
        try:
            exported = export_bytes(name)
        except Exception as error:  # torch cannot export it: its error, in one line
            lines = str(error).strip().splitlines()
            (out_dir / f"{name}.error").write_text(f"{type(error).__name__}: {lines[-1] if lines else ''}")
        else:
            (out_dir / f"{name}.onnx").write_bytes(exported)
