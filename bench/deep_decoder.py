"""Scale: a LLaMA-style decoder of many tiny layers, exported plainly and with
hiertag, each export in a fresh process (issue 10, "Scale").

usage: .venv/bin/python bench/deep_decoder.py --layers N[xPAIRS][,N[xPAIRS]...] [--pairs P]
                                              [--out DIR] [--merge] [--timeout S]
       .venv/bin/python bench/deep_decoder.py --render [--out DIR]
       (internal) bench/deep_decoder.py --worker plain|hiertag N OUT.onnx

build/'s plugin, tool and core module are first brought up to date with the checkout
(provenance.build_targets), so the commit each row names is the one that ran.

The model is transformers' LlamaForCausalLM built from a LlamaConfig (CONFIG
below, num_hidden_layers = N) with seeded random weights; hiertag.models
builds it and its inputs (16 token ids and an all-ones attention mask, no
key/value cache), as `hiertag export` does. For every depth, PAIRS pairs (the
N's own xPAIRS, else --pairs, default 1): a plain export (a process that never
loads the plugin) and a tagged one (build/libhiertag.so loaded, HIERTAG=1),
alternating which goes first. Each worker is bench/export_once.py's measurement
(measure_built): the export call's wall time, the peak resident set during the
export (/proc/self/clear_refs, VmHWM) and hiertag's own time (HIERTAG_REPORT).

The first pair's files are scored: ONNX nodes (onnx.load, nested graphs
included) for both, and for the tagged file the nodes lacking the
"hiertag.tag" metadata and `build/hiertag validate --json`. Later pairs'
files are compared byte for byte with the first. Writes DIR/deep-decoder.json
(every measurement, the config, the machine and package versions) and
DIR/deep-decoder.md (DIR: bench/results). --merge keeps the depths already in
DIR/deep-decoder.json that this run does not measure. Exits 1 when an export
or a check failed (the report says which); a worker running longer than
--timeout seconds (default 1800) counts as failed."""

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import provenance  # bench/ is this script's folder
from harness import _run_json, sha256

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
PYTHON = sys.executable
MIB = 1024 * 1024
METHODS = ("plain", "hiertag")
NAME = "deep-decoder"
TAG_KEY = "hierarchy_tag"  # the node tag (README, "What a tagged file holds"; hiertag.core.TAG_KEY)

# Tiny dimensions, so that the graph, not the weights, is what grows with N:
# grouped-query attention (2 query heads, 1 key/value head), RMSNorm, SwiGLU, rotary.
CONFIG = {"vocab_size": 256, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
          "num_key_value_heads": 1, "max_position_embeddings": 64, "use_cache": False}
MODEL_CLASS = "LlamaForCausalLM"


def log(message):
    print(message, file=sys.stderr, flush=True)


def config(layers):
    return dict(CONFIG, num_hidden_layers=layers)


def build(layers):
    """(model, args) of the decoder with `layers` layers, as `hiertag export` builds it."""
    from hiertag import models
    return models.build(MODEL_CLASS, config=config(layers))


# ---------------------------------------------------------------------------
# The worker: one measured export in this (fresh) process


def worker(method, layers, path):
    import export_once
    import hiertag
    # build/ is shared and rebuilt by others: record which plugin this export loaded.
    # libhiertag.so is a loader that seldom changes; the passes are in the
    # libhiertag_python.so beside it, which it loads.
    plugin = Path(hiertag.library_path())
    if plugin.with_name("libhiertag_python.so").exists():
        plugin = plugin.with_name("libhiertag_python.so")
    plugin_file = {"file": plugin.name, "sha256": sha256(plugin),
                   "mtime": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(plugin.stat().st_mtime))}
    result = export_once.measure_built(method, f"{NAME}-{layers}", lambda: build(layers), path)
    result["layers"] = layers
    if method == "hiertag":
        result["plugin"] = plugin_file
    print(json.dumps(result))


# ---------------------------------------------------------------------------
# Scoring a file (no torch needed)


