"""Export every bundled model with HIERTAG=1 HIERTAG_REPORT=1 and print, per
model, how many nodes each tagging rule tagged and the op types of the nodes
no recorded scope tagged (the measurement behind README "What gets tagged, and when": no
conversion loses a scope, so no symbolic function is registered).

usage: .venv/bin/python bench/tagging_report.py [MODEL...]"""

import argparse
import io
import os
import sys
import warnings

import torch

import hiertag
from hiertag import OPSET, zoo


def main():
    parser = argparse.ArgumentParser(prog="tagging_report.py", description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="*", metavar="MODEL", help="bundled models (default: all)")
    names = parser.parse_args().models or list(zoo.ALL)
    unknown = [name for name in names if name not in zoo.ALL]
    if unknown:
        print(f"tagging_report.py: unknown model(s) {', '.join(unknown)} (one of {', '.join(zoo.ALL)})",
              file=sys.stderr)
        sys.exit(2)
    torch.ops.load_library(hiertag.library_path())
    os.environ.update(HIERTAG="1", HIERTAG_REPORT="1")
    warnings.simplefilter("ignore")
    for name in names:
        model, args = zoo.ALL[name]()
        print(f"{name}:", file=sys.stderr, flush=True)
        torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=OPSET)


if __name__ == "__main__":
    main()
