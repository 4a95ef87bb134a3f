"""The passes' per-node cost against the bare graph visit, at 1k to 1M nodes.

usage: .venv/bin/python bench/pass_scaling_report.py [--repetitions N] [--out DIR]

Runs build/hiertag_pass_scaling (Google Benchmark: AssignHierarchyTags,
RecordCseSharing's bookkeeping around CSE, RecordRewrites around a pass that
changes nothing and one that cancels a Transpose pair per layer, and VisitGraph,
a walk that only touches every node, its scope and its outputs' uses) with N
repetitions, takes the median CPU time of each (the passes are single-threaded;
CPU time is what a busy machine disturbs least), and writes
DIR/pass_scaling.md and pass_scaling.json: per pass and size the nodes, the
time, ns per node, the growth exponent from the size before (1 = linear) and
the ratio to the visit at the same size (issue 17's target: within 3x at 1M).
The benchmark is first brought up to date with the checkout (`cmake --build build
--target hiertag_pass_scaling`; build/ configured by scripts/build.sh), so the
commit the report names is the one measured.
Exit status 1 when the benchmark fails.

The benchmark (bench/harness.py) measures, tabulates and plots the pass scaling
with this module's measure, table and plot."""

import argparse
import json
import math
import platform
import subprocess
import sys
import time
from pathlib import Path

import provenance  # bench/ is this script's folder

ROOT = Path(__file__).resolve().parents[1]
PASSES = ("AssignHierarchyTags", "RecordCseSharing", "RecordRewritesUnchanged", "RecordRewritesChanged",
          "PlanTaggedModel", "VisitGraph")
# The passes that walk torch's graph, held against the bare visit (PlanTaggedModel reads bytes).
GRAPH_WALKING = ("AssignHierarchyTags", "RecordCseSharing", "RecordRewritesUnchanged", "RecordRewritesChanged")
UNIT_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


class BenchmarkFailed(RuntimeError):
    """build/hiertag_pass_scaling exited with an error (the message: one line)."""


