"""Export every bundled model with HIERTAG=1 HIERTAG_REPORT=1 and print, per
model, how many nodes each tagging rule tagged and the op types of the nodes
no recorded scope tagged (the measurement behind symbolic/README.md).

usage: .venv/bin/python scripts/tagging_report.py [MODEL...]"""

import io
import os
import sys
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.models import zoo  # noqa: E402


def main():
    torch.ops.load_library(str(ROOT / "build" / "libhiertag.so"))
    os.environ.update(HIERTAG="1", HIERTAG_REPORT="1")
    warnings.simplefilter("ignore")
    for name in sys.argv[1:] or zoo.ALL:
        model, args = zoo.ALL[name]()
        print(f"{name}:", file=sys.stderr, flush=True)
        torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=17)


if __name__ == "__main__":
    main()
