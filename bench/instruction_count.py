"""Deterministic export overhead: instructions counted by valgrind (callgrind).

Wall-clock and even CPU time of one export vary by tens of percent on a shared
2-core machine, too much to resolve a 2 % overhead. Instruction counts do not:
this runs bench/one_export.py three times under callgrind (build the 6-layer
BERT only; build and export plainly; build and export with HIERTAG=1), two at a
time, and prints

    export overhead = (tagged - baseline) / (plain - baseline) - 1

where baseline removes interpreter start, imports and model construction.
Takes about 10 minutes.

usage: .venv/bin/python bench/instruction_count.py"""

import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent


def count_instructions(mode, out_dir):
    command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_dir}/callgrind.{mode}",
               sys.executable, str(HERE / "one_export.py"), mode]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    found = re.search(r"Collected : (\d+)", result.stderr)
    if not found:
        sys.exit(f"instruction_count: no count in valgrind's output for {mode}")
    return int(found.group(1))


def main():
    with tempfile.TemporaryDirectory() as out_dir, ThreadPoolExecutor(max_workers=2) as pool:
        counts = dict(zip(("none", "plain", "tagged"),
                          pool.map(lambda mode: count_instructions(mode, out_dir), ("none", "plain", "tagged"))))
    plain = counts["plain"] - counts["none"]
    tagged = counts["tagged"] - counts["none"]
    for mode, count in counts.items():
        print(f"{mode:>7}: {count:>16,} instructions")
    print(f"plain export:  {plain:>16,} instructions")
    print(f"tagged export: {tagged:>16,} instructions")
    print(f"tagged/plain instruction ratio: {tagged / plain:.4f} (overhead {100 * (tagged / plain - 1):+.2f} %)")


if __name__ == "__main__":
    main()
