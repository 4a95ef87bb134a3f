"""Paired benchmark: tagged (HIERTAG=1) vs plain (HIERTAG=0) export time of a
6-layer BERT (hidden 384, 6 heads, sequence 128, random weights).

Runs in one process with the plugin loaded, alternating plain and tagged
exports to a file (the order flips every pair, the garbage collector runs before
each export) after two warm-ups of each, and prints every pair's ratio and the
median. One export varies by +-5 % on a 2-core machine, so use many pairs.

usage: .venv/bin/python bench/export_overhead.py [PAIRS]"""

import gc
import os
import tempfile
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def build_bert():
    from transformers import BertConfig, BertModel
    torch.manual_seed(0)
    config = BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=6,
                        intermediate_size=1536, max_position_embeddings=512)
    model = BertModel(config).eval()
    object.__setattr__(model.config, "use_cache", None)  # see tests/models/zoo.py
    ids = torch.randint(3, 30522, (1, 128), generator=torch.Generator().manual_seed(1))
    return model, (ids, {"attention_mask": torch.ones_like(ids)})


def export_seconds(model, args, flag, path):
    os.environ["HIERTAG"] = flag
    gc.collect()
    start = time.perf_counter()
    torch.onnx.export(model, args, path, dynamo=False, opset_version=17)
    return time.perf_counter() - start


def main():
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    torch.ops.load_library(str(ROOT / "build" / "libhiertag.so"))
    warnings.simplefilter("ignore")
    model, args = build_bert()
    path = os.path.join(tempfile.mkdtemp(prefix="hiertag-bench-"), "bert.onnx")
    for flag in ("0", "1", "0", "1"):
        export_seconds(model, args, flag, path)
    ratios = []
    for pair in range(pairs):
        order = ("0", "1") if pair % 2 == 0 else ("1", "0")
        times = {flag: export_seconds(model, args, flag, path) for flag in order}
        ratios.append(times["1"] / times["0"])
        print(f"pair {pair}: plain {times['0']:.3f} s  tagged {times['1']:.3f} s  ratio {ratios[-1]:.4f}")
    print(f"median tagged/plain ratio over {pairs} pairs: {statistics.median(ratios):.4f}")


if __name__ == "__main__":
    main()
