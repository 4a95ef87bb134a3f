"""End-to-end: HIERTAG=1 with torch's dynamo exporter (torch.onnx.export(...,
dynamo=True), torch's default since 2.9), judged against torch's own untagged
dynamo export of the same model: every bundled model and corner case torch's
dynamo exporter exports on this release, with the checks the TorchScript path's
files pass (test_export.py): every node tagged with a tag of the table, the
table naming the real instances and classes and equal to the TorchScript path's
for every module both list, the checker and ONNX Runtime (identical outputs),
the file equal to the untagged export once hiertag's entries are stripped, the
flag-off export byte for byte a process's that never loaded hiertag, `hiertag
validate`, and every module call through the verifier (exact, or declared by
the file with the pass that cut it, which extract names). Then what no
bundled model shows: a user's later optimize(), the refusals."""

import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from hiertag import OPSET, checks, core, zoo
from hiertag.checks import dynamo_arguments
from hiertag.verbs import verify
from tests.e2e import expected_skips
from tests.e2e.exportable import DYNAMO_EXPORT
from tests.e2e.native_tool import run_tool

ROOT = Path(__file__).resolve().parents[2]


def dynamo_incapable():
    """Why this torch's dynamo exporter cannot be tagged (the plugin's refusal), or None."""
    model = torch.nn.Linear(2, 2)
    os.environ["HIERTAG"] = "1"
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, (torch.ones(1, 2),), dynamo=True)
    except ValueError as error:
        if str(error).startswith("hiertag:") and "dynamo=False" in str(error):
            return str(error)
        raise
    finally:
        os.environ.pop("HIERTAG", None)
    return None


def test_hiertag_1_tags_the_dynamo_exporter_or_refuses_naming_the_release(tmp_path):
    """Check that on every torch, HIERTAG=1 with dynamo=True either writes a tagged
    file or, on a release that lacks what exact tags need (torch 2.4's older
    dynamo_export, a torch before torch.fx.traceback.annotate), refuses in one
    line naming the release and dynamo=False, writing nothing."""
    model, args = zoo.ALL["called_twice"]()
    out = tmp_path / "model.onnx"
    os.environ["HIERTAG"] = "1"
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(model, args, str(out), dynamo=True)
    except ValueError as error:
        message = str(error)
        assert message.startswith("hiertag: ") and "\n" not in message, message
        assert torch.__version__ in message and "dynamo=False" in message and "nothing written" in message
        assert not out.exists()
        return
    finally:
        os.environ.pop("HIERTAG", None)
    written = onnx.load(out, load_external_data=False)
    assert all(core.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(written.graph))


@pytest.fixture(scope="module")
def capable():
    why = dynamo_incapable()
    if why is not None:
        pytest.skip(why)


def export(model, args, path, flag, **options):
    """torch.onnx.export with the dynamo exporter, HIERTAG=flag; returns the ONNXProgram."""
    positional, keywords = dynamo_arguments(args)
    os.environ["HIERTAG"] = flag
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
            return torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True, **options)
    finally:
        os.environ.pop("HIERTAG", None)


