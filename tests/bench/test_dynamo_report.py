"""bench/dynamo_vs_hiertag.py (issue 47, "Measured") on two small models: each is
exported tagged with torch's dynamo exporter in a fresh process, timed against
the plain export, checked call by call by the verifier, and its module table
compared with the TorchScript path's; the JSON holds the measured values and the
report shows them. The full run is a benchmark, not a test."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import provenance

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "dynamo_vs_hiertag.py"
MODELS = ("called_twice", "cross_module_rewrites")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dynamo")
    done = subprocess.run([sys.executable, str(SCRIPT), "--models", ",".join(MODELS), "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "dynamo.json").read_text())


def by_model(results):
    return {result["model"]: result for result in results["results"]}


def test_every_call_is_exact_or_declared_and_every_node_tagged(run):
    """Check that each model's tagged dynamo file was checked whole: every node
    tagged, validate passing, every call exact or declared, none wrong."""
    _, results = run
    measured = by_model(results)
    assert set(measured) == set(MODELS)
    for result in measured.values():
        tagged = result["tagged"]
        assert result["exportable"] and tagged["export"] == "ok", result
        assert tagged["nodes"] > 0 and tagged["nodes_tagged"] == tagged["nodes"]
        assert tagged["valid"] and tagged["validate"].startswith("valid:")
        assert tagged["calls"] > 0 and tagged["exact"] + tagged["declared"] == tagged["calls"]
        assert tagged["wrong"] == 0 and tagged["wrong_calls"] == []
    assert measured["called_twice"]["tagged"]["calls"] == 3  # its shared module's two calls apart
    declared = measured["cross_module_rewrites"]["tagged"]["declared_calls"]
    assert declared and all(call["reason"].startswith("onnxscript.") for call in declared)


def test_own_work_timed_against_the_plain_dynamo_export(run):
    """Check that hiertag's own work comes from the report line of each tagged
    export and is a share of the median of three plain exports."""
    _, results = run
    for result in results["results"]:
        timing = result["timing"]
        assert len(timing["plain_seconds"]) == len(timing["tagged_seconds"]) == len(timing["work_ms"]) == 3
        assert all(seconds > 0 for seconds in timing["plain_seconds"] + timing["tagged_seconds"])
        assert timing["median_work_ms"] > 0 and all(work > 0 for work in timing["work_ms"])
        assert timing["report"].startswith(f"hiertag: {result['tagged']['nodes']} nodes:")
        assert timing["work_share"] == pytest.approx(timing["median_work_ms"] / timing["plain_ms"])
        assert 0 < timing["work_share"] < 1


def test_files_held_against_torchs_made_at_the_same_point(run):
    """Check that each model's flag-off files (HIERTAG=0 and unset) were compared
    byte for byte with torch's, and the tagged file stripped, checked and run in
    ONNX Runtime against torch's, all equal."""
    _, results = run
    for result in results["results"]:
        found = result["torch"]
        assert found["flag_off_files"] == found["flag_off_equal"] == 2, found
        assert found["stripped_equal"] and found["checker"] == "ok", found
        assert found["outputs"] > 0 and found["outputs_identical"], found


def test_tables_compared_with_the_torchscript_path_and_torchs_metadata(run):
    """Check that the TorchScript path's table was read for every module path
    both list, and torch's own metadata scored by the verifier."""
    _, results = run
    for result in results["results"]:
        agreement = result["torchscript"]
        assert agreement["export"] == "ok" and agreement["paths_in_both"] >= 2
        assert agreement["paths_equal"] == agreement["paths_in_both"], agreement["differences"]
        assert agreement["only_dynamo"] == agreement["only_torchscript"] == []
        metadata = result["metadata"]
        assert metadata["import"] == "ok" and metadata["calls"] > 0 and 0 <= metadata["passed"] <= metadata["calls"]


def test_report_shows_the_measured_values_with_provenance(run):
    out, results = run
    assert results["commit"] == provenance.git_state()["commit"] and "uncommitted_changes" in results
    assert results["machine"]["versions"]["torch"] and results["machine"]["versions"]["onnxscript"]
    report = (out / "dynamo.md").read_text()
    assert results["command"] in report and f"--out {out}" in results["command"]
    assert provenance.describe(results) in report
    calls = sum(r["tagged"]["calls"] for r in results["results"])
    declared = sum(r["tagged"]["declared"] for r in results["results"])
    assert f"| module calls: exact / declared / wrong | {calls - declared} / {declared} / 0 of {calls} |" in report
    paths = sum(r["torchscript"]["paths_in_both"] for r in results["results"])
    assert f"| tables equal to the TorchScript path's | {paths} of {paths} module paths both list" in report
    for result in results["results"]:
        tagged = result["tagged"]
        assert (f"| {result['model']} | {tagged['nodes']} | 100.0 % | same | {tagged['calls']} | {tagged['exact']} | "
                f"{tagged['declared']} | 0 | ok |") in report
    assert (f"| flag off (`HIERTAG` unset and `0`) byte for byte torch's file | "
            f"{len(MODELS)} of {len(MODELS)} |") in report
    assert "- **cross_module_rewrites**: declared, onnxscript." in report
    rendered = (out / "dynamo.md").read_text()
    (out / "dynamo.md").unlink()
    done = subprocess.run([sys.executable, str(SCRIPT), "--render", "--out", str(out)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (out / "dynamo.md").read_text() == rendered
