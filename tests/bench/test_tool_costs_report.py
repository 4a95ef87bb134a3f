"""bench/tool_costs_report.py (issue 17, the commands at depth) at a tiny
depth: the decoder is exported tagged in a fresh process, every command runs
on its file and is measured, and the JSON and report name the commit and hold
every row. The deep run itself is a benchmark, not a test."""

import json
import subprocess
import sys
from pathlib import Path

import provenance

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "tool_costs_report.py"
COMMANDS = {"validate", "tree", "extract the whole model", "explorer", "carry onto the stripped file"}


def test_every_command_measured_on_the_tagged_file_with_its_commit(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--layers", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((tmp_path / "tool-costs.json").read_text())
    assert results["commit"] == provenance.git_state()["commit"] and "uncommitted_changes" in results
    (depth,) = results["depths"]
    assert depth["layers"] == 2 and depth["graph_bytes"] > 0
    assert depth["export_seconds"] > 0 and depth["export_peak_rss"] > 0
    rows = {row["command"]: row for row in depth["rows"]}
    assert COMMANDS <= rows.keys() and any(name.startswith("extract /") for name in rows)
    assert all(row["seconds"] > 0 and row["peak_rss"] > 0 for row in rows.values())
    report = (tmp_path / "tool-costs.md").read_text()
    assert provenance.describe(results) in report
    assert sum(line.startswith("| 2 |") for line in report.splitlines()) == len(rows) + 1  # and the export's
    assert results["command"] in report
