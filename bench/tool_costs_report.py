"""What each command costs at depth and past 2 GiB, as a committed result:
the deep decoder of bench/deep_decoder.py exported tagged at each depth (its
worker, a fresh process), and bench/large_model.py's model over 2 GiB (its
weights external), then bench/tool_costs.py's measurement of `validate`,
`tree`, `extract`, `explorer` and `carry` on each file, each in a fresh process
under GNU time. Writes DIR/tool-costs.json and DIR/tool-costs.md, naming the
commit that ran and whether the tree was clean (build/ is brought up to date
with the checkout first). The model over 2 GiB needs about 8 GB of free disk
and 10 GB of memory; --no-large leaves it out.

    .venv/bin/python bench/tool_costs_report.py [--layers 200,825] [--no-large] [--out bench/results]"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
import large_model  # noqa: E402
import provenance  # noqa: E402
import tag_bytes  # noqa: E402
import tool_costs  # noqa: E402

NAME = "tool-costs"


def measure(layers, scratch):
    """One depth: the tagged export's figures and the commands' costs on its file."""
    path = scratch / f"decoder-{layers}.onnx"
    done = subprocess.run([sys.executable, str(BENCH / "deep_decoder.py"), "--worker", "hiertag", str(layers),
                           str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        raise RuntimeError(f"the {layers}-layer export failed: {lines[-1] if lines else done.returncode}")
    export = json.loads(done.stdout.strip().splitlines()[-1])
    costs = tool_costs.command_costs(path)
    return {"layers": layers, "export_seconds": export["seconds"], "export_peak_rss": export["peak_rss_bytes"],
            "graph_bytes": costs["graph_bytes"], "weight_bytes": costs["weight_bytes"], "rows": costs["rows"],
            "entries": tag_bytes.measure(path)}


def measure_large(scratch):
    """The model over 2 GiB: its tagged export's figures and the commands' costs on its file."""
    folder = scratch / "large"
    folder.mkdir()
    report = large_model.run(folder)
    export = report["rows"].pop(0)
    return {"model": large_model.DESCRIPTION, "export_seconds": export["seconds"],
            "export_peak_rss": export["peak_rss"], "graph_bytes": report["graph_bytes"],
            "weight_bytes": report["weight_bytes"], "rows": report["rows"]}


def _rows(measured):
    return [{"command": "export (tagged)", "seconds": measured["export_seconds"],
             "peak_rss": measured["export_peak_rss"]}, *measured["rows"]]


def render(results, out):
    lines = [
        "# What the commands cost at depth and past 2 GiB",
        "",
        provenance.ran(results),
        "",
        "The tagged file of `bench/deep_decoder.py`'s decoder at each depth (its worker, a fresh process), then "
        "each command in a fresh process under GNU time (`bench/tool_costs.py`): wall seconds and peak resident "
        "set, also as a multiple of the file's graph bytes. `extract` takes the largest module below the root; "
        "`carry` goes onto the file with hiertag's entries stripped (`checks.strip_tags`). *Export* is the "
        "tagged export itself (the process's peak resident set).",
        "",
        "| layers | graph MB | command | seconds | peak RSS MB | x graph |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for depth in results["depths"]:
        graph = depth["graph_bytes"]
        for row in _rows(depth):
            rss = row["peak_rss"]
            lines.append(f"| {depth['layers']} | {graph / 1e6:,.1f} | {row['command']} | {row['seconds']:,.2f} | "
                         + (f"{rss / 1e6:,.0f} | {rss / graph:,.1f} |" if rss else "- | - |"))
    lines += [
        "",
        "## What hiertag's entries add to those files",
        "",
        "`bench/tag_bytes.py`'s count over each tagged file: the bytes of each node metadata key (as the "
        "repeated field holds them) and of the model's entries. `hierarchy_tag` is on every node (CONTRACT); "
        "the plain file's size is in `deep-decoder.md`.",
        "",
        "| layers | file MB | key | MB | nodes | share of the file |",
        "|---:|---:|---|---:|---:|---:|",
    ]
    for depth in results["depths"]:
        entries, size = depth["entries"], depth["entries"]["file_bytes"]
        found = [(f"node `{key}`", entry["bytes"], f"{entry['nodes']:,}") for key, entry in
                 entries["node_entries"].items()]
        found += [(f"model `{key}`", value, "-") for key, value in entries["model_entries"].items()]
        found.append(("all of them", sum(value for _, value, _ in found), "-"))
        for key, value, nodes in found:
            lines.append(f"| {depth['layers']} | {size / 1e6:,.1f} | {key} | {value / 1e6:,.2f} | {nodes} | "
                         f"{100 * value / size:.1f} % |")
    large = results.get("large")
    if large:
        lines += [
            "",
            f"## A model over 2 GiB: {large['model']}",
            "",
            f"`bench/large_model.py`'s model: a graph of {large['graph_bytes'] / 1e3:,.1f} kB and "
            f"{large['weight_bytes'] / 1e9:,.2f} GB of weights, which torch writes as external data. The same "
            "commands, measured the same way; memory also as a multiple of the weights (the export holds them, "
            "the commands need not read them in).",
            "",
            "| command | seconds | peak RSS MB | x weights |",
            "|---|---:|---:|---:|",
        ]
        for row in _rows(large):
            lines.append(f"| {row['command']} | {row['seconds']:,.2f} | {row['peak_rss'] / 1e6:,.0f} | "
                         f"{row['peak_rss'] / large['weight_bytes']:,.2f} |")
    lines += ["", "Reproduce:", "", "```bash", results["command"], "```", ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="200,825", help="depths, comma separated")
    parser.add_argument("--no-large", action="store_true", help="leave out the model over 2 GiB")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what the commit names
    if problem:
        sys.exit(f"tool_costs_report: {problem}")
    state = provenance.state()  # before the run: a commit or a build made during it is not what ran
    depths = [int(layers) for layers in options.layers.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tool-costs-") as scratch:
        measured = [measure(layers, Path(scratch)) for layers in depths]
        large = None if options.no_large else measure_large(Path(scratch))
    results = {**state, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": harness.machine(state),
               "command": ".venv/bin/python bench/tool_costs_report.py --layers " + ",".join(map(str, depths))
               + (" --no-large" if options.no_large else "")
               + provenance.out_option(options.out),
               "seconds": time.perf_counter() - started, "depths": measured, "large": large}
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    render(results, options.out)
    print(f"wrote {options.out / (NAME + '.json')} and {options.out / (NAME + '.md')} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
