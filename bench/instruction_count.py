"""Deterministic export overhead: instructions counted by valgrind (callgrind).

Wall-clock and even CPU time of one export vary by tens of percent on a shared
2-core machine, too much to resolve a 2 % overhead. Instruction counts do not:
this runs bench/one_export.py four times under callgrind (build the 6-layer
BERT only; build and export plainly, twice; build and export with HIERTAG=1),
two at a time, each with PYTHONHASHSEED=0, and reports

    export overhead = (tagged - baseline) / (plain - baseline) - 1

where baseline removes interpreter start, imports and model construction, and
the two plain runs' difference: how far two identical exports' counts lie
apart, the floor below which an overhead is not resolved.
Writes DIR/instruction-count.json and DIR/instruction-count.md, naming the
commit that ran and whether the tree was clean (build/ is brought up to date
with the checkout first). Takes about 10 minutes; needs valgrind (Debian's
package of that name).

usage: .venv/bin/python bench/instruction_count.py [--out bench/results]"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import harness
import provenance

HERE = Path(__file__).resolve().parent
NAME = "instruction-count"
MODES = ("none", "plain", "tagged", "plain again")


def count_instructions(mode, out_dir):
    run = mode.split()[0]  # "plain again" runs as "plain"
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.{mode.replace(' ', '-')}",
               sys.executable, str(HERE / "one_export.py"), run]
    # One hash seed: dict and set order, and so the work done, the same in every run.
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": "0"})
    found = re.search(r"Collected : (\d+)", result.stderr)
    if result.returncode != 0 or not found:
        lines = result.stderr.strip().splitlines()
        raise RuntimeError(f"instruction_count: the {mode} run under valgrind failed: "
                           f"{lines[-1] if lines else result.returncode}")
    return int(found.group(1))


def exports(counts):
    """(plain, tagged, plain again): each export's instructions, its run's less *none*'s."""
    return tuple(counts[mode] - counts["none"] for mode in ("plain", "tagged", "plain again"))


def render(results, out):
    counts = results["counts"]
    plain, tagged, again = exports(counts)
    lines = [
        "# Export overhead in instructions",
        "",
        provenance.ran(results),
        "",
        "The 6-layer BERT of `bench/export_overhead.py` (hidden 384, sequence 128), exported by "
        "`bench/one_export.py` under valgrind's callgrind, one thread: *none* builds the model and exports "
        "nothing (interpreter, imports, the model), *plain* exports it with the plugin loaded and `HIERTAG=0` "
        "(twice), *tagged* with `HIERTAG=1`; every run with `PYTHONHASHSEED=0`. The export's instructions are a "
        "run's less *none*'s. Instruction counts do not move with the machine's load, as wall time does; the two "
        "plain runs' difference is how far identical exports still lie apart, below which an overhead is not "
        "resolved.",
        "",
        "| run | instructions |",
        "|---|---:|",
        *(f"| {mode} | {counts[mode]:,} |" for mode in MODES),
        f"| plain export | {plain:,} |",
        f"| tagged export | {tagged:,} |",
        "",
        f"**tagged / plain: {tagged / plain:.4f}** (hiertag's overhead {100 * (tagged / plain - 1):+.2f} %); "
        f"the second plain export against the first: {again / plain:.4f} ({100 * (again / plain - 1):+.2f} %).",
        "",
        "Reproduce:",
        "",
        "```bash",
        results["command"],
        "```",
        "",
    ]
    (out / f"{NAME}.md").write_text("\n".join(lines))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=HERE / "results")
    options = parser.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("instruction_count: valgrind is not installed (Debian: apt-get install valgrind)")
    problem = provenance.build_targets(*provenance.EXPORT_TARGETS)  # what ran is what the commit names
    if problem:
        sys.exit(f"instruction_count: {problem}")
    state = provenance.state()  # before the run: a commit or a build made during it is not what ran
    started = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as out_dir, ThreadPoolExecutor(max_workers=2) as pool:
            counts = dict(zip(MODES, pool.map(lambda mode: count_instructions(mode, out_dir), MODES), strict=True))
    except RuntimeError as error:
        sys.exit(str(error))
    results = {**state, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": harness.machine(state),
               "command": ".venv/bin/python bench/instruction_count.py"
               + provenance.out_option(options.out),
               "seconds": time.perf_counter() - started, "counts": counts}
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / f"{NAME}.json").write_text(json.dumps(results, indent=1) + "\n")
    render(results, options.out)
    plain, tagged, _ = exports(counts)
    print(f"tagged/plain instruction ratio: {tagged / plain:.4f} (overhead {100 * (tagged / plain - 1):+.2f} %); "
          f"wrote {options.out / (NAME + '.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
