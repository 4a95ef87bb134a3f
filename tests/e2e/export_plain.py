"""Exports every zoo model without ever loading hiertag (run in its own process)
so the tests can compare flag-off exports byte for byte."""

import io
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.models import zoo  # noqa: E402

OPSET = 17


def export_bytes(name):
    model, args = zoo.ALL[name]()
    buffer = io.BytesIO()
    torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
    return buffer.getvalue()


if __name__ == "__main__":
    out_dir = Path(sys.argv[1])
    for name in sys.argv[2:]:
        (out_dir / f"{name}.onnx").write_bytes(export_bytes(name))
