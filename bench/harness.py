"""The benchmark: plain export, hiertag and legacy HTP on the suite of
bench/suite.py, and the scaling of hiertag's C++ passes.

usage: .venv/bin/python bench/harness.py [--models a,b,...] [--runs N] [--out DIR] [--no-scaling]
       .venv/bin/python bench/harness.py --render [--out DIR]   (the report again from DIR/results.json)
       (scripts/bench.sh sets up, builds and runs it with the defaults)

For every model, N rounds; each round exports once per method, each export in
a fresh process (bench/export_once.py), the order of the methods rotating
from round to round. The first round's files are scored in a separate process
(bench/score.py); later rounds' files are compared byte for byte with the
first. Then build/hiertag_pass_scaling runs once (Google Benchmark), measured,
tabulated and plotted as bench/pass_scaling_report.py does (CPU time).
What runs from build/ is first brought up to date with the checkout
(provenance.build_targets), so the commit the report names is the one measured.
Writes to DIR (default bench/results): results.json (every measurement,
machine and versions), results.md (the report), export_time.png and
pass_scaling.png. Exits 1 when a measurement failed (the report says which)."""

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PYTHON = sys.executable
METHODS = ("plain", "hiertag", "legacy")

import pass_scaling_report  # noqa: E402  (measures, tabulates and plots the pass scaling)
import provenance  # noqa: E402
import suite  # noqa: E402

MIB = 1024 * 1024


def log(message):
    print(message, file=sys.stderr, flush=True)


