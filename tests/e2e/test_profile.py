"""End-to-end: `hiertag profile` on real exports (the bundled BERT, GPT-2 and
ResNet), run as a user runs it: every node event of ONNX Runtime's optimized
graph is attributed to a module through `hiertag carry`, the module times add
up to the total, and the text, JSON, CSV and PNG outputs are written; bad
input gives one line and exit status 2."""

import csv
import io
import json
import re
import subprocess
import sys
from collections import defaultdict

import onnx
import pytest
import torch

import hiertag
from hiertag import OPSET, checks
from hiertag.models import quiet
from tests.e2e.exportable import zoo_model
from tests.e2e.without_module import hiertag_without


def export(name, path, **options):
    model, args = zoo_model(name)
    with quiet(), hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET, **options)
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    directory = tmp_path_factory.mktemp("profile")
    return {name: export(name, directory / f"{name}.onnx") for name in ("bert", "gpt2", "resnet")}


def hiertag_profile(*arguments):
    return subprocess.run([sys.executable, "-m", "hiertag", "profile", *map(str, arguments)],
                          capture_output=True, text=True)


def profile_json(*arguments):
    done = hiertag_profile(*arguments, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("name,statistic", [("bert", "mean"), ("gpt2", "mean"), ("resnet", "median")])
def test_every_node_event_is_attributed_and_module_times_add_up_to_the_total(exports, name, statistic):
    result = profile_json(exports[name], "--runs", "3", "--warmup", "1",
                          *(["--median"] if statistic == "median" else []))
    assert result["statistic"] == statistic
    table = checks.module_table(onnx.load(exports[name]))
    rows = result["modules"]
    assert result["unattributed_share"] == 0 and result["unattributed_nodes"] == [] and result["total_ms"] > 0
    assert sorted(row["module"] for row in rows) == sorted(table)
    assert sum(row["self_ms"] for row in rows) == pytest.approx(result["total_ms"], rel=1e-9)
    assert rows[0]["inclusive_ms"] == pytest.approx(result["total_ms"], rel=1e-9)
    children = defaultdict(float)
    for row in rows:
        children[checks.parent_tag(row["module"])] += row["inclusive_ms"]
    for row in rows:
        assert row["inclusive_ms"] == pytest.approx(row["self_ms"] + children[row["module"]], abs=1e-9)
    # Every node of the graph ONNX Runtime ran was timed once and carried a tag.
    assert sum(row["nodes"] for row in rows) == result["optimized_nodes"] == sum(result["carry"].values())
    assert result["optimized_nodes"] < result["nodes"]  # it did fuse and fold


def test_text_csv_and_icicle_chart(exports, tmp_path):
    table = checks.module_table(onnx.load(exports["bert"]))
    plot = tmp_path / "bert.png"
    done = hiertag_profile(exports["bert"], "--runs", "2", "--warmup", "1", "--top", "3", "--plot", plot)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{exports['bert']}: 2 runs (1 warm-up), ONNX Runtime ")
    counts = re.search(r"in (\d+) nodes \(the model has (\d+); carried (\d+) exact, (\d+) shared, (\d+) span, "
                       r"(\d+) by rule\)", lines[0])
    assert counts, lines[0]
    ran, total, *carried = map(int, counts.groups())
    assert total == len(list(checks.walk_nodes(onnx.load(exports["bert"]).graph))) and sum(carried) == ran < total
    assert lines[1] == "attributed to modules: 100.0 % (unattributed 0.000 ms)"
    assert lines[2] == (f"module calls: {len(table)} verified by value; 0 declared as fused or removed by the "
                        "optimizer, 0 as not established by carry")
    assert lines[3].split() == ["module", "self", "ms", "self", "%", "incl", "ms", "incl", "%", "nodes"]
    assert lines[4].split()[0] == "BertModel" and lines[4].split()[4] == "100.0"
    assert lines[4 + len(table)] == "slowest modules (self time):" and len(lines) == 5 + len(table) + 3
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bert.png"]
    done = hiertag_profile(exports["bert"], "--runs", "1", "--warmup", "0", "--csv")
    rows = list(csv.DictReader(io.StringIO(done.stdout)))
    assert [row["module"] for row in rows][0] == "/BertModel" and sorted(r["module"] for r in rows) == sorted(table)
    assert list(rows[0]) == ["module", "path", "class", "depth", "nodes", "self_ms", "inclusive_ms", "self_share",
                             "inclusive_share"]
    assert float(rows[0]["inclusive_share"]) == pytest.approx(1.0)


def test_modules_whose_calls_the_optimizer_cut_are_marked_declared(exports):
    # At level all ONNX Runtime converts ResNet's convolutions to its blocked
    # layout: the boundary values between them exist only in that form.
    result = profile_json(exports["resnet"], "--runs", "1")
    calls = result["calls"]
    declared = {checks.key_tag(checks.module_table(onnx.load(exports["resnet"])), entry["call"])
                for entry in result["declared"]}
    assert calls["declared_by_tool"] > 0 and calls["verified"] > 0
    assert declared == {row["module"] for row in result["modules"] if row["declared"]}
    assert all(entry["cause"] == "tool" for entry in result["declared"])
    done = hiertag_profile(exports["resnet"], "--runs", "1")
    marked = [line.split()[0] for line in done.stdout.splitlines() if line.split()[1:2] == ["*"]]
    assert len(marked) == len(declared)


def test_without_optimizations_the_exported_nodes_are_timed(exports):
    result = profile_json(exports["resnet"], "--runs", "1", "--level", "disabled")
    assert result["optimized_nodes"] == result["nodes"] == result["carry"]["exact"]
    assert result["unattributed_share"] == 0


def test_symbolic_dimensions_are_one_unless_an_input_sets_them(tmp_path):
    axes = {"input_ids": {1: "sequence"}, "attention_mask": {1: "sequence"}}
    path = export("bert", tmp_path / "dynamic.onnx", input_names=["input_ids", "attention_mask"], dynamic_axes=axes)
    result = profile_json(path, "--runs", "1")
    assert result["dims_set_to_1"] == ["input_ids[sequence=1]", "attention_mask[sequence=1]"]
    assert result["unattributed_share"] == 0
    result = profile_json(path, "--runs", "1", "--input", "input_ids=int64[1,32]:0..1000",
                          "--input", "attention_mask=ones[1,32]")
    assert result["dims_set_to_1"] == [] and result["unattributed_share"] == 0


@pytest.mark.parametrize("name", ["bert", "resnet"])
def test_a_model_with_external_data_is_profiled_as_the_inline_one(exports, tmp_path, name):
    """Check that a tagged model whose weights sit in an external data file (onnx's own
    layout: one file beside it) profiles like its inline copy: ONNX Runtime's saved graph
    names that file relative to the model, and profile reads it from there. At level
    extended: at level all, ONNX Runtime's NCHWc layout pass does not make the same graph
    in every session (its reorder nodes' names move between layers, and about one session
    in three carry places one of a ResNet's Convs in another module), so two sessions of
    even one file can differ."""
    path = tmp_path / f"{name}_ext.onnx"
    onnx.save_model(onnx.load(exports[name]), str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{name}_ext.data", size_threshold=0)
    stored = onnx.load(str(path), load_external_data=False)
    assert all(i.data_location == onnx.TensorProto.EXTERNAL for i in stored.graph.initializer)
    options = ("--runs", "1", "--level", "extended")
    external, inline = profile_json(path, *options), profile_json(exports[name], *options)
    assert external["unattributed_share"] == 0 and external["total_ms"] > 0
    for key in ("nodes", "optimized_nodes", "carry"):
        assert external[key] == inline[key], key
    assert [(row["module"], row["nodes"]) for row in external["modules"]] == \
        [(row["module"], row["nodes"]) for row in inline["modules"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}_ext.data", f"{name}_ext.onnx"]


def test_bad_input_is_one_line_and_writes_nothing(exports, tmp_path):
    plain = tmp_path / "plain.onnx"
    plain.write_bytes(checks.strip_tags(onnx.load(exports["bert"])).SerializeToString())
    bert = exports["bert"]
    cases = [
        ((tmp_path / "missing.onnx",), "cannot open the file"),
        ((plain,), "not tagged by hiertag"),
        ((bert, "--input", "pixels=float32[1,3]"), "--input names no input of the model: pixels"),
        ((bert, "--input", "input.1=int64[1,16"), "bad --input"),
        ((bert, "--input", "input.1=int64[1,8]"), "ONNX Runtime: "),  # the export has 16 tokens, fixed
        ((bert, "--runs", "0"), "--runs must be at least 1"),
        ((bert, "--plot", tmp_path / "no" / "chart.png"), "does not exist"),
        ((bert, "--json", "--csv"), "not allowed with argument"),
    ]
    for arguments, message in cases:
        done = hiertag_profile(*arguments)
        assert done.returncode == 2 and done.stdout == "", arguments
        assert len(done.stderr.splitlines()) == 1 and done.stderr.startswith("hiertag profile: "), done.stderr
        assert message in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.onnx"]


def test_plot_without_matplotlib_prints_the_profile_and_says_so_in_one_line(exports, tmp_path):
    plot = tmp_path / "bert.png"
    done = hiertag_without("matplotlib", "profile", exports["bert"], "--runs", "2", "--warmup", "1", "--top", "3",
                           "--plot", plot)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"hiertag profile: --plot needs matplotlib (pip install matplotlib): the profile is "
                           f"printed, '{plot}' not written\n")
    assert list(tmp_path.iterdir()) == []
    # The whole profile, as without --plot: the header, one line per module, the slowest three.
    table = checks.module_table(onnx.load(exports["bert"]))
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"{exports['bert']}: 2 runs (1 warm-up), ONNX Runtime ")
    assert lines[1].startswith("attributed to modules: ") and lines[4].split()[0] == "BertModel"
    assert lines[4 + len(table)] == "slowest modules (self time):" and len(lines) == 5 + len(table) + 3
