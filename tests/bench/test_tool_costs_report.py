"""bench/tool_costs_report.py (issue 17, the commands at depth) at a tiny
depth: the decoder is exported tagged in a fresh process, every command runs
on its file and is measured, and the JSON and report name the commit and hold
every row (the model over 2 GiB left out: 8 GB of disk; its table rendered
from a hand-made result). The deep run itself is a benchmark, not a test."""

import json
import subprocess
import sys
from pathlib import Path

import provenance
import tool_costs_report

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "tool_costs_report.py"
COMMANDS = {"validate", "tree", "extract the whole model", "explorer", "carry onto the stripped file"}


def test_every_command_measured_on_the_tagged_file_with_its_commit(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--layers", "2", "--no-large", "--out", str(tmp_path)],
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
    costs = report.split("## What hiertag's entries add")[0]
    assert sum(line.startswith("| 2 |") for line in costs.splitlines()) == len(rows) + 1  # and the export's
    assert results["command"] in report and "--no-large" in results["command"]
    assert results["large"] is None and "## A model over 2 GiB" not in report
    # Every node carries its tag, and the entries' bytes are a part of the file's.
    entries = depth["entries"]
    assert entries["node_entries"]["hierarchy_tag"]["nodes"] == depth["entries"]["nodes"]
    assert 0 < sum(e["bytes"] for e in entries["node_entries"].values()) < entries["file_bytes"]
    assert "| 2 |" in report.split("## What hiertag's entries add")[1]


def test_the_model_over_two_gib_gets_its_own_table(tmp_path):
    depth = {"layers": 2, "export_seconds": 1.5, "export_peak_rss": 3 * 10 ** 9, "graph_bytes": 2_000,
             "weight_bytes": 2 * 10 ** 9, "rows": [{"command": "validate", "seconds": 0.1, "peak_rss": 10 ** 7}],
             "entries": {"file_bytes": 4_000, "node_entries": {"hierarchy_tag": {"bytes": 1_000, "nodes": 10}},
                         "model_entries": {"hiertag.modules": 500}}}
    results = {"commit": "abc1234", "uncommitted_changes": False, "date": "today", "command": "the command",
               "machine": {"cpu": "a CPU", "cores": 2, "versions": {}}, "depths": [depth],
               "large": {**depth, "model": "a large model"}}
    tool_costs_report.render(results, tmp_path)
    report = (tmp_path / "tool-costs.md").read_text().splitlines()
    table = report[report.index("## A model over 2 GiB: a large model"):]
    assert "| export (tagged) | 1.50 | 3,000 | 1.50 |" in table
    assert "| validate | 0.10 | 10 | 0.01 |" in table
