"""End-to-end: `hiertag report` on real exports: the Markdown holds the file's
module tree, rewrites, shared nodes and, when given, the verifier's rows."""

import contextlib
import io
import json
import subprocess

import onnx
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core
from hiertag.verbs import report, verify
from tests.e2e.exportable import zoo_model


def export_tagged(name, path):
    model, args = zoo_model(name)
    with hiertag.tagging():
        torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    return path


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    directory = tmp_path_factory.mktemp("report")
    return {name: export_tagged(name, directory / f"{name}.onnx")
            for name in ("bert", "cross_module_rewrites", "shared_layer_stack")}


def run_report(capsys, *argv):
    status = report.main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def section(markdown, title):
    """The lines of one `## title` section."""
    lines = markdown.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    return lines.strip().splitlines()


def table_rows(lines):
    return [line for line in lines if line.startswith("| ") and not line.startswith("| ---")][1:]


def test_module_tree_has_one_row_per_module_in_tree_order(exports, capsys):
    status, out, err = run_report(capsys, exports["bert"])
    assert status == 0 and err == ""
    tree = json.loads(subprocess.run([hiertag.tool_path(), "tree", exports["bert"], "--json"],
                                     capture_output=True, text=True, check=True).stdout)["modules"]
    rows = table_rows(section(out, "Module tree"))
    assert len(rows) == len(tree)
    for row, module in zip(rows, tree, strict=True):
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert cells[0] == "&nbsp;&nbsp;" * module["depth"] + f"`{module['tag']}`"
        assert cells[1] == module["class"]
        assert (cells[3], cells[4]) == (f"{module['nodes_own']:,}", f"{module['nodes_total']:,}")
        assert cells[5] == f"{module['params_total']:,}"
    summary = "\n".join(section(out, "Summary"))
    model = onnx.load(exports["bert"])
    assert f"| nodes | {len(model.graph.node):,} (0 of them in If/Loop bodies) |" in summary
    assert "| hiertag validate | valid |" in summary and "| hiertag format | 3 |" in summary


def test_shared_nodes_are_listed_with_their_other_modules(exports, capsys):
    out = run_report(capsys, exports["bert"])[1]
    model = onnx.load(exports["bert"])
    shared = [node for node in model.graph.node if core.SHARED_KEY in checks.node_props(node)]
    assert shared
    rows = table_rows(section(out, "Shared nodes"))
    assert [row.split(" | ")[0].strip("| `") for row in rows] == [node.name for node in shared]
    tagging = "\n".join(section(out, "Tagging"))
    assert f"tracer aliases) | {len(shared)} |" in tagging
    assert "HIERTAG_REPORT=1" in tagging


def test_rewrites_and_modules_without_boundary_are_listed(exports, capsys):
    out = run_report(capsys, exports["cross_module_rewrites"])[1]
    lines = section(out, "Rewrites across module boundaries")
    text = "\n".join(lines)
    assert "| _jit_pass_onnx_eval_peephole | fused |" in text and "| _jit_pass_onnx_peephole | removed |" in text
    model = onnx.load(exports["cross_module_rewrites"])
    without = checks.rewritten_boundaries(model)
    assert without
    for key, reason in without.items():
        assert f"| `{key}` | {reason} |" in text
    # The fused node is recorded twice in the file (hiertag.rewrites, hiertag.spans): one row.
    assert text.count("| _jit_pass_onnx_eval_peephole | fused |") == 1
    assert "None: every node" in "\n".join(section(out, "Shared nodes"))


def test_calls_of_a_repeated_module_are_counted(exports, capsys):
    out = run_report(capsys, exports["shared_layer_stack"])[1]
    block = next(row for row in table_rows(section(out, "Module tree")) if "`/SharedLayerStack/Block`" in row)
    assert block.split(" | ")[7] == "3"
    tagging = "\n".join(section(out, "Tagging"))
    model = onnx.load(exports["shared_layer_stack"])
    numbered = sum(1 for node in model.graph.node if core.CALL_KEY in checks.node_props(node))
    assert numbered and f"(`hiertag.call`) | {numbered} |" in tagging
    assert "None: every module call keeps its boundary." in out


