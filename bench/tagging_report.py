"""Export every bundled model with HIERTAG=1 HIERTAG_REPORT=1 and print, per
model, how many nodes each tagging rule tagged and the op types of the nodes
no recorded scope tagged (the measurement behind README "What gets tagged, and when": no
conversion loses a scope, so no symbolic function is registered).

usage: .venv/bin/python bench/tagging_report.py [MODEL...]"""

import io
import os
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
import hiertag
from hiertag import OPSET, zoo


def main():
    torch.ops.load_library(hiertag.library_path())
    os.environ.update(HIERTAG="1", HIERTAG_REPORT="1")
    warnings.simplefilter("ignore")
    for name in sys.argv[1:] or zoo.ALL:
        model, args = zoo.ALL[name]()
        print(f"{name}:", file=sys.stderr, flush=True)
        torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=OPSET)


if __name__ == "__main__":
    main()
