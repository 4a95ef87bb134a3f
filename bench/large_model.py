"""A model over 2 GiB through every command that reads or writes a tagged file:
time and peak memory of each, beside the tagged export's own.

The model (LargeTable) is a 600,000 x 1024 float32 embedding (2.46 GB of
weights, which torch writes as external data) and a small head. It is exported
tagged into a temporary folder, in a fresh process; then bench/tool_costs.py
runs each command on it in a fresh process: wall time and peak resident set
(GNU time's), also as a multiple of the graph bytes and of the weights.

    .venv/bin/python bench/large_model.py [--json] [--keep DIR]

Needs about 8 GB of free disk and 10 GB of memory (the export peaks near 7.7 GB);
downloads nothing.
bench/tool_costs_report.py runs it for the committed result
(bench/results/tool-costs.md)."""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from torch import nn

import tool_costs

ROOT = Path(__file__).resolve().parent.parent


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(1024, 16)

    def forward(self, x):
        return self.proj(x).relu()


DESCRIPTION = "LargeTable, a 600,000 x 1024 float32 embedding and a Linear head"


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


def run(folder):
    model = folder / "large.onnx"
    export_seconds, export_rss = tool_costs.measured([sys.executable, __file__, "--export-to", model], folder)
    report = tool_costs.command_costs(model)
    report["rows"].insert(0, {"command": "export (torch.onnx.export, HIERTAG=1)", "seconds": export_seconds,
                              "peak_rss": export_rss})
    return report


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
    print(json.dumps(report) if options.json else tool_costs.render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