def measure(repetitions, only=None):
    """Runs the benchmark (`only`: a --benchmark_filter, default the graph
    passes and the visit): its rows, {pass, size, nodes, cpu_ms, ns_per_node,
    peak_heap_bytes}, the median CPU time of the repetitions, and Google
    Benchmark's context. BenchmarkFailed when it fails."""
    binary = ROOT / "build" / provenance.SCALING_TARGET
    only = only or f"BM_({'|'.join(GRAPH_WALKING + ('VisitGraph',))})/"
    done = subprocess.run([str(binary), "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
                           "--benchmark_report_aggregates_only=true", f"--benchmark_filter={only}"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise BenchmarkFailed(f"the benchmark failed (exit {done.returncode}): {done.stderr.strip()[-300:]}")
    report = json.loads(done.stdout)
    rows = []
    for entry in report["benchmarks"]:
        # One repetition gives the run itself, several their median.
        if entry.get("aggregate_name", "median" if repetitions == 1 else None) != "median":
            continue
        benchmark, _, size = entry["run_name"].partition("/")
        nodes = int(entry.get("nodes") or size)
        ms = entry["cpu_time"] * UNIT_MS[entry["time_unit"]]
        rows.append({"pass": benchmark.removeprefix("BM_"), "size": int(size), "nodes": nodes, "cpu_ms": ms,
                     "ns_per_node": ms * 1e6 / nodes, "peak_heap_bytes": entry.get("max_bytes_used")})
    return rows, report["context"]


def table(rows):
    """The Markdown table of `rows`: per pass and size the time, ns per node,
    the growth exponent from the size before and the ratio to the visit."""
    # Rows measured before the benchmark's CPU time was taken hold wall time as "ms".
    key, heading = ("cpu_ms", "CPU ms") if all("cpu_ms" in row for row in rows) else ("ms", "time ms")
    visit = {row["size"]: row["ns_per_node"] for row in rows if row["pass"] == "VisitGraph"}
    lines = [f"| pass | nodes | {heading} | ns per node | growth | x visit | peak heap (+ mapped) bytes per node |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    previous = {}
    for row in sorted(rows, key=lambda r: (PASSES.index(r["pass"]) if r["pass"] in PASSES else len(PASSES),
                                           r["pass"], r["size"])):
        before = previous.get(row["pass"])
        growth = (f"{math.log(row[key] / before[key]) / math.log(row['nodes'] / before['nodes']):.2f}"
                  if before else "-")
        previous[row["pass"]] = row
        ratio = (f"{row['ns_per_node'] / visit[row['size']]:.1f}"
                 if row["pass"] in GRAPH_WALKING and row["size"] in visit else "-")
        heap = f"{row['peak_heap_bytes'] / row['nodes']:.0f}" if row["peak_heap_bytes"] else "-"
        lines.append(f"| {row['pass']} | {row['nodes']:,} | {row[key]:.1f} | {row['ns_per_node']:.0f} | "
                     f"{growth} | {ratio} | {heap} |")
    return lines


def plot(rows, path):
    """Time and peak heap per node against the graph's size, a line per pass."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, (time_axes, memory_axes) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in sorted({r["pass"] for r in rows}):
        mine = sorted((r for r in rows if r["pass"] == name), key=lambda r: r["nodes"])
        nodes = [r["nodes"] for r in mine]
        time_axes.plot(nodes, [r["ns_per_node"] for r in mine], marker="o", label=name)
        if all(r["peak_heap_bytes"] is not None for r in mine):
            memory_axes.plot(nodes, [r["peak_heap_bytes"] / r["nodes"] for r in mine], marker="o", label=name)
    for axes, label in ((time_axes, "time per node, ns"), (memory_axes, "peak heap (+ mapped) per node, bytes")):
        axes.set_xscale("log")
        axes.set_xlabel("graph nodes")
        axes.set_ylabel(label)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("hiertag passes on synthetic graphs (flat per-node lines = linear scaling)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def markdown(rows, context, repetitions, seconds, state):
    lines = ["# Pass scaling", "",
             f"Command: `.venv/bin/python bench/pass_scaling_report.py --repetitions {repetitions}` "
             f"({time.strftime('%Y-%m-%d')}, {context.get('num_cpus')} CPUs at {context.get('mhz_per_cpu')} MHz, "
             f"{platform.platform()}; {seconds:.0f} s), {provenance.describe(state)}. "
             f"Median CPU time of {repetitions} repetitions.",
             "",
             "Synthetic graphs with transformer-like scopes 3 to 4 levels deep (`bench/pass_scaling.cpp`). "
             "*x visit*: the pass's time per node over VisitGraph's at the same size (VisitGraph touches every "
             "node, its scope and its outputs' uses: the floor of any pass over torch's graph). *Growth*: k in "
             "time ~ nodes^k from the size before. RecordCseSharing is the bookkeeping around torch's CSE "
             "(the pass itself is torch's and is not run here). RecordRewrites observes a pass that changes "
             "nothing (*Unchanged*: most of the export's observed passes, most of the time) and one that cancels a "
             "Transpose pair per layer (*Changed*): the observer's own cost, the pass being a stand-in.",
             ""] + table(rows)
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    options = parser.parse_args()
    problem = provenance.build_targets(provenance.SCALING_TARGET)  # from the checkout state names
    if problem:
        sys.exit(f"pass_scaling_report: {problem}")
    state = provenance.state((provenance.SCALING_TARGET,))  # the binary that runs, as built
    start = time.monotonic()
    try:
        rows, context = measure(options.repetitions)
    except BenchmarkFailed as error:
        sys.exit(f"pass_scaling_report: {error}")
    seconds = time.monotonic() - start
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "pass_scaling.json").write_text(
        json.dumps({"repetitions": options.repetitions, **state, "context": context, "rows": rows}, indent=1) + "\n")
    (options.out / "pass_scaling.md").write_text(markdown(rows, context, options.repetitions, seconds, state))
    print((options.out / "pass_scaling.md").read_text())


if __name__ == "__main__":
    main()
