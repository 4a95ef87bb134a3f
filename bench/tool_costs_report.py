"""What each command costs at depth, as a committed result: the deep decoder
of bench/deep_decoder.py exported tagged at each depth (its worker, a fresh
process), then bench/tool_costs.py's measurement of `validate`, `tree`,
`extract`, `explorer` and `carry` on that file, each in a fresh process under
GNU time. Writes DIR/tool-costs.json and DIR/tool-costs.md, naming the commit
that ran and whether the tree was clean (build/ is brought up to date with the
checkout first).

    .venv/bin/python bench/tool_costs_report.py [--layers 200,825] [--out bench/results]"""

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
import provenance  # noqa: E402
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
            "graph_bytes": costs["graph_bytes"], "weight_bytes": costs["weight_bytes"], "rows": costs["rows"]}


def render(results, out):
    m = results["machine"]
    lines = [
        "# What the commands cost on a deep decoder",
        "",
        f"Run {results['date']}, {provenance.describe(results)}; {m['cpu']}, {m['cores']} cores; "
        + ", ".join(f"{package} {version}" for package, version in m["versions"].items()) + ".",
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
        rows = [{"command": "export (tagged)", "seconds": depth["export_seconds"],
                 "peak_rss": depth["export_peak_rss"]}, *depth["rows"]]
        for row in rows:
            rss = row["peak_rss"]
            lines.append(f"| {depth['layers']} | {graph / 1e6:,.1f} | {row['command']} | {row['seconds']:,.2f} | "
                         + (f"{rss / 1e6:,.0f} | {rss / graph:,.1f} |" if rss else "- | - |"))
    lines += ["", "Reproduce:", "", "```bash", results["command"], "```", ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="200,825", help="depths, comma separated")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    options = parser.parse_args()
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what the commit names
    if problem:
        sys.exit(f"tool_costs_report: {problem}")
    state = provenance.git_state()  # before the run: a commit made during it is not what ran
    depths = [int(layers) for layers in options.layers.split(",")]
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tool-costs-") as scratch:
        measured = [measure(layers, Path(scratch)) for layers in depths]
    results = {**state, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": harness.machine(),
               "command": ".venv/bin/python bench/tool_costs_report.py --layers " + ",".join(map(str, depths))
               + ("" if options.out.resolve() == (BENCH / "results").resolve() else f" --out {options.out}"),
               "seconds": time.perf_counter() - started, "depths": measured}
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    render(results, options.out)
    print(f"wrote {options.out / (NAME + '.json')} and {options.out / (NAME + '.md')} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
