"""One export of the 6-layer BERT of bench/export_overhead.py, for counting
instructions under valgrind (bench/instruction_count.py).

usage: one_export.py none|plain|tagged   (none: build the model, export nothing)"""

import os
import sys
import tempfile
import warnings

import torch

import hiertag
from export_overhead import build_bert
from hiertag import OPSET


def main():
    mode = sys.argv[1]
    torch.ops.load_library(hiertag.library_path())
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    model, args = build_bert()
    if mode == "none":
        return
    os.environ["HIERTAG"] = "1" if mode == "tagged" else "0"
    with tempfile.TemporaryDirectory() as directory:
        torch.onnx.export(model, args, os.path.join(directory, "bert.onnx"), dynamo=False, opset_version=OPSET)


if __name__ == "__main__":
    main()