def test_verifier_rows_appear_when_given(exports, tmp_path, capsys):
    assert verify.main(["zoo:cross_module_rewrites", "--json"]) == 0
    verify_json = tmp_path / "verify.json"
    verify_json.write_text(capsys.readouterr().out)
    rows = json.loads(verify_json.read_text())["rows"]
    out_path = tmp_path / "report.md"
    status, out, _ = run_report(capsys, exports["cross_module_rewrites"], "-o", out_path, "--verify-json",
                                verify_json)
    assert status == 0 and out.startswith(f"{out_path}: report of ")
    markdown = out_path.read_text()
    lines = section(markdown, "Verifier")
    assert f"{len(rows)} of {len(rows)} module calls pass" in lines[0]
    listed = table_rows(lines)
    assert [row.split(" | ")[0].strip("| `") for row in listed] == [row["call"] for row in rows]
    assert all(row.endswith("| yes |") for row in listed)
    assert "## Verifier" not in run_report(capsys, exports["cross_module_rewrites"])[1]


@pytest.fixture(scope="module")
def cross_module_verified(tmp_path_factory):
    """`hiertag verify zoo:cross_module_rewrites --json`, parsed."""
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        assert verify.main(["zoo:cross_module_rewrites", "--json"]) == 0
    return json.loads(stream.getvalue())


@pytest.mark.parametrize("case", ["another model", "a call left out", "another node count"])
def test_verifier_results_not_of_this_model_are_refused(exports, cross_module_verified, tmp_path, capsys, case):
    """Check that --verify-json must describe the model it reports on (its node count and
    exactly its module calls): another model's results, or results missing a call or
    counting other nodes, are refused in one line, exit status 2, nothing written."""
    model, results = exports["cross_module_rewrites"], json.loads(json.dumps(cross_module_verified))
    calls = [row["call"] for row in results["rows"]]
    if case == "another model":
        model = exports["shared_layer_stack"]
        why = f"it checks module call '{calls[0]}', which {model} does not have"
    elif case == "a call left out":
        results["rows"] = results["rows"][:-1]
        why = f"it does not check module call '{calls[-1]}' of {model}"
    else:
        results["nodes"] += 1
        why = f"it names {results['nodes']} nodes, {model} has {results['nodes'] - 1}"
    verify_json = tmp_path / "verify.json"
    verify_json.write_text(json.dumps(results))
    out_path = tmp_path / "report.md"
    status, out, err = run_report(capsys, model, "-o", out_path, "--verify-json", verify_json)
    assert (status, out) == (2, "")
    assert err == (f"hiertag report: {verify_json}: the verifier's results of zoo:cross_module_rewrites are not "
                   f"{model}'s: {why}\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["verify.json"]


def test_json_holds_the_facts(exports, capsys):
    status, out, _ = run_report(capsys, exports["cross_module_rewrites"], "--json")
    facts = json.loads(out)
    assert status == 0 and facts["valid"] and facts["tagging"]["fused_nodes"] == 1
    assert len(facts["rewrites"]) == 2 and facts["verify"] is None


@pytest.mark.parametrize("case", ["untagged", "missing", "bad verify json"])
def test_bad_input_is_one_line_exit_two_and_writes_nothing(exports, tmp_path, capsys, case):
    source = exports["bert"]
    extra = []
    if case == "untagged":
        source = tmp_path / "plain.onnx"
        onnx.save(checks.strip_tags(onnx.load(exports["bert"])), source)
    elif case == "missing":
        source = tmp_path / "missing.onnx"
    else:
        (tmp_path / "verify.json").write_text("[1, 2")
        extra = ["--verify-json", tmp_path / "verify.json"]
    out_path = tmp_path / "report.md"
    status, out, err = run_report(capsys, source, "-o", out_path, *extra)
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("hiertag report: ")
    assert not out_path.exists() and not list(tmp_path.glob(".*partial"))