def file_bytes(path):
    """The model and its external data, as written."""
    data = Path(f"{path}.data")
    return path.read_bytes(), data.read_bytes() if data.exists() else b""


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """{name: path or failure}: torch's own dynamo exports of every bundled model,
    from a process that never loaded hiertag (a failure: export_plain.py's record
    of torch's error)."""
    out = tmp_path_factory.mktemp("plain")
    env = {k: v for k, v in os.environ.items() if not k.startswith("HIERTAG") or k == "HIERTAG_NATIVE_DIR"}
    subprocess.run([sys.executable, str(ROOT / "tests" / "e2e" / "export_plain.py"), str(out), "--dynamo",
                    *sorted(zoo.ALL)], check=True, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return {name: out / name / "model.onnx" if (out / name / "model.onnx").exists()
            else json.loads((out / f"{name}.error").read_text()) for name in zoo.ALL}


def test_torchs_dynamo_exporter_fails_on_exactly_the_expected_models(request):
    """Check that torch's own dynamo exporter, without hiertag, fails on exactly the
    bundled models tests/e2e/expected_skips.py names for this release, each with
    the error it names and raised in torch's exporter (and that the table says
    which releases have no such exporter)."""
    expected = expected_skips.expected("dynamo")
    assert (expected is None) == (not DYNAMO_EXPORT)
    if expected is None:
        pytest.skip(f"torch {torch.__version__} has no dynamo exporter taking kwargs= (expected_skips.py)")
    plain = request.getfixturevalue("plain")
    failed = {name: failure for name, failure in plain.items() if not isinstance(failure, Path)}
    assert sorted(failed) == sorted(expected), {name: failure["error"][:200] for name, failure in failed.items()}
    for name, failure in sorted(failed.items()):
        skip, message = expected_skips.verdict(name, failure, expected)
        assert skip, message


@pytest.fixture(scope="module", params=sorted(zoo.ALL), ids=lambda name: f"model={name}")
def exported(request, capable, plain, tmp_path_factory):
    """(name, model, args, tagged path, flag-off path, plain path). The files share
    a name in three folders: torch names the external data after the file."""
    name = request.param
    if not isinstance(plain[name], Path):
        expected_skips.skip_or_fail("dynamo", name, plain[name])
    folder = tmp_path_factory.mktemp(name)
    model, args = zoo.ALL[name]()
    tagged = folder / "tagged" / "model.onnx"
    export(model, args, tagged, "1")
    off = folder / "off" / "model.onnx"
    export(*zoo.ALL[name](), off, "0")
    return name, model, args, tagged, off, plain[name]


def test_flag_off_export_is_torchs_own(exported):
    name, _, _, _, off, plain_path = exported
    assert file_bytes(off) == file_bytes(plain_path), f"{name}: HIERTAG=0 changed torch's dynamo export"


def test_every_node_has_a_tag_listed_in_the_module_table(exported):
    name, _, _, tagged, _, _ = exported
    model = onnx.load(tagged, load_external_data=False)
    table = checks.module_table(model)
    nodes = list(checks.walk_nodes(model.graph))
    assert nodes
    for node in nodes:
        props = checks.node_props(node)
        assert core.TAG_KEY in props, f"{name}: node {node.name} ({node.op_type}) has no tag"
        assert props[core.TAG_KEY] in table, f"{name}: {props[core.TAG_KEY]} not in the module table"
        for shared in json.loads(props.get(core.SHARED_KEY, "[]")):
            tag, call = checks.parse_ref(shared)
            assert tag in table and (call is None or call < checks.call_count(table, tag)), shared
    for tag in table:
        parent = tag.rsplit("/", 1)[0]
        assert parent == "" or parent in table, f"{name}: ancestor {parent} of {tag} missing"


def test_rest_of_the_file_equals_the_untagged_export(exported):
    name, _, _, tagged, _, plain_path = exported
    stripped = checks.strip_tags(onnx.load(tagged, load_external_data=False))
    assert stripped.SerializeToString() == onnx.load(plain_path, load_external_data=False).SerializeToString(), \
        f"{name}: the tagged file differs from torch's beyond hiertag's entries"


def test_checker_accepts_and_runtime_gives_identical_outputs(exported):
    _, model, args, tagged, _, plain_path = exported
    onnx.checker.check_model(str(tagged), full_check=True)
    feeds = checks.feeds_for(str(plain_path), model, args)
    ours = onnxruntime.InferenceSession(str(tagged)).run(None, feeds)
    theirs = onnxruntime.InferenceSession(str(plain_path)).run(None, feeds)
    for mine, torchs in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(mine, torchs)


def test_validate_passes(exported):
    name, _, _, tagged, _, _ = exported
    done = run_tool("validate", tagged)
    assert done.returncode == 0, f"{name}: {done.stdout}{done.stderr}"


def test_every_module_call_is_exact_or_declared(exported, tmp_path):
    """Every call of every module through the verifier: its boundary holds against
    eager PyTorch and its extraction reproduces it, or the file declares the pass
    that cut it and extract refuses it naming that pass."""
    name, _, _, tagged, _, _ = exported
    rows, failures = verify.verify_file(tagged, *zoo.ALL[name](), tmp_path)
    failed = [row for row in rows if not row[-1]]
    assert not failed, f"{name}: {failed[:3]} {failures[:3]}"


def test_module_table_equals_the_torchscript_paths(exported, tmp_path):
    """The same module path has the same tag, class and calls in both files
    (where the TorchScript exporter exports the model too)."""
    name, _, _, tagged, _, _ = exported
    model, args = zoo.ALL[name]()
    path = tmp_path / "torchscript.onnx"
    os.environ["HIERTAG"] = "1"
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            torch.onnx.export(model, args, str(path), dynamo=False, opset_version=OPSET)
    except Exception as error:
        pytest.skip(f"the TorchScript exporter cannot export {name}: {str(error).splitlines()[0][:200]}")
    finally:
        os.environ.pop("HIERTAG", None)
    ours = checks.module_table(onnx.load(tagged, load_external_data=False))
    theirs = checks.module_table(onnx.load(path, load_external_data=False))
    by_path = {}
    for tag, entry in theirs.items():
        by_path.setdefault(entry["path"], {})[tag] = entry
    assert {entry["path"] for entry in ours.values()} == set(by_path), f"{name}: the paths listed differ"
    for tag, entry in ours.items():
        assert tag in by_path[entry["path"]], f"{name}: {entry['path']} is {tag} here, " \
                                             f"{sorted(by_path[entry['path']])} on the TorchScript path"
        other = by_path[entry["path"]][tag]
        assert entry["class"] == other["class"]
        assert entry.get("calls", [0]) == other.get("calls", [0]), f"{name}: {tag}'s calls differ"
        assert entry.get("parent_calls") == other.get("parent_calls"), f"{name}: {tag}'s parent calls differ"


# ---------------------------------------------------------------------------
# What no bundled model shows


class Expert(torch.nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.fc = torch.nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.fc(x))


class NoGradRegion(torch.nn.Module):
    """A forward run under torch.no_grad() that calls two children: torch wraps
    its whole body in one region (wrap_with_set_grad_enabled) after the trace."""

    def __init__(self):
        super().__init__()
        self.a = Expert()
        self.b = Expert()

    @torch.no_grad()
    def forward(self, x):
        return self.b(self.a(x) * 2)


class HoldsNoGradRegion(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = NoGradRegion()
        self.out = Expert()

    def forward(self, x):
        return self.out(self.inner(x))


class Branches(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.yes = Expert()
        self.no = Expert()

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.yes(t), lambda t: self.no(t) - 1, (x,))


def tags_by_path(path):
    """{module path: tag} of a tagged file's table."""
    return {entry["path"]: tag for tag, entry in checks.module_table(onnx.load(path, load_external_data=False)).items()}


def node_tags(path):
    model = onnx.load(path, load_external_data=False)
    return [(node.op_type, checks.node_props(node).get(core.TAG_KEY)) for node in checks.walk_nodes(model.graph)]


@pytest.mark.skipif(inspect.signature(torch.onnx.export).parameters["dynamo"].default is not True,
                    reason=f"torch {torch.__version__}'s default export is the TorchScript one")
def test_hiertag_1_tags_torchs_default_export_call(capable, tmp_path, monkeypatch):
    """Check that torch's default call (no dynamo=; the dynamo exporter since torch
    2.9) writes a tagged file with HIERTAG=1."""
    monkeypatch.setenv("HIERTAG", "1")
    model, args = zoo.ALL["called_twice"]()
    out = tmp_path / "default.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, args, str(out))
    written = onnx.load(out, load_external_data=False)
    assert core.TABLE_KEY in checks.model_props(written)
    assert all(core.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(written.graph))


def test_region_of_several_calls_under_no_grad_is_tagged_call_by_call(capable, tmp_path):
    """Check that the children called inside a torch.no_grad() forward keep their
    own calls, though torch inlines the region as one."""
    torch.manual_seed(0)
    model, args = HoldsNoGradRegion().eval(), (torch.randn(2, 8),)
    out = tmp_path / "region.onnx"
    export(model, args, out, "1")
    tags = {tag for _, tag in node_tags(out)}
    paths = tags_by_path(out)
    assert {paths["inner.a"], paths["inner.b"], paths["out"]} <= tags
    rows, failures = verify.verify_file(out, model, args, tmp_path)
    assert all(row[-1] for row in rows), (rows, failures)


def test_a_later_optimize_is_observed_and_tags_again(capable, tmp_path):
    """Check that ONNXProgram.optimize() called by the user on an unoptimized
    tagged export gives the tags an optimized export gives, node for node."""
    model, args = zoo.ALL["cross_module_rewrites"]()
    program = export(model, args, tmp_path / "unoptimized" / "model.onnx", "1", optimize=False)
    program.optimize()
    later = tmp_path / "later" / "model.onnx"
    later.parent.mkdir()
    program.save(str(later))
    direct = tmp_path / "direct" / "model.onnx"
    export(*zoo.ALL["cross_module_rewrites"](), direct, "1")
    assert node_tags(later) == node_tags(direct)
    later_model = onnx.load(later, load_external_data=False)
    direct_model = onnx.load(direct, load_external_data=False)
    assert checks.model_props(later_model)[core.REWRITES_KEY] == checks.model_props(direct_model)[core.REWRITES_KEY]


def refused(call, tmp_path, match):
    """Runs call(out) with HIERTAG=1; asserts it raised one line matching `match` and left no file."""
    out = tmp_path / "refused.onnx"
    os.environ["HIERTAG"] = "1"
    try:
        with pytest.raises(ValueError, match=match) as raised, contextlib.redirect_stdout(io.StringIO()):
            call(out)
    finally:
        os.environ.pop("HIERTAG", None)
    message = str(raised.value)
    assert message.startswith("hiertag: ") and "\n" not in message and "nothing written" in message
    assert not out.exists() and not Path(f"{out}.data").exists()
    return message


def test_an_exported_program_is_refused(capable, tmp_path):
    model, args = zoo.ALL["called_twice"]()
    program = torch.export.export(model, args)
    refused(lambda out: torch.onnx.export(program, args, str(out), dynamo=True), tmp_path, "ExportedProgram")


def test_a_scripted_model_is_refused(capable, tmp_path):
    model, args = zoo.ALL["scripted_model"]()
    refused(lambda out: torch.onnx.export(model, args, str(out), dynamo=True), tmp_path, "dynamo=False")


def test_a_torch_cond_body_is_refused(capable, tmp_path):
    model, args = Branches().eval(), (torch.randn(2, 8),)
    refused(lambda out: torch.onnx.export(model, args, str(out), dynamo=True), tmp_path, "torch.cond")


def test_a_strict_capture_is_refused(capable, tmp_path, monkeypatch):
    """Check that where torch captures the model with torch.export's strict mode
    (torch.compile), the export is refused rather than written without records."""
    from torch.onnx._internal.exporter import _capture_strategies
    monkeypatch.setattr(_capture_strategies, "CAPTURE_STRATEGIES", (_capture_strategies.TorchExportStrictStrategy,))
    model, args = zoo.ALL["called_twice"]()
    refused(lambda out: torch.onnx.export(model, args, str(out), dynamo=True), tmp_path, "torch.compile")


def test_a_torch_without_fx_annotations_is_refused(capable, tmp_path, monkeypatch):
    """Check that a torch whose FX tracer has no annotate (torch before 2.10) is
    refused naming the release and dynamo=False."""
    monkeypatch.delattr(torch.fx.traceback, "annotate")
    model, args = zoo.ALL["called_twice"]()
    message = refused(lambda out: torch.onnx.export(model, args, str(out), dynamo=True), tmp_path, "dynamo=False")
    assert torch.__version__ in message


def test_torch_modules_1_gives_the_torchscript_paths_table(capable, tmp_path, monkeypatch):
    """Check that HIERTAG_TORCH_MODULES=1 gives torch.nn modules the segments the
    TorchScript path gives them."""
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "1")
    dynamo_file = tmp_path / "dynamo" / "model.onnx"
    export(*zoo.ALL["bert"](), dynamo_file, "1")
    torchscript_file = tmp_path / "torchscript.onnx"
    monkeypatch.setenv("HIERTAG", "1")
    model, args = zoo.ALL["bert"]()
    torch.onnx.export(model, args, str(torchscript_file), dynamo=False, opset_version=OPSET)
    assert tags_by_path(dynamo_file) == tags_by_path(torchscript_file)
    assert any("LayerNorm" in tag for tag in tags_by_path(dynamo_file).values())


def test_report_line(capable, tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("HIERTAG_REPORT", "1")
    export(*zoo.ALL["bert"](), tmp_path / "model.onnx", "1")
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("hiertag: ")]
    assert len(lines) == 1 and "nodes: recorded" in lines[0] and "hiertag work" in lines[0]


def run_verb(*arguments, statuses=(0,)):
    done = subprocess.run([sys.executable, "-m", "hiertag", *map(str, arguments)], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode in statuses, f"hiertag {arguments[0]}: {done.stdout[-500:]}{done.stderr[-500:]}"
    return done.stdout


def test_every_verb_reads_a_dynamo_file(capable, tmp_path):
    """Check that the verbs acting on tags take a tagged dynamo file (its weights in
    external data beside it): tree, extract, select, report, graphml, explorer,
    profile, carry and compare."""
    source = tmp_path / "bert" / "model.onnx"
    export(*zoo.ALL["bert"](), source, "1")
    table = checks.module_table(onnx.load(source, load_external_data=False))
    layer = next(tag for tag in table if tag.endswith("BertLayer.0"))
    assert layer in run_verb("tree", source, "--csv")
    extracted = tmp_path / "layer.onnx"
    run_verb("extract", source, "--module", layer, "-o", extracted)
    onnx.checker.check_model(str(extracted), full_check=True)
    names = json.loads(run_verb("select", source, "--module", "*/BertSelfOutput", "--json"))["nodes"]
    assert names and set(names) <= {node.name for node in onnx.load(source, load_external_data=False).graph.node}
    run_verb("report", source, "-o", tmp_path / "report.md")
    assert layer in (tmp_path / "report.md").read_text()
    run_verb("graphml", source, "-o", tmp_path / "model.graphml")
    run_verb("explorer", source, "-o", tmp_path / "explorer.onnx")
    assert json.loads(run_verb("profile", source, "--runs", "2", "--json"))["modules"]
    quantized = source.parent / "quantized.onnx"  # beside the source: its external data is found there
    from onnxruntime.quantization import QuantType, quantize_dynamic
    quantize_dynamic(str(source), str(quantized), weight_type=QuantType.QInt8)
    carried = tmp_path / "carried.onnx"
    summary = json.loads(run_verb("carry", source, quantized, "-o", carried, "--json"))
    assert summary["nodes"] > 0
    # compare's status 1: some module drifts (int8 does), which the line names
    assert "first module above" in run_verb("compare", source, carried, "--values", "--top", "2", statuses=(0, 1))


def test_hiertag_export_and_verify_take_dynamo(capable, tmp_path):
    """Check that `hiertag export --dynamo` writes a tagged dynamo file (its
    weights beside it) and `hiertag verify --dynamo` passes every call."""
    out = tmp_path / "bert.onnx"
    config = json.dumps({"vocab_size": 100, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
                         "intermediate_size": 64})
    summary = json.loads(run_verb("export", "BertModel", "--config", config, "--dynamo", "-o", out, "--json"))
    assert summary["nodes"] > 0 and out.exists()
    model = onnx.load(out, load_external_data=False)
    assert summary["opset"] == next(entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx"))
    assert all(core.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(model.graph))
    verified = json.loads(run_verb("verify", "zoo:called_twice", "--dynamo", "--json"))
    assert verified["calls"] == verified["passed"] == 3