def score(path, tagged):
    import onnx

    from hiertag import checks
    model = onnx.load(str(path), load_external_data=False)
    nodes = [node for graph in checks.walk_graphs(model.graph) for node in graph.node]
    scored = {"nodes": len(nodes), "nested_graphs": sum(1 for _ in checks.walk_graphs(model.graph)) - 1,
              "file_bytes": Path(path).stat().st_size,
              "untagged_nodes": sum(1 for node in nodes if not any(p.key == TAG_KEY for p in node.metadata_props))}
    if tagged:
        from hiertag import tool_path
        done = subprocess.run([tool_path(), "validate", str(path), "--json"], capture_output=True, text=True)
        try:
            verdict = json.loads(done.stdout)
        except json.JSONDecodeError:
            verdict = {"valid": False, "problems": [done.stderr.strip() or f"exit status {done.returncode}"]}
        scored["validate"] = {"exit_status": done.returncode, "valid": bool(verdict.get("valid")),
                              "nodes": verdict.get("nodes"), "modules": verdict.get("modules"),
                              "problems": (verdict.get("problems") or [])[:5]}
    return scored


# ---------------------------------------------------------------------------
# The driver


def _run_worker(method, layers, path, timeout):
    command = [PYTHON, str(Path(__file__).resolve()), "--worker", method, str(layers), str(path)]
    started = time.perf_counter()
    result, error = _run_json(command, timeout)
    if result is not None:
        result["process_seconds"] = time.perf_counter() - started
    return result, error


def measure_depth(layers, pairs, scratch, timeout, failures):
    log(f"{NAME}: {layers} layers, {pairs} pair(s)")
    kept = {method: scratch / f"{NAME}-{layers}.{method}.onnx" for method in METHODS}
    runs = {method: [] for method in METHODS}
    hashes = {method: [] for method in METHODS}
    for pair in range(pairs):
        order = METHODS if pair % 2 == 0 else METHODS[::-1]
        for method in order:
            path = kept[method] if pair == 0 else scratch / f"{NAME}-{layers}.{method}.again.onnx"
            result, error = _run_worker(method, layers, path, timeout)
            if error:
                failures.append(f"{layers} layers, {method}, pair {pair + 1}: {error}")
                log(f"  {method:8s} FAILED: {error}")
                continue
            result["pair"], result["first_in_pair"] = pair + 1, method == order[0]
            hashes[method].append(sha256(path))
            if path != kept[method]:
                path.unlink()
            runs[method].append(result)
            work = f"  hiertag work {result['hiertag_work_ms']:.0f} ms" if result["hiertag_work_ms"] else ""
            log(f"  {method:8s} {result['seconds']:8.2f} s  peak RSS {result['peak_rss_bytes'] / MIB:7.0f} MiB{work}")
    scores = {}
    for method in METHODS:
        if kept[method].exists():
            scores[method] = score(kept[method], tagged=method == "hiertag")
            kept[method].unlink()
    checks = check(scores)
    failures.extend(f"{layers} layers: {problem}" for problem in checks["problems"])
    entry = {"layers": layers, "pairs": pairs, "config": config(layers), "runs": runs, "scores": scores,
             "identical_files": {m: len(set(h)) == 1 for m, h in hashes.items() if h},
             "checks": checks, "summary": summarize(runs)}
    summary = entry["summary"]
    if "hiertag_over_plain" in summary:
        log(f"  nodes {scores.get('plain', {}).get('nodes')}, time ratio {summary['hiertag_over_plain']:.3f}, "
            f"peak RSS ratio {summary['peak_rss_ratio']:.3f}, hiertag work share "
            f"{100 * summary['hiertag_work_share']:.2f} %")
    return entry


def check(scores):
    problems = []
    plain, tagged = scores.get("plain"), scores.get("hiertag")
    if plain and tagged and plain["nodes"] != tagged["nodes"]:
        problems.append(f"node counts differ: plain {plain['nodes']}, tagged {tagged['nodes']}")
    if tagged:
        if tagged["untagged_nodes"]:
            problems.append(f"{tagged['untagged_nodes']} of {tagged['nodes']} nodes of the tagged file lack a tag")
        if not tagged["validate"]["valid"]:
            problems.append(f"hiertag validate: {'; '.join(tagged['validate']['problems']) or 'not valid'}")
    if plain and plain["untagged_nodes"] != plain["nodes"]:
        problems.append("the plain file carries hiertag tags")
    return {"node_counts_equal": bool(plain and tagged and plain["nodes"] == tagged["nodes"]),
            "every_node_tagged": bool(tagged and tagged["untagged_nodes"] == 0),
            "validate_passed": bool(tagged and tagged["validate"]["valid"]), "problems": problems}


