"""Paired benchmark: tagged (HIERTAG=1) vs plain (HIERTAG=0) export time of a
6-layer BERT (hidden 384, 6 heads, sequence 128, random weights).

Runs in one process with the plugin loaded, alternating plain and tagged
exports to a file (the order flips every pair, the garbage collector runs before
each export) after two warm-ups of each, and prints every pair's ratio and the
median. One export varies by +-5 % on a 2-core machine, so use many pairs.
It also prints the direct measure, which that noise does not touch: the time
hiertag's own work took in each tagged export (HIERTAG_REPORT), against the
median plain export.

usage: .venv/bin/python bench/export_overhead.py [PAIRS]"""

import contextlib
import gc
import io
import os
import re
import statistics
import sys
import tempfile
import time
import warnings

import torch

import hiertag
from hiertag import OPSET
from hiertag.models import prepare_for_torchscript_export


def build_bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                        intermediate_size=1536, max_position_embeddings=512)
    model = prepare_for_torchscript_export(BertModel(config).eval())
    ids = torch.randint(3, 30522, (1, 128), generator=torch.Generator().manual_seed(1))
    return model, (ids, {"attention_mask": torch.ones_like(ids)})


HIERTAG_WORK = re.compile(r"hiertag work ([0-9.]+) ms(?: \([^)]*\))?, writing ([0-9.]+) ms")


def export_seconds(model, args, flag, path, work=None):
    """Wall time of one export; appends (work ms, writing ms) to `work` when tagged."""
    os.environ.update(HIERTAG=flag, HIERTAG_REPORT="1")
    gc.collect()
    report = io.StringIO()
    with contextlib.redirect_stderr(report):
        start = time.perf_counter()
        torch.onnx.export(model, args, path, dynamo=False, opset_version=OPSET)
        seconds = time.perf_counter() - start
    found = HIERTAG_WORK.search(report.getvalue())
    if work is not None and found:
        work.append((float(found.group(1)), float(found.group(2))))
    return seconds


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    torch.ops.load_library(hiertag.library_path())
    warnings.simplefilter("ignore")
    model, args = build_bert()
    path = os.path.join(tempfile.mkdtemp(prefix="hiertag-bench-"), "bert.onnx")
    for flag in ("0", "1", "0", "1"):
        export_seconds(model, args, flag, path)
    ratios, plain_seconds, work = [], [], []
    for pair in range(pairs):
        order = ("0", "1") if pair % 2 == 0 else ("1", "0")
        times = {flag: export_seconds(model, args, flag, path, work) for flag in order}
        ratios.append(times["1"] / times["0"])
        plain_seconds.append(times["0"])
        print(f"pair {pair}: plain {times['0']:.3f} s  tagged {times['1']:.3f} s  ratio {ratios[-1]:.4f}")
    plain_ms = 1000 * statistics.median(plain_seconds)
    work_ms = statistics.median(w for w, _ in work)
    writing_ms = statistics.median(w for _, w in work)
    print(f"median tagged/plain ratio over {pairs} pairs: {statistics.median(ratios):.4f}")
    print(f"median hiertag work per export: {work_ms:.1f} ms ({100 * work_ms / plain_ms:.2f} % of the "
          f"median plain export, {plain_ms:.0f} ms); writing the file: {writing_ms:.1f} ms "
          f"(replaces torch's own write)")


if __name__ == "__main__":
    main()
