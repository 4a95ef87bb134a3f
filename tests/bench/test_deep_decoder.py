"""bench/deep_decoder.py (issue 10, "Scale") at a tiny depth: both exports run
in fresh processes, the files are scored (same node count, every node of the
tagged file tagged, `hiertag validate` passes) and the JSON and report hold
every field. The deep run itself is a benchmark, not a test."""

import json
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

import deep_decoder
import provenance

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "deep_decoder.py"
LAYERS = 3


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("deep")
    done = subprocess.run([sys.executable, str(SCRIPT), "--layers", f"{LAYERS}x1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "deep-decoder.json").read_text())


def test_both_exports_measured_in_fresh_processes(run):
    _, results = run
    assert results["failures"] == []
    depth = results["depths"][str(LAYERS)]
    assert depth["config"]["num_hidden_layers"] == LAYERS and depth["config"]["hidden_size"] <= 32
    for method in ("plain", "hiertag"):
        (record,) = depth["runs"][method]
        assert record["seconds"] > 0 and record["peak_rss_bytes"] >= record["rss_before_bytes"] > 0
        assert record["layers"] == LAYERS and record["method"] == method
    assert depth["runs"]["plain"][0]["hiertag_work_ms"] is None
    assert depth["runs"]["hiertag"][0]["hiertag_work_ms"] > 0
    summary = depth["summary"]
    for field in ("hiertag_over_plain", "peak_rss_ratio", "hiertag_work_share", "pair_time_ratios",
                  "pair_peak_rss_ratios"):
        assert field in summary
    assert 0 < summary["hiertag_work_share"] < 1


def test_files_scored_tagged_and_valid(run):
    _, results = run
    depth = results["depths"][str(LAYERS)]
    plain, tagged = depth["scores"]["plain"], depth["scores"]["hiertag"]
    # a LLaMA layer is well over 50 nodes: the depth is real
    assert plain["nodes"] == tagged["nodes"] > 50 * LAYERS
    assert plain["untagged_nodes"] == plain["nodes"]
    assert tagged["untagged_nodes"] == 0
    assert tagged["validate"]["valid"] and tagged["validate"]["exit_status"] == 0
    assert tagged["validate"]["nodes"] == tagged["nodes"]
    assert depth["checks"] == {"node_counts_equal": True, "every_node_tagged": True, "validate_passed": True,
                               "problems": []}


def test_report_machine_and_command(run):
    out, results = run
    machine = results["machine"]
    assert machine["cores"] and machine["versions"]["torch"] and machine["versions"]["transformers"]
    assert results["command"].startswith(".venv/bin/python bench/deep_decoder.py --layers 3x1")
    report = (out / "deep-decoder.md").read_text()
    assert f"| {LAYERS} | 1 | {results['depths'][str(LAYERS)]['scores']['plain']['nodes']:,} |" in report
    assert "all passed." in report and results["command"] in report
    ran_at = results["depths"][str(LAYERS)]["ran_at"]
    assert ran_at["commit"] and ran_at["uncommitted_changes"] in (True, False)
    assert ran_at == {key: machine[key] for key in ran_at}  # the machine record: one git_state, the last run's
    assert "Rows from more than one build" not in report  # one run, one build


def test_rows_merged_from_another_build_say_which(run, tmp_path):
    _, results = run
    older = json.loads(json.dumps(results["depths"][str(LAYERS)]))
    older.update(layers=LAYERS + 1, ran_at={"commit": "1234567", "uncommitted_changes": True})
    for score in older["scores"].values():
        score["nodes"] += 100  # another depth
    deep_decoder.render({**results, "depths": {**results["depths"], str(LAYERS + 1): older}}, tmp_path)
    report = (tmp_path / "deep-decoder.md").read_text()
    assert f"{LAYERS + 1} layers at commit 1234567 (with uncommitted changes)" in report
    assert f"{LAYERS} layers at {provenance.describe(results['machine'])}" in report


def test_score_counts_nested_graphs_and_missing_tags(tmp_path):
    """score() counts the nodes of If branches and sees an untagged node."""
    from onnx import TensorProto, helper
    branch = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "b", [],
                               [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    outer = helper.make_node("If", ["c"], ["z"], then_branch=branch, else_branch=branch)
    outer.metadata_props.add(key=deep_decoder.TAG_KEY, value="/M")
    graph = helper.make_graph([outer], "g", [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                                             helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])])
    path = tmp_path / "if.onnx"
    onnx.save(helper.make_model(graph), path)
    scored = deep_decoder.score(path, tagged=False)
    assert scored["nodes"] == 3 and scored["nested_graphs"] == 2 and scored["untagged_nodes"] == 2