def _spread(values):
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def summarize(runs):
    summary = {}
    for method, records in runs.items():
        if not records:
            continue
        summary[method] = {"seconds": _spread([r["seconds"] for r in records]),
                           "peak_rss_mib": _spread([r["peak_rss_bytes"] / MIB for r in records]),
                           "export_rss_growth_mib": _spread([(r["peak_rss_bytes"] - r["rss_before_bytes"]) / MIB
                                                             for r in records])}
        works = [r["hiertag_work_ms"] for r in records if r["hiertag_work_ms"] is not None]
        if works:
            summary[method]["hiertag_work_ms"] = _spread(works)
        for key in ("hiertag_work_parts", "hiertag_pass_parts"):
            parts = [r.get(key) for r in records if r.get(key)]
            if parts:
                summary[method][f"{key}_ms"] = {part: statistics.median(p.get(part, 0.0) for p in parts)
                                                for part in parts[0]}
    if all(m in summary for m in METHODS):
        # per pair: tagged / plain of the same pair, then the median of those
        pairs = {}
        for method in METHODS:
            for r in runs[method]:
                pairs.setdefault(r["pair"], {})[method] = r
        whole = [p for p in pairs.values() if len(p) == 2]
        summary["pair_time_ratios"] = [p["hiertag"]["seconds"] / p["plain"]["seconds"] for p in whole]
        summary["pair_peak_rss_ratios"] = [p["hiertag"]["peak_rss_bytes"] / p["plain"]["peak_rss_bytes"]
                                           for p in whole]
        plain_s = summary["plain"]["seconds"]["median"]
        summary["hiertag_over_plain"] = summary["hiertag"]["seconds"]["median"] / plain_s
        summary["peak_rss_ratio"] = (summary["hiertag"]["peak_rss_mib"]["median"]
                                     / summary["plain"]["peak_rss_mib"]["median"])
        summary["hiertag_work_share"] = summary["hiertag"]["hiertag_work_ms"]["median"] / 1000 / plain_s
    return summary


# ---------------------------------------------------------------------------
# The report


def _fmt_s(spread):
    if spread["n"] == 1:
        return f"{spread['median']:.1f}"
    return f"{spread['median']:.1f} ({spread['min']:.1f}-{spread['max']:.1f})"


def _fmt_ratios(values):
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def _rows_by_build(depths):
    """A line naming each row's build when the rows (merged over runs) come from more than one."""
    builds = {}
    for d in depths:
        build = provenance.describe(d["ran_at"]) if "ran_at" in d else "a build not recorded (an older run)"
        builds.setdefault(build, []).append(str(d["layers"]))
    if len(builds) < 2:
        return []
    return ["Rows from more than one build: "
            + "; ".join(f"{', '.join(layers)} layers at {build}" for build, layers in builds.items()) + ".", ""]


def _parts_table(depths, key, caption, per_node=None):
    """The lines of a table of the hiertag runs' median parts (summary[key]) per depth, with
    the part `per_node` also in µs per node; none when no depth has them."""
    parted = [d for d in depths if d["summary"].get("hiertag", {}).get(key)]
    if not parted:
        return []
    names = list(parted[0]["summary"]["hiertag"][key])
    extra = [f"{per_node} µs per node"] if per_node else []
    lines = ["", caption, "", "| layers | nodes | " + " | ".join(names + extra) + " |",
             "|---:|---:|" + "---:|" * (len(names) + len(extra))]
    for d in parted:
        parts, nodes = d["summary"]["hiertag"][key], d["scores"]["hiertag"]["nodes"]
        cells = [f"{parts.get(n, 0.0):,.0f}" for n in names]
        if per_node:
            cells.append(f"{parts.get(per_node, 0.0) * 1e3 / nodes:.1f}")
        lines.append(f"| {d['layers']} | {nodes:,} | " + " | ".join(cells) + " |")
    return lines