def _run_json(command, timeout):
    """Runs a worker; (its JSON result, None) or (None, its last error line)."""
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s"
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        return None, (lines[-1] if lines else f"exit status {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1]), None


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def machine(state=None):
    """The CPU, memory, OS, package versions, date, commit and binaries: `state`,
    the provenance.state() a measurement took when it started (a commit or a build
    made while it ran is not what ran); read now when not given."""
    def first(path, prefix):
        try:
            with open(path) as file:
                return next((line.split(":", 1)[1].strip() for line in file if line.startswith(prefix)), None)
        except OSError:
            return None
    versions = provenance.versions("torch", "transformers", "onnx", "onnxruntime", "numpy")
    cpu, python = versions.pop("cpu"), versions.pop("python")  # the report names them on their own
    os_name = None
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        pass
    memory_kib = first("/proc/meminfo", "MemTotal")
    return {"cpu": cpu,
            "cores": os.cpu_count(),
            "memory_gib": round(int(memory_kib.split()[0]) / MIB, 1) if memory_kib else None,
            "os": os_name, "kernel": platform.release(), "python": python,
            "versions": versions, **(provenance.state() if state is None else state),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")}


def benchmark_model(name, runs, scratch, failures):
    """Every run of every method on one model, then the scores of the first files."""
    kept = {method: scratch / f"{name}.{method}.onnx" for method in METHODS}
    records = {method: [] for method in METHODS}
    hashes = {method: [] for method in METHODS}
    for round_index in range(runs):
        shift = round_index % len(METHODS)
        for method in METHODS[shift:] + METHODS[:shift]:
            path = kept[method] if round_index == 0 else scratch / f"{name}.{method}.again.onnx"
            result, error = _run_json([PYTHON, str(BENCH / "export_once.py"), method, name, str(path)], 3600)
            if error:
                failures.append(f"{name} {method} round {round_index + 1}: {error}")
                log(f"  {method:8s} FAILED: {error}")
                continue
            hashes[method].append(sha256(path))
            if path != kept[method]:
                path.unlink()
            records[method].append(result)
            log(f"  {method:8s} {result['seconds']:7.2f} s  peak RSS {result['peak_rss_bytes'] / MIB:7.0f} MiB")
    scores = None
    if all(path.exists() for path in kept.values()):
        log("  scoring")
        scores, error = _run_json([PYTHON, str(BENCH / "score.py"), name] + [str(kept[m]) for m in METHODS], 3600)
        if error:
            failures.append(f"{name} scoring: {error}")
            log(f"  scoring FAILED: {error}")
    for path in kept.values():
        path.unlink(missing_ok=True)
    return {"runs": records, "identical_files": {m: len(set(h)) == 1 for m, h in hashes.items() if h},
            "scores": scores, "summary": summarize(records)}


def summarize(records):
    summary = {}
    for method, runs in records.items():
        if not runs:
            continue
        seconds = [r["seconds"] for r in runs]
        peaks = [r["peak_rss_bytes"] for r in runs if r["peak_rss_bytes"] is not None]
        summary[method] = {"median_s": statistics.median(seconds), "min_s": min(seconds), "max_s": max(seconds),
                           "peak_rss_mib": max(peaks) / MIB if peaks else None,
                           "export_rss_growth_mib": max(r["peak_rss_bytes"] - r["rss_before_bytes"]
                                                        for r in runs) / MIB if peaks else None}
        works = [r["hiertag_work_ms"] for r in runs if r["hiertag_work_ms"] is not None]
        if works:
            summary[method]["hiertag_work_ms"] = statistics.median(works)
        fallbacks = [r["root_fallback"] for r in runs if r["root_fallback"] is not None]
        if fallbacks:
            summary[method]["root_fallback"] = fallbacks[0]
    if "plain" in summary and "hiertag" in summary:
        summary["hiertag_over_plain"] = summary["hiertag"]["median_s"] / summary["plain"]["median_s"]
        summary["hiertag_work_share"] = summary["hiertag"]["hiertag_work_ms"] / 1000 / summary["plain"]["median_s"]
    if "legacy" in summary and "hiertag" in summary:
        summary["legacy_over_hiertag"] = summary["legacy"]["median_s"] / summary["hiertag"]["median_s"]
    return summary


def pass_scaling(only, failures):
    log("pass scaling (build/hiertag_pass_scaling)")
    try:
        rows, _ = pass_scaling_report.measure(1, only or ".")
    except pass_scaling_report.BenchmarkFailed as error:
        failures.append(f"pass scaling: {error}")
        return []
    return rows


def plot_export_times(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n, r in results.items() if r["summary"]]
    figure, axes = plt.subplots(figsize=(10, 4.8))
    width = 0.27
    colors = {"plain": "#9e9e9e", "hiertag": "#1f77b4", "legacy": "#d62728"}
    for offset, method in enumerate(METHODS):
        xs, medians, low, high = [], [], [], []
        for index, name in enumerate(names):
            found = results[name]["summary"].get(method)
            if found:
                xs.append(index + (offset - 1) * width)
                medians.append(found["median_s"])
                low.append(found["median_s"] - found["min_s"])
                high.append(found["max_s"] - found["median_s"])
        axes.bar(xs, medians, width, yerr=[low, high], capsize=3, label=method, color=colors[method])
    axes.set_xticks(range(len(names)), names)
    axes.set_ylabel("export wall time, s (median, min-max)")
    axes.set_title("torch.onnx.export(..., dynamo=False): plain, hiertag, legacy HTP")
    axes.legend()
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _percent(part, whole):
    return f"{100 * part / whole:.1f} %" if whole else "n/a"


def _seconds(summary, method):
    found = summary.get(method)
    return f"{found['median_s']:.2f} ({found['min_s']:.2f}-{found['max_s']:.2f})" if found else "failed"


def _mib(summary, method):
    found = summary.get(method)
    return f"{found['peak_rss_mib']:.0f}" if found and found["peak_rss_mib"] is not None else "n/a"


def summary_lines(results):
    """The report's opening statement: what the tables show, over all scored models."""
    scored = {n: r for n, r in results.items() if r["scores"] and {"plain", "hiertag", "legacy"} <= r["summary"].keys()}
    if not scored:
        return []
    ours = [r["scores"]["hiertag"] for r in scored.values()]
    legacy = [r["scores"]["legacy"] for r in scored.values()]
    ratios = [r["summary"]["hiertag_over_plain"] for r in scored.values()]
    shares = [r["summary"]["hiertag_work_share"] for r in scored.values()]
    speedups = [r["summary"]["legacy_over_hiertag"] for r in scored.values()]
    spreads = [(m["max_s"] - m["min_s"]) / m["median_s"] for r in scored.values()
               for m in (r["summary"][method] for method in METHODS)]
    fallback = [r["summary"]["legacy"]["root_fallback"] / r["scores"]["legacy"]["nodes"] for r in scored.values()]
    full = all(o["tagged"] == o["nodes"] for o in ours)
    return [
        "## Summary",
        "",
        f"Over {len(scored)} models ({', '.join(scored)}):",
        "",
        f"- **Tags.** hiertag tags {'every' if full else 'NOT every'} node of every model, "
        f"{sum(o['contaminated'] for o in ours)} contaminated across layers, and "
        f"{sum(o['boundary_passed'] for o in ours)} of {sum(o['boundary_checked'] for o in ours)} modules pass "
        f"the boundary check. Legacy HTP: {100 * min(fallback):.0f}-{100 * max(fallback):.0f} % of the nodes "
        f"on the root by its fallback, {sum(o['contaminated'] for o in legacy)} contaminated, "
        f"{sum(o['boundary_passed'] for o in legacy)} of {sum(o['boundary_checked'] for o in legacy)} modules pass.",
        f"- **Overhead against plain export.** hiertag's own work is {100 * min(shares):.2f}-"
        f"{100 * max(shares):.2f} % of the plain export (issue 17 asks for <= 0.5 % on every model). "
        "The wall-clock ratio of the medians "
        f"is {statistics.median(ratios):.3f} over the models (from {min(ratios):.3f} to {max(ratios):.3f}), "
        f"while identical exports of one method spread by a median {100 * statistics.median(spreads):.0f} % "
        "of their median (max - min) on this machine.",
        f"- **Speed against legacy HTP.** legacy takes {min(speedups):.2f}x to {max(speedups):.2f}x hiertag's "
        f"export time (median {statistics.median(speedups):.2f}x).",
        "",
    ]


def write_markdown(report, path):
    machine_info, results = report["machine"], report["models"]
    lines = [
        "# hiertag benchmark",
        "",
        f"Command: `{report['command']}` ({report['runs']} round{'s' if report['runs'] != 1 else ''} per model, "
        "every export in a fresh process,",
        "the order of the methods rotating per round; took "
        f"{report['minutes']:.0f} min). Definitions and method: README, section Benchmark.",
        "",
        f"Machine: {machine_info['cpu']}, {machine_info['cores']} cores, {machine_info['memory_gib']} GiB, "
        f"{machine_info['os']} (kernel {machine_info['kernel']}), Python {machine_info['python']}; "
        + ", ".join(f"{k} {v}" for k, v in machine_info["versions"].items())
        + f"; hiertag {provenance.describe(machine_info)}; {machine_info['date']}.",
        "",
    ] + summary_lines(results) + [
        "## Export time and memory",
        "",
        "Wall time of `torch.onnx.export` in seconds, median (min-max); ratios of the medians. "
        "*hiertag work* is the time hiertag's own code took inside the tagged export (HIERTAG_REPORT), "
        "as a share of the plain export: the overhead measure that the machine's timing noise does not touch. "
        "Peak RSS: the process's peak resident memory during the export, in MiB (the model already built).",
        "",
        "| model | plain s | hiertag s | legacy s | hiertag / plain | hiertag work | legacy / hiertag "
        "| peak RSS MiB plain / hiertag / legacy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        summary = result["summary"]
        ratio = f"{summary['hiertag_over_plain']:.3f}" if "hiertag_over_plain" in summary else "n/a"
        work = (f"{summary['hiertag']['hiertag_work_ms']:.0f} ms ({100 * summary['hiertag_work_share']:.2f} %)"
                if "hiertag_work_share" in summary else "n/a")
        speedup = f"{summary['legacy_over_hiertag']:.2f}x" if "legacy_over_hiertag" in summary else "n/a"
        lines.append(f"| {name} | {_seconds(summary, 'plain')} | {_seconds(summary, 'hiertag')} | "
                     f"{_seconds(summary, 'legacy')} | {ratio} | {work} | {speedup} | "
                     f"{_mib(summary, 'plain')} / {_mib(summary, 'hiertag')} / {_mib(summary, 'legacy')} |")
    lines += [
        "",
        "![export time per model](export_time.png)",
        "",
        "## Tags",
        "",
        "Coverage: nodes with a tag / all nodes (legacy reaches 100 % by construction: its fallback puts "
        "every untagged node on the root, counted in *root fallback*). Contaminated: nodes whose ONNX name "
        "lies in block N of a container (`/encoder/layer.1/...`) but whose tag names block M. Boundaries: "
        "modules passing the module-boundary check / modules checked (every module owning a node, called "
        "through `__call__`). Identical files: every round wrote the same bytes.",
        "",
        "| model | nodes | coverage hiertag / legacy | root fallback hiertag / legacy "
        "| contaminated hiertag / legacy | boundaries hiertag / legacy | tags hiertag / legacy "
        "| identical files |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, result in results.items():
        scores, summary = result["scores"], result["summary"]
        if not scores:
            lines.append(f"| {name} | not scored | | | | | | |")
            continue
        ours, legacy = scores["hiertag"], scores["legacy"]
        identical = ", ".join(m for m, same in result["identical_files"].items() if same) or "none"
        lines.append(
            f"| {name} | {scores['plain']['nodes']} | {_percent(ours['tagged'], ours['nodes'])} / "
            f"{_percent(legacy['tagged'], legacy['nodes'])} | "
            f"{summary['hiertag'].get('root_fallback', 'n/a')} / {summary['legacy'].get('root_fallback', 'n/a')} | "
            f"{ours['contaminated']} / {legacy['contaminated']} | "
            f"{ours['boundary_passed']}/{ours['boundary_checked']} / "
            f"{legacy['boundary_passed']}/{legacy['boundary_checked']} | {ours['tags']} / {legacy['tags']} | "
            f"{identical} |")
    if report["pass_scaling"]:
        lines += [
            "",
            "## Pass scaling",
            "",
            "`build/hiertag_pass_scaling` on synthetic graphs with transformer-like scopes (3 to 4 levels). "
            "Peak heap: the most memory the pass held at once (Google Benchmark memory manager). "
            "VisitGraph is the floor of any pass over torch's graph (every node, its scope, its outputs' uses); "
            "its per-node time grows with the graph as torch's nodes outgrow the caches, so *x visit*, a graph pass's "
            "per-node time over the visit's at the same size, separates the pass's own growth from the memory's. "
            "*Growth*: the exponent k of time ~ nodes^k from the size before (1 = linear).",
            "",
        ] + pass_scaling_report.table(report["pass_scaling"])
        lines += ["", "![pass scaling](pass_scaling.png)"]
    if report["failures"]:
        lines += ["", "## Failed measurements", ""] + [f"- {failure}" for failure in report["failures"]]
    path.write_text("\n".join(lines) + "\n")


def render(report, out):
    plot_export_times(report["models"], out / "export_time.png")
    if report["pass_scaling"]:
        pass_scaling_report.plot(report["pass_scaling"], out / "pass_scaling.png")
    write_markdown(report, out / "results.md")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(suite.MODELS),
                        help="comma-separated suite models or zoo:NAME (default: the whole suite)")
    parser.add_argument("--runs", type=int, default=7, help="rounds per model (default 7)")
    parser.add_argument("--out", type=Path, default=BENCH / "results", help="output directory")
    parser.add_argument("--no-scaling", action="store_true", help="skip the pass-scaling benchmark")
    parser.add_argument("--scaling-filter", default=None,
                        help="only the pass-scaling benchmarks matching this regex (--benchmark_filter)")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: write results.md and the plots again from DIR/results.json")
    options = parser.parse_args()
    if options.render:
        render(json.loads((options.out / "results.json").read_text()), options.out)
        return
    names = [n for n in options.models.split(",") if n]
    for name in names:
        if not suite.known(name):
            sys.exit(f"harness: unknown model '{name}' (known: {', '.join(suite.MODELS)}, or zoo:NAME)")
    if not names or options.runs < 1:
        sys.exit("harness: give at least one model and --runs of at least 1")
    scaling_target = () if options.no_scaling else (provenance.SCALING_TARGET,)
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS, *scaling_target)  # what machine() names
    if problem:
        sys.exit(f"harness: {problem}")
    options.out.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    # the commit and binaries measured, before anything changes
    machine_info = machine(provenance.state(provenance.EXPORT_BINARIES + scaling_target))
    failures, results = [], {}
    with tempfile.TemporaryDirectory(prefix="hiertag-bench-") as scratch:
        for name in names:
            log(f"{name}: {options.runs} rounds")
            results[name] = benchmark_model(name, options.runs, Path(scratch), failures)
    scaling = [] if options.no_scaling else pass_scaling(options.scaling_filter, failures)
    report = {"command": " ".join(["bench/harness.py"] + sys.argv[1:]), "runs": options.runs,
              "minutes": (time.monotonic() - start) / 60, "machine": machine_info, "models": results,
              "pass_scaling": scaling, "failures": failures}
    (options.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    render(report, options.out)
    log(f"wrote {options.out}/results.md, results.json and the plots")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
