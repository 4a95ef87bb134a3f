"""hiertag profile: time every module in ONNX Runtime's profiler.

Runs MODEL in ONNX Runtime (CPU) with its profiler on, --warmup runs first
(not counted), then --runs measured runs, and attributes the time of every
node event to the module whose computation the node is. ONNX Runtime profiles
the graph it optimized (--level, default all, as ONNX Runtime runs a model by
default), in which it fused, renamed and added nodes: that graph is saved
(SessionOptions.optimized_model_filepath) and tagged from MODEL by `hiertag
carry`, so every event names a tagged node; carry checks its mapping on the
profiled inputs, and a module call whose boundary the optimizer removed or
carry cannot establish is declared (marked * in the tree). A node fused across
modules counts for the common ancestor it is tagged with, a node kept for
several modules (hiertag.shared_with) for its own tag: every node's time counts
once, and the module times add up to the total. Time no node of the saved graph accounts
for is reported as unattributed (0 when the saved graph is the one that ran).

Prints the module tree (the call tree, children in the order they run) with
self time (the module's own nodes) and inclusive time (with its descendants),
in milliseconds per run (each node's mean over the measured runs; --median:
its median, which a busy machine's pauses, landing on single runs, do not
move) and as a share of the total node time, then the modules with the most
self time. --json or --csv:
every module, one object or row each. --plot FILE.png: the tree as an icicle
chart (each module as wide as its inclusive time, its children below it).

Inputs are built from the model's graph inputs: integers are ones (a valid
token id and an all-ones mask), floats standard normal (seeded), booleans
true; a dimension the model leaves symbolic is 1, and the output says which.
--input NAME=SPEC sets one (hiertag export's SPEC: int64[1,128]:0..1000,
float32[1,3,224,224], ones[1,128]). Exit status 0; 1 when --plot could not
draw the chart for want of matplotlib (the profile is printed all the same,
and one line on stderr says so); or 2 with one line on stderr (missing,
non-ONNX or untagged file, unknown input, a model ONNX Runtime refuses)."""

import csv
import io
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnxruntime

from hiertag import checks, core, models, verbs
from hiertag.verbs import carry
from hiertag.verbs.carry.placement import common_call