def render(results, out):
    depths = sorted(results["depths"].values(), key=lambda d: d["layers"])
    m = results["machine"]
    lines = [
        "# Scale: a deep decoder of tiny layers, plain export against hiertag",
        "",
        f"Last run {m['date']}, {provenance.describe(m)}; "
        f"{m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB, {m['os']}, Python {m['python']}; "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v) + ".",
        "",
    ] + _rows_by_build(depths) + [
        f"Model: transformers `{MODEL_CLASS}` from `LlamaConfig(**{json.dumps(CONFIG)}, num_hidden_layers=N)`, "
        "seeded random weights, built by `hiertag.models.build` (16 token ids, all-ones attention mask, "
        "no key/value cache). `torch.onnx.export(..., dynamo=False, opset_version=17)`; each export in a fresh "
        "process (`bench/export_once.py`'s measurement): *plain* never loads the plugin, *hiertag* loads "
        "`build/libhiertag.so` with `HIERTAG=1`. Pairs alternate which method goes first. **Time** is the wall "
        "time of the export call (file written); **peak RSS** the process's peak resident set during the export "
        "(reset by `/proc/self/clear_refs` just before it); **hiertag work** hiertag's own time in the export "
        "(`HIERTAG_REPORT`), its **share** of the median plain export. Cells are median (min-max) over the "
        "pairs; ratios are per pair (tagged / plain of the same pair), median (min-max).",
        "",
        "| layers | pairs | ONNX nodes | plain s | hiertag s | time ratio | plain peak RSS MiB | "
        "hiertag peak RSS MiB | peak RSS ratio | hiertag work ms | work share | tagged / validate |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for d in depths:
        s, sc, c = d["summary"], d["scores"], d["checks"]
        if not all(k in s for k in METHODS):
            lines.append(f"| {d['layers']} | {d['pairs']} | {sc.get('plain', {}).get('nodes', '-')} | "
                         + " | ".join(["failed"] * 9) + " |")
            continue
        tagged = sc["hiertag"]
        verdict = (f"{tagged['nodes'] - tagged['untagged_nodes']:,} / {tagged['nodes']:,}, "
                   f"{'valid' if c['validate_passed'] else 'INVALID'}")
        lines.append(
            f"| {d['layers']} | {d['pairs']} | {sc['plain']['nodes']:,} | {_fmt_s(s['plain']['seconds'])} | "
            f"{_fmt_s(s['hiertag']['seconds'])} | {_fmt_ratios(s['pair_time_ratios'])} | "
            f"{s['plain']['peak_rss_mib']['median']:,.0f} | {s['hiertag']['peak_rss_mib']['median']:,.0f} | "
            f"{_fmt_ratios(s['pair_peak_rss_ratios'])} | {s['hiertag']['hiertag_work_ms']['median']:,.0f} | "
            f"{100 * s['hiertag_work_share']:.2f} % | {verdict} |")
    scored = [d for d in depths if "plain" in d["scores"] and "plain" in d["summary"]]
    if len(scored) >= 2:
        lines += ["", "Growth with depth (exponent k of the plain export's time ~ nodes^k between neighbouring "
                      "depths; hiertag's own work per node; the peak resident set above the one before the export; "
                      "file sizes):", "",
                  "| layers | nodes | nodes per layer | plain s | plain µs per node | k | hiertag work µs per node | "
                  "peak RSS growth in the export, plain / hiertag MiB | file MB, plain / tagged |",
                  "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        previous = None
        for d in scored:
            nodes, seconds = d["scores"]["plain"]["nodes"], d["summary"]["plain"]["seconds"]["median"]
            work = d["summary"].get("hiertag", {}).get("hiertag_work_ms")
            exponent = "-"
            if previous:
                exponent = f"{math.log(seconds / previous[1]) / math.log(nodes / previous[0]):.2f}"
            per_node = f"{work['median'] * 1e3 / nodes:.1f}" if work else "-"
            growth = " / ".join(f"{d['summary'][m]['export_rss_growth_mib']['median']:,.0f}" if m in d["summary"]
                                else "-" for m in METHODS)
            sizes = " / ".join(f"{d['scores'][m]['file_bytes'] / 1e6:.1f}" if m in d["scores"] else "-"
                               for m in METHODS)
            lines.append(f"| {d['layers']} | {nodes:,} | {nodes / d['layers']:.1f} | {seconds:.1f} | "
                         f"{seconds * 1e6 / nodes:.0f} | {exponent} | {per_node} | {growth} | {sizes} |")
            previous = (nodes, seconds)
    lines += _parts_table(depths, "hiertag_work_parts_ms",
                          "Where hiertag's own work goes (`HIERTAG_REPORT`'s parts, median ms; *passes*: observing "
                          "torch's graph passes, RecordRewrites):", per_node="passes")
    lines += _parts_table(depths, "hiertag_pass_parts_ms",
                          "The *passes* part broken down (`HIERTAG_REPORT`'s observed passes, median ms: the snapshot "
                          "before each pass, the check after it, and after a pass that changed the graph the matching "
                          "of nodes and the classification; RewriteTimes in record_rewrites.h):")
    plugins = {}
    for d in depths:
        for r in d["runs"].get("hiertag", []):
            if r.get("plugin"):
                plugin = r["plugin"]
                key = (plugin.get("file", "libhiertag.so"), plugin["sha256"], plugin["mtime"])
                plugins.setdefault(key, []).append(d["layers"])
    if plugins:
        lines += ["", "Plugin loaded by the tagged exports (build/ is shared and was rebuilt by others during the "
                      "runs): " + "; ".join(f"`build/{name}` sha256 {sha[:12]}, built {mtime} "
                                            f"(layers {', '.join(map(str, sorted(set(layers))))})"
                                            for (name, sha, mtime), layers in sorted(plugins.items(),
                                                                                     key=lambda i: i[0][2]))
                  + "."]
    failures = results.get("failures") or []
    lines += ["", "Checks: node counts equal between plain and tagged files, every node of the tagged file "
                  f"carries `{TAG_KEY}`, `build/hiertag validate` passes, repeated exports byte-identical: "
              + ("all passed." if not failures else "FAILED: " + "; ".join(failures))]
    lines += ["", "Reproduce (the figures above):", "", "```bash", results["command"], "```", ""]
    if results.get("notes"):
        lines += ["## Notes", "", results["notes"].strip(), ""]
    (out / f"{NAME}.md").write_text("\n".join(lines))


# ---------------------------------------------------------------------------


def parse_layers(text, default_pairs):
    depths = []
    for item in text.split(","):
        layers, _, pairs = item.strip().partition("x")
        if not layers.isdigit() or int(layers) < 1 or (pairs and not pairs.isdigit()):
            raise argparse.ArgumentTypeError(f"bad --layers item '{item}' (N or NxPAIRS)")
        depths.append((int(layers), int(pairs) if pairs else default_pairs))
    return depths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        if len(argv) != 4:
            sys.exit("usage: deep_decoder.py --worker plain|hiertag N OUT.onnx")
        return worker(argv[1], int(argv[2]), argv[3])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", help="depths: N or NxPAIRS, comma separated")
    parser.add_argument("--pairs", type=int, default=1, help="pairs per depth without its own xPAIRS")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--merge", action="store_true", help="keep the other depths of DIR/deep-decoder.json")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds one worker may take")
    parser.add_argument("--render", action="store_true", help="the report again from DIR/deep-decoder.json")
    options = parser.parse_args(argv)
    path = options.out / f"{NAME}.json"
    if options.render:
        render(json.loads(path.read_text()), options.out)
        return 0
    if not options.layers:
        parser.error("--layers is required")
    depths = parse_layers(options.layers, options.pairs)
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what ran_at names
    if problem:
        sys.exit(f"deep_decoder: {problem}")
    options.out.mkdir(parents=True, exist_ok=True)
    import harness
    results = {"depths": {}, "failures": []}
    if options.merge and path.exists():
        results = json.loads(path.read_text())
        results.setdefault("failures", [])
    failures = []
    ran_at = provenance.state()  # before the run: a commit or a build made during it is not what ran
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="deep-decoder-") as scratch:
        for layers, pairs in depths:
            results["failures"] = [f for f in results["failures"] if not f.startswith(f"{layers} layers")]
            results["depths"][str(layers)] = measure_depth(layers, pairs, Path(scratch), options.timeout, failures)
            results["depths"][str(layers)]["ran_at"] = ran_at  # --merge keeps older rows
    results["failures"] += failures
    results["machine"] = harness.machine(ran_at)  # the commit that ran, not the one at the end
    measured = sorted(results["depths"].values(), key=lambda d: d["layers"])
    results["command"] = (".venv/bin/python bench/deep_decoder.py --layers "
                          + ",".join(f"{d['layers']}x{d['pairs']}" for d in measured)
                          + provenance.out_option(options.out))
    results["last_run_seconds"] = time.perf_counter() - started
    path.write_text(json.dumps(results, indent=1) + "\n")
    render(results, options.out)
    log(f"wrote {path} and {options.out / (NAME + '.md')} ({results['last_run_seconds']:.0f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
