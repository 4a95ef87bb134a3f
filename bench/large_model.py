"""A model over 2 GiB through every command that reads or writes a tagged file:
time and peak memory of each, beside the tagged export's own.

The model (LargeTable) is a 600,000 x 1024 float32 embedding (2.46 GB of
weights, which torch writes as external data) and a small head. It is exported
tagged into a temporary folder; then each command runs in a fresh process, and
its wall time and peak resident set (GNU time's, /usr/bin/time) are
printed, with the peak as a multiple of the model file's graph bytes (the
.onnx without its data) and of the weights.

    .venv/bin/python bench/large_model.py [--json] [--keep DIR]

Needs about 8 GB of free disk and 6 GB of memory; downloads nothing."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1024, 16)

    def forward(self, x):
        return self.proj(x).relu()


class LargeTable(nn.Module):
    """600,000 x 1024 float32 embeddings: 2.46 GB of weights."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(600_000, 1024)
        self.head = Head()

    def forward(self, ids):
        return self.head(self.table(ids))


def example_ids():
    return torch.tensor([[1, 5, 599_999]])


def export(path):
    """Exports LargeTable, seeded, tagged, to `path` (its weights beside it)."""
    import hiertag
    from hiertag import OPSET
    torch.ops.load_library(hiertag.library_path())
    torch.manual_seed(0)
    model = LargeTable().eval()
    with hiertag.tagging():
        torch.onnx.export(model, (example_ids(),), str(path), dynamo=False, opset_version=OPSET)


def measured(command, cwd):
    """(seconds, peak RSS in bytes) of `command` run in a fresh process; raises
    if it fails. GNU time measures it: a child forked from this process (torch
    imported) would start its high-water mark at this process's size."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as figures:
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", figures.name, *map(str, command)], cwd=cwd,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, command))} failed: {done.stderr.strip()}")
        return seconds, int(figures.read().split()[-1]) * 1024


def run(folder):
    python = sys.executable
    hiertag = [python, "-m", "hiertag"]
    model = folder / "large.onnx"
    export_seconds, export_rss = measured([python, __file__, "--export-to", str(model)], folder)
    import onnx
    stripped = folder / "stripped.onnx"
    from hiertag import checks
    onnx.save(checks.strip_tags(onnx.load(str(model), load_external_data=False)), str(stripped))
    graph_bytes = model.stat().st_size
    weights = sum(path.stat().st_size for path in folder.iterdir() if path.suffix != ".onnx")
    rows = [{"command": "export (torch.onnx.export, HIERTAG=1)", "seconds": export_seconds, "peak_rss": export_rss}]
    commands = [
        ("validate", [*hiertag, "validate", model]),
        ("tree", [*hiertag, "tree", model, "--depth", "2"]),
        ("extract (the head, data inline)", [*hiertag, "extract", model, "--module", "/LargeTable/Head",
                                             "-o", folder / "head.onnx"]),
        ("extract (the table, data copied)", [*hiertag, "extract", model, "--module", "/LargeTable",
                                              "--external-data", "copy", "-o", folder / "whole.onnx"]),
        ("explorer", [*hiertag, "explorer", model, "-o", folder / "explorer.onnx"]),
        ("carry (onto the stripped copy)", [*hiertag, "carry", model, stripped, "-o", folder / "carried.onnx"]),
    ]
    for name, command in commands:
        seconds, rss = measured([str(part) for part in command], folder)
        rows.append({"command": name, "seconds": seconds, "peak_rss": rss})
        for written in folder.glob("*.onnx*"):
            if written.name.split(".onnx")[0] in ("head", "whole", "explorer", "carried"):
                written.unlink()
    return {"graph_bytes": graph_bytes, "weight_bytes": weights, "rows": rows}


def render(report):
    lines = [f"model: LargeTable, graph {report['graph_bytes'] / 1e3:,.0f} kB, weights "
             f"{report['weight_bytes'] / 1e9:.2f} GB (external data)",
             f"{'command':<36} {'seconds':>8} {'peak RSS MB':>12} {'x weights':>10}"]
    for row in report["rows"]:
        lines.append(f"{row['command']:<36} {row['seconds']:>8.1f} {row['peak_rss'] / 1e6:>12,.0f} "
                     f"{row['peak_rss'] / report['weight_bytes']:>10.2f}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR (kept) instead of a temporary folder")
    parser.add_argument("--export-to", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.export_to:
        export(Path(options.export_to))
        return 0
    if options.keep:
        Path(options.keep).mkdir(parents=True, exist_ok=True)
        report = run(Path(options.keep).resolve())
    else:
        with tempfile.TemporaryDirectory(prefix="hiertag-large-") as folder:
            report = run(Path(folder))
    print(json.dumps(report) if options.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
