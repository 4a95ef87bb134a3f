"""Where Python's full garbage collections fall in one export: the deep
decoder of bench/deep_decoder.py exported once per fresh process, plain and
tagged, with and without gc.collect() just before, printing each export's
full (generation 2) collections, their seconds, and for the tagged one
HIERTAG_REPORT's set-up part.

    .venv/bin/python bench/gc_in_export.py [--layers 200]

A process that built a model can be near its next full collection; the
Python objects hiertag's set-up makes (a forward wrapper per module) can tip
it into running during the export. The README's HIERTAG_REPORT row cites
this."""

import argparse
import gc
import io
import os
import re
import subprocess
import sys
import time
from contextlib import redirect_stderr
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def worker(layers, method, collect):
    import torch

    import hiertag
    sys.path.insert(0, str(ROOT / "bench"))
    import deep_decoder
    if method == "hiertag":
        torch.ops.load_library(hiertag.library_path())
    model, args = deep_decoder.build(layers)
    if collect:
        gc.collect()
    os.environ.update(HIERTAG="1" if method == "hiertag" else "0", HIERTAG_REPORT="1")
    full, started = [], {}

    def watch(phase, info):
        if info["generation"] == 2:
            if phase == "start":
                started["at"] = time.perf_counter()
            else:
                full.append(time.perf_counter() - started["at"])
    gc.callbacks.append(watch)
    err = io.StringIO()
    with redirect_stderr(err):
        torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=hiertag.OPSET)
    gc.callbacks.remove(watch)
    setup = re.search(r"set-up ([0-9.]+)", err.getvalue())
    print(f"{method:8s} {'gc.collect() first' if collect else 'as built':18s} full collections {len(full)}, "
          f"{sum(full):.3f} s" + (f"; hiertag set-up {setup.group(1)} ms" if setup else ""))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=200)
    parser.add_argument("--worker", nargs=2, metavar=("METHOD", "COLLECT"), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.layers, options.worker[0], options.worker[1] == "1")
        return 0
    for method in ("plain", "hiertag"):
        for collect in ("0", "1"):
            subprocess.run([sys.executable, __file__, "--layers", str(options.layers), "--worker", method, collect],
                           check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
