"""What each command costs on one tagged file: `validate`, `tree`, `extract`
(the largest module below the root, and the whole model), `explorer`, and
`carry` onto the file with its tags stripped, each in a fresh process under GNU
time (/usr/bin/time): wall seconds and peak resident set, also as a multiple of
the file's graph bytes (the .onnx without external data) and of its weights.

    .venv/bin/python bench/tool_costs.py TAGGED.onnx [--json]

Writes the commands' outputs in a temporary folder beside the file, and the
stripped copy beside the file (its external data locations stay valid),
removing both. bench/large_model.py runs it on a model over 2 GiB;
`bench/deep_decoder.py --worker hiertag N OUT` writes deep ones."""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def measured(command, cwd):
    """(seconds, peak RSS in bytes) of `command` run in a fresh process; raises
    if it fails. GNU time measures it: a child forked from a process with torch
    imported would start its high-water mark at that process's size."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as figures:
        start = time.perf_counter()
        done = subprocess.run(["/usr/bin/time", "-f", "%M", "-o", figures.name, *map(str, command)], cwd=cwd,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(map(str, command))} failed: {done.stderr.strip()}")
        return seconds, int(figures.read().split()[-1]) * 1024


def _largest_child(model, hiertag):
    tree = json.loads(subprocess.run([*hiertag, "tree", model, "--json", "--depth", "1"], capture_output=True,
                                     text=True, check=True).stdout)
    children = [module for module in tree["modules"] if module["depth"] == 1]
    return max(children, key=lambda module: module["nodes_total"])["tag"] if children else tree["modules"][0]["tag"]


def command_costs(model):
    """{"graph_bytes", "weight_bytes", "rows": [{"command", "seconds", "peak_rss"}]} for the tagged file `model`."""
    import onnx

    from hiertag import checks
    model = Path(model).resolve()
    hiertag = [sys.executable, "-m", "hiertag"]
    loaded = onnx.load(str(model), load_external_data=False)
    data_files = {entry.value for tensor in loaded.graph.initializer for entry in tensor.external_data
                  if entry.key == "location"}
    weights = sum((model.parent / name).stat().st_size for name in data_files) + sum(
        len(tensor.raw_data) for tensor in loaded.graph.initializer)
    child = _largest_child(model, hiertag)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hiertag-costs-", dir=model.parent) as work:
        work = Path(work)
        # The stripped copy lies beside the file: its external data locations stay valid.
        stripped = model.parent / f".{model.stem}.stripped.onnx"
        onnx.save(checks.strip_tags(loaded), str(stripped))
        del loaded
        try:
            commands = [
                ("validate", [*hiertag, "validate", model]),
                ("tree", [*hiertag, "tree", model]),
                (f"extract {child}", [*hiertag, "extract", model, "--module", child, "-o", work / "child.onnx"]),
                ("extract the whole model", [*hiertag, "extract", model, "--module",
                                             _root(model, hiertag), "-o", work / "whole.onnx"]),
                ("explorer", [*hiertag, "explorer", model, "-o", work / "explorer.onnx"]),
                ("carry onto the stripped file", [*hiertag, "carry", model, stripped, "-o", work / "carried.onnx"]),
            ]
            for name, command in commands:
                seconds, rss = measured(command, work)
                rows.append({"command": name, "seconds": seconds, "peak_rss": rss})
                for written in work.iterdir():
                    written.unlink()
        finally:
            stripped.unlink()
    return {"file": str(model), "graph_bytes": model.stat().st_size, "weight_bytes": weights, "rows": rows}


def _root(model, hiertag):
    tree = json.loads(subprocess.run([*hiertag, "tree", model, "--json", "--depth", "0"], capture_output=True,
                                     text=True, check=True).stdout)
    return tree["modules"][0]["tag"]


def render(report):
    lines = [f"{report['file']}: graph {report['graph_bytes'] / 1e6:,.2f} MB, weights "
             f"{report['weight_bytes'] / 1e6:,.0f} MB",
             f"{'command':<44} {'seconds':>8} {'peak RSS MB':>12} {'x graph':>8} {'x weights':>10}"]
    for row in report["rows"]:
        lines.append(f"{row['command'][:44]:<44} {row['seconds']:>8.2f} {row['peak_rss'] / 1e6:>12,.0f} "
                     f"{row['peak_rss'] / report['graph_bytes']:>8.1f} "
                     f"{row['peak_rss'] / max(report['weight_bytes'], 1):>10.2f}")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", help="a tagged ONNX file")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    options = parser.parse_args()
    report = command_costs(options.model)
    print(json.dumps(report) if options.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