LEVELS = {
    "disabled": onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
KERNEL_SUFFIX = "_kernel_time"


def build_feeds(model, specs):
    """({input: array}, [notes on dimensions set to 1]) for the graph inputs."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    given = {}
    for spec in specs:
        try:
            name, tensor = models.parse_input_spec(spec)
        except models.ModelError as error:
            verbs.fail(str(error))
        given[name] = tensor.numpy()
    unknown = sorted(set(given) - {i.name for i in inputs})
    if unknown:
        verbs.fail(f"--input names no input of the model: {', '.join(unknown)} "
                   f"(inputs: {', '.join(i.name for i in inputs)})")
    return carry.check.generated_inputs(model, given)


def run_profiled(path, feeds, runs, warmup, threads, level, directory):
    """(saved optimized model, [per measured run: {node name: microseconds}])."""
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = LEVELS[level]
    options.optimized_model_filepath = str(Path(directory) / "optimized.onnx")
    options.enable_profiling = True
    options.profile_file_prefix = str(Path(directory) / "profile")
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    try:
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(warmup + runs):
            session.run(None, feeds)
    except Exception as error:  # ONNX Runtime's Fail, InvalidArgument, ...: the model or the inputs
        text = str(error).strip().splitlines()
        verbs.fail(f"{path}: ONNX Runtime: {text[-1] if text else type(error).__name__}")
    events = json.loads(Path(session.end_profiling()).read_text())
    model_runs = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                        if e.get("cat") == "Session" and e.get("name") == "model_run")[warmup:]
    timings = [defaultdict(float) for _ in model_runs]
    for event in events:
        if event.get("cat") != "Node" or not event.get("name", "").endswith(KERNEL_SUFFIX):
            continue
        for index, (start, end) in enumerate(model_runs):
            if start <= event["ts"] <= end:
                timings[index][event["name"][:-len(KERNEL_SUFFIX)]] += event["dur"]
                break
    # ONNX Runtime's saved graph names the initializers it kept as MODEL does:
    # their external data lies beside MODEL, not beside the saved graph.
    return verbs.load_model(options.optimized_model_filepath, data_directory=Path(path).parent), timings


def attribute(tagged, timings, statistic):
    """Node times (ms per run: the mean, or median, over the measured runs) to
    the tags of the carried optimized model."""
    tag_of = defaultdict(set)
    for node in checks.walk_nodes(tagged.graph):
        tag_of[node.name].add(checks.node_props(node)[core.TAG_KEY])
    names = sorted({name for timing in timings for name in timing})
    summarize = np.median if statistic == "median" else np.mean
    per_node = {name: float(summarize([timing.get(name, 0.0) for timing in timings])) / 1000 for name in names}
    calls = core.CallTable(tagged)
    self_time, unattributed = defaultdict(float), {}
    node_count = defaultdict(int)
    for name, milliseconds in per_node.items():
        tags = tag_of.get(name)
        if not tags:
            unattributed[name] = milliseconds
            continue
        # A name the saved graph gives several nodes: their common ancestor.
        tag = common_call(calls, [(t, None) for t in tags])[0] if len(tags) > 1 else next(iter(tags))
        self_time[tag] += milliseconds
        node_count[tag] += 1
    return self_time, node_count, unattributed


def module_rows(table, self_time, node_count, total):
    """One row per module of the table, in tree order (children in table order)."""
    children = defaultdict(list)
    for tag in table:
        children[checks.parent_tag(tag)].append(tag)
    rows = []

    def visit(tag, depth):
        inclusive = self_time.get(tag, 0.0)
        position = len(rows)
        rows.append(None)
        for child in children.get(tag, []):
            inclusive += visit(child, depth + 1)
        entry = table[tag]
        rows[position] = {"module": tag, "path": entry.get("path", ""), "class": entry.get("class", ""),
                          "depth": depth, "nodes": node_count.get(tag, 0),
                          "self_ms": self_time.get(tag, 0.0), "inclusive_ms": inclusive,
                          "self_share": self_time.get(tag, 0.0) / total if total else 0.0,
                          "inclusive_share": inclusive / total if total else 0.0}
        return inclusive

    for root in children[""]:
        visit(root, 0)
    return rows


def plot_icicle(rows, title, out):
    """Each module a bar as wide as its inclusive time, its children below it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    depth = max(row["depth"] for row in rows) + 1
    total = max(rows[0]["inclusive_ms"], 1e-12) if rows else 1.0
    figure, axes = plt.subplots(figsize=(14, 0.45 * depth + 1.2))
    colours = plt.get_cmap("viridis")
    start_of = {}
    next_start = defaultdict(float)
    for row in rows:
        parent = checks.parent_tag(row["module"])
        start = start_of[parent] + next_start[parent] if parent in start_of else 0.0
        start_of[row["module"]] = start
        next_start[parent] += row["inclusive_ms"]
        if row["inclusive_ms"] <= 0:
            continue
        axes.barh(-row["depth"], row["inclusive_ms"], left=start, height=0.9, edgecolor="white", linewidth=0.5,
                  color=colours(min(row["self_share"] * 4, 1.0) * 0.8 + 0.1))
        label = row["module"].rsplit("/", 1)[-1]
        if row["inclusive_ms"] / total > 0.04:
            axes.text(start + row["inclusive_ms"] / 2, -row["depth"], label, ha="center", va="center",
                      fontsize=7, clip_on=True, color="black" if row["self_share"] > 0.15 else "white")
    axes.set_yticks([-d for d in range(depth)], [f"depth {d}" for d in range(depth)])
    axes.set_xlim(0, total)
    axes.set_xlabel("inclusive time per run (ms); colour: share of self time")
    axes.set_title(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(out, dpi=120, format="png")
    plt.close(figure)


def profile(path, specs=(), runs=10, warmup=2, threads=0, level="all", statistic="mean"):
    """The profile of a tagged model as a dict (what --json prints)."""
    path = Path(path)
    original, table = verbs.load_tagged(path)
    feeds, notes = build_feeds(original, specs)
    with tempfile.TemporaryDirectory() as directory:
        optimized, timings = run_profiled(path, feeds, runs, warmup, threads, level, directory)
    # The mapping is carry's, checked on the profiled inputs: a call whose
    # boundary the optimizer removed or carry cannot establish is declared.
    try:
        tagged, carried = carry.carry(original, optimized, f"onnxruntime {onnxruntime.__version__} ({level})", feeds,
                                      in_place=True)  # the optimized model is ours
    except carry.CarryError as error:
        verbs.fail(f"{path}: {error}")
    self_time, node_count, unattributed = attribute(tagged, timings, statistic)
    declared = {checks.key_tag(table, entry["call"]) for entry in carried["declared"]}
    total = sum(self_time.values()) + sum(unattributed.values())
    return {
        "model": str(path), "runs": runs, "warmup": warmup, "threads": threads, "level": level, "statistic": statistic,
        "onnxruntime": onnxruntime.__version__, "dims_set_to_1": notes,
        "nodes": len(list(checks.walk_nodes(original.graph))), "optimized_nodes": carried["nodes"],
        "carry": {key: carried[key] for key in ("exact", "shared", "span", "rule")},
        "calls": carried["calls"], "declared": carried["declared"],
        "total_ms": total, "attributed_ms": sum(self_time.values()),
        "unattributed_ms": sum(unattributed.values()),
        "unattributed_share": sum(unattributed.values()) / total if total else 0.0,
        "unattributed_nodes": sorted(unattributed),
        "modules": [{**row, "declared": row["module"] in declared}
                    for row in module_rows(table, self_time, node_count, total)],
    }


def text_report(result, top):
    lines = [f"{result['model']}: {result['runs']} runs ({result['warmup']} warm-up), ONNX Runtime "
             f"{result['onnxruntime']} at level {result['level']}"
             f"{', intra-op threads ' + str(result['threads']) if result['threads'] else ''}: "
             f"{result['total_ms']:.3f} ms of node time per run ({result['statistic']}) "
             f"in {result['optimized_nodes']} nodes "
             f"(the model has {result['nodes']}; carried {result['carry']['exact']} exact, "
             f"{result['carry']['shared']} shared, {result['carry']['span']} span, {result['carry']['rule']} by rule)",
             f"attributed to modules: {100 * (1 - result['unattributed_share']):.1f} % "
             f"(unattributed {result['unattributed_ms']:.3f} ms"
             f"{': ' + ', '.join(result['unattributed_nodes']) if result['unattributed_nodes'] else ''})",
             f"module calls: {result['calls']['verified']} verified {result['calls']['method']}; "
             f"{result['calls']['declared_by_tool']} declared as fused or removed by the optimizer, "
             f"{result['calls']['declared_by_carry']} as not established by carry"
             + (" (marked *: their nodes' time counts, their boundary is not theirs alone)"
                if result["declared"] else "")]
    if result["dims_set_to_1"]:
        lines.append(f"symbolic dimensions set to 1 (give --input to choose): {', '.join(result['dims_set_to_1'])}")
    rows = result["modules"]
    width = max(len("  " * row["depth"] + row["module"].rsplit("/", 1)[-1]) + 2 * row["declared"] for row in rows)
    lines.append(f"{'module':<{width}}  {'self ms':>9}  {'self %':>6}  {'incl ms':>9}  {'incl %':>6}  nodes")
    for row in rows:
        name = "  " * row["depth"] + row["module"].rsplit("/", 1)[-1] + (" *" if row["declared"] else "")
        lines.append(f"{name:<{width}}  {row['self_ms']:9.3f}  {100 * row['self_share']:6.1f}  "
                     f"{row['inclusive_ms']:9.3f}  {100 * row['inclusive_share']:6.1f}  {row['nodes']:5d}")
    slowest = sorted((row for row in rows if row["self_ms"] > 0), key=lambda row: -row["self_ms"])[:top]
    lines.append("slowest modules (self time):")
    for rank, row in enumerate(slowest, 1):
        lines.append(f"  {rank}. {row['module']}  {row['self_ms']:.3f} ms  {100 * row['self_share']:.1f} %")
    return lines


def csv_report(result):
    buffer = io.StringIO()
    fields = ["module", "path", "class", "depth", "nodes", "self_ms", "inclusive_ms", "self_share", "inclusive_share"]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for row in result["modules"]:
        writer.writerow({key: row[key] for key in fields})
    return buffer.getvalue()


def arguments(parser):
    parser.add_argument("model", metavar="MODEL.onnx", help="a model tagged by hiertag")
    parser.add_argument("--input", action="append", default=[], metavar="NAME=SPEC", help="an input (repeatable)")
    parser.add_argument("--runs", type=int, default=10, help="measured runs (default 10)")
    parser.add_argument("--warmup", type=int, default=2, help="runs before measuring (default 2)")
    parser.add_argument("--threads", type=int, default=0, help="intra-op threads (default: ONNX Runtime's)")
    parser.add_argument("--level", choices=list(LEVELS), default="all", help="graph optimizations (default all)")
    parser.add_argument("--top", type=int, default=8, help="modules in the summary (default 8)")
    parser.add_argument("--median", action="store_true",
                        help="each node's median over the runs instead of its mean (a busy machine's pauses "
                             "land on single runs)")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--json", action="store_true", help="print every module as one JSON object")
    output.add_argument("--csv", action="store_true", help="print every module as CSV")
    parser.add_argument("--plot", metavar="FILE.png", help="write the module tree as an icicle chart")


def run(options):
    verbs.refuse_overwriting([options.plot], models=[options.model])
    if options.runs < 1 or options.warmup < 0 or options.threads < 0 or options.top < 0:
        verbs.fail("--runs must be at least 1; --warmup, --threads and --top must not be negative")
    if options.plot and not Path(options.plot).resolve().parent.is_dir():
        verbs.fail(f"output directory '{Path(options.plot).parent}' does not exist")
    result = profile(options.model, options.input, options.runs, options.warmup, options.threads, options.level,
                     "median" if options.median else "mean")
    plotted = True
    if options.plot:
        title = (f"{Path(options.model).name}: {result['total_ms']:.3f} ms of node time per run "
                 f"({result['statistic']}) (ONNX Runtime {result['onnxruntime']}, level {result['level']})")
        try:
            verbs.write_atomically(options.plot, lambda path: plot_icicle(result["modules"], title, path))
        except ModuleNotFoundError as error:
            # The chart is an extra: the profile measured is printed all the same.
            if (error.name or "").partition(".")[0] != "matplotlib":
                raise
            plotted = False
    if options.json:
        print(json.dumps(result))
    elif options.csv:
        sys.stdout.write(csv_report(result))
    else:
        print("\n".join(text_report(result, options.top)))
    if not plotted:
        sys.stdout.flush()
        print(f"hiertag profile: --plot needs matplotlib (pip install matplotlib): the profile is printed, "
              f"'{options.plot}' not written", file=sys.stderr)
        return 1
    return 0


VERB = verbs.Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
