"""The benchmark harness end to end on the 2-layer test BERT: every method's
exports run, the scores separate hiertag from the legacy baseline, and the
report, the JSON and both plots are written."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "bench" / "harness.py"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("results")
    done = subprocess.run([sys.executable, str(HARNESS), "--models", "zoo:bert", "--runs", "2", "--out", str(out),
                           "--scaling-filter", "AssignHierarchyTags/1000$"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


def test_every_method_ran_every_round_in_a_fresh_process(report):
    _, results = report
    bert = results["models"]["zoo:bert"]
    assert results["failures"] == []
    for method in ("plain", "hiertag", "legacy"):
        runs = bert["runs"][method]
        assert len(runs) == 2
        assert all(run["seconds"] > 0 and run["peak_rss_bytes"] >= run["rss_before_bytes"] > 0 for run in runs)
        assert bert["identical_files"][method]
    assert all(run["hiertag_work_ms"] is not None for run in bert["runs"]["hiertag"])


def test_scores_separate_hiertag_from_the_legacy_baseline(report):
    _, results = report
    scores = results["models"]["zoo:bert"]["scores"]
    ours, legacy = scores["hiertag"], scores["legacy"]
    assert ours["nodes"] == legacy["nodes"] == scores["plain"]["nodes"] > 0
    assert ours["tagged"] == ours["nodes"]
    assert ours["contaminated"] == 0 < legacy["contaminated"]
    assert ours["boundary_passed"] == ours["boundary_checked"] > 0
    assert legacy["boundary_passed"] < legacy["boundary_checked"] == ours["boundary_checked"]


def test_report_and_plots_are_written(report):
    out, results = report
    markdown = (out / "results.md").read_text()
    assert "| zoo:bert |" in markdown and results["machine"]["cpu"] in markdown
    assert [row["pass"] for row in results["pass_scaling"]] == ["AssignHierarchyTags"]
    assert results["pass_scaling"][0]["peak_heap_bytes"] > 0
    for plot in ("export_time.png", "pass_scaling.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_render_writes_the_same_report_from_the_json(report, tmp_path):
    out, _ = report
    (tmp_path / "results.json").write_bytes((out / "results.json").read_bytes())
    done = subprocess.run([sys.executable, str(HARNESS), "--render", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "results.md").read_text() == (out / "results.md").read_text()
    assert "## Summary" in (tmp_path / "results.md").read_text()


def test_unknown_model_is_a_one_line_error(tmp_path):
    done = subprocess.run([sys.executable, str(HARNESS), "--models", "zoo:nope", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and "unknown model 'zoo:nope'" in done.stderr
    assert not any(tmp_path.iterdir())
