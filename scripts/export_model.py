"""Export one bundled model (python/hiertag/zoo/__init__.py) with the plugin loaded.

usage: HIERTAG=1 .venv/bin/python scripts/export_model.py MODEL OUT.onnx
MODEL is one of the zoo's names (bert, gpt2, t5, llama, vit, resnet, clip, sam,
wav2vec2, and the corner-case models)."""

import sys
import warnings

import torch

import hiertag
from hiertag import OPSET, zoo


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in zoo.ALL:
        sys.exit(f"usage: export_model.py MODEL OUT.onnx  (MODEL: {', '.join(zoo.ALL)})")
    torch.ops.load_library(hiertag.library_path())
    model, args = zoo.ALL[sys.argv[1]]()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, sys.argv[2], dynamo=False, opset_version=OPSET)
    print(f"wrote {sys.argv[2]}")


if __name__ == "__main__":
    main()
