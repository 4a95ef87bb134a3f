"""End-to-end: `hiertag import-dynamo` on real files of torch's default (dynamo)
exporter, run as a user runs it, against the tagged TorchScript export of the
same model; and what HIERTAG does to a `torch.onnx.export` call that takes the
dynamo path. The full measurement over every bundled model is
bench/dynamo_vs_hiertag.py (bench/results/dynamo.md)."""

import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import onnxruntime
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core, verbs, zoo
from hiertag.verbs import import_dynamo, verify
from tests.e2e.exportable import skip_unless_dynamo_export, zoo_model
from tests.e2e.native_tool import run_tool

ROOT = Path(__file__).resolve().parents[2]

# bert: a HuggingFace encoder; resnet: a CNN whose same-class blocks sit behind
# filtered Sequentials; called_twice: one module called twice; containers:
# same-class siblings; odd_class_names: class names the grammar must escape.
MODELS = ["bert", "resnet", "called_twice", "containers", "odd_class_names"]


def dynamo_export(name, path):
    skip_unless_dynamo_export()
    model, args = zoo_model(name)
    positional, keywords = import_dynamo.export_arguments(args)
    with contextlib.redirect_stdout(io.StringIO()):  # the exporter's progress lines
        torch.onnx.export(model, positional, str(path), kwargs=keywords, dynamo=True)


def run_import(*arguments):
    return subprocess.run([sys.executable, "-m", "hiertag", "import-dynamo", *map(str, arguments)],
                          capture_output=True, text=True, cwd=ROOT)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """{model: {"dynamo", "imported", "hiertag": paths, "import": the command's result}}."""
    folder = tmp_path_factory.mktemp("dynamo")
    os.environ.pop("HIERTAG", None)
    found = {}
    for name in MODELS:
        paths = {kind: folder / f"{name}.{kind}.onnx" for kind in ("dynamo", "imported", "hiertag")}
        dynamo_export(name, paths["dynamo"])
        model, args = zoo_model(name)
        with hiertag.tagging():
            torch.onnx.export(model, args, str(paths["hiertag"]), dynamo=False, opset_version=OPSET)
        found[name] = {**paths, "import": run_import(paths["dynamo"], "-o", paths["imported"], "--json")}
    return found


@pytest.mark.parametrize("name", MODELS)
def test_dynamo_export_converts_and_validates(files, name):
    """Check that the import tags every node with a tag of its table, says where
    the tags came from, passes `hiertag validate`, and changes nothing else."""
    done = files[name]["import"]
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    imported = onnx.load(files[name]["imported"])
    table = checks.module_table(imported)
    nodes = list(checks.walk_nodes(imported.graph))
    assert summary["nodes"] == len(nodes) and summary["modules"] == len(table)
    assert all(checks.node_props(node)[core.TAG_KEY] in table for node in nodes)
    assert checks.model_props(imported)[core.SOURCE_KEY] == "dynamo"
    assert checks.model_props(imported)[core.FORMAT_VERSION_KEY] == "3"
    validate = run_tool("validate", files[name]["imported"])
    assert validate.returncode == 0, validate.stdout + validate.stderr
    assert f"valid: {len(nodes)} nodes tagged, {len(table)} modules" in validate.stdout
    original = onnx.load(files[name]["dynamo"])
    assert checks.strip_tags(imported).SerializeToString() == original.SerializeToString()


@pytest.mark.parametrize("name", MODELS)
def test_import_names_every_module_as_the_torchscript_path_does(files, name):
    """Check that every module the import lists has the tag, class and number of
    calls hiertag's TorchScript export gives the same path, and that `tree`
    shows those modules in the same order."""
    imported = checks.module_table(onnx.load(files[name]["imported"]))
    reference = checks.module_table(onnx.load(files[name]["hiertag"]))
    for tag, entry in imported.items():
        assert tag in reference, f"{tag} (path '{entry['path']}') is not hiertag's tag of that path"
        assert reference[tag]["path"] == entry["path"]
        assert reference[tag]["class"] == entry["class"]
        assert reference[tag].get("calls", [0]) == entry.get("calls", [0])

    def tree(path):
        done = run_tool("tree", path, "--json")
        assert done.returncode == 0, done.stderr
        return [module["tag"] for module in json.loads(done.stdout)["modules"]]

    assert tree(files[name]["imported"]) == [tag for tag in tree(files[name]["hiertag"]) if tag in imported]


def test_weights_torch_put_in_external_data_are_read_in(files, tmp_path):
    """Check that a dynamo file keeping its weights in IN.onnx.data (torch's
    default) is written as one self-contained OUT, readable from any folder by
    the tool and by ONNX Runtime with the dynamo file's outputs."""
    source = files["bert"]["dynamo"]
    assert Path(f"{source}.data").stat().st_size > 0
    out = tmp_path / "elsewhere" / "bert.onnx"
    out.parent.mkdir()
    done = run_import(source, "-o", out)
    assert done.returncode == 0, done.stderr
    assert [path.name for path in out.parent.iterdir()] == ["bert.onnx"]
    assert run_tool("validate", out).returncode == 0
    feeds = checks.feeds_for(out.read_bytes(), *zoo_model("bert"))
    expected = onnxruntime.InferenceSession(str(source)).run(None, feeds)
    for got, want in zip(onnxruntime.InferenceSession(out.read_bytes()).run(None, feeds), expected, strict=True):
        assert (got == want).all()


def test_model_too_big_for_one_file_keeps_its_weights_beside_it(files, tmp_path, monkeypatch):
    """Check that a model over the protobuf limit (the limit lowered here) is
    written as OUT + OUT.data, the data file with the model file's mode."""
    monkeypatch.setattr(verbs, "INLINE_LIMIT", 1000)
    out = tmp_path / "big.onnx"
    import_dynamo.import_file(files["bert"]["dynamo"], out)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data"]
    assert Path(f"{out}.data").stat().st_mode == out.stat().st_mode
    assert out.stat().st_size < 1_000_000 < Path(f"{out}.data").stat().st_size
    assert run_tool("validate", out).returncode == 0
    reloaded = onnx.load(out)
    assert checks.strip_tags(reloaded).graph == onnx.load(files["bert"]["dynamo"]).graph


def test_calls_of_a_module_called_twice_are_numbered_and_extract_one_by_one(files, tmp_path):
    """Check that the second call of a module starts where the graph re-enters it
    after its caller's work, and that `extract --call 1` cuts that call out."""
    imported = onnx.load(files["called_twice"]["imported"])
    gemms = [checks.node_props(node) for node in imported.graph.node if node.op_type == "Gemm"]
    assert [props[core.TAG_KEY] for props in gemms] == ["/CalledTwice/Expert"] * 2
    assert [props[core.CALL_KEY] for props in gemms] == ["0", "1"]
    out = tmp_path / "call1.onnx"
    done = run_tool("extract", files["called_twice"]["imported"], "--module", "/CalledTwice/Expert",
                    "--call", "1", "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"] == 2 and out.exists()


@pytest.mark.parametrize("name", ["resnet", "called_twice", "containers"])
def test_verifier_passes_every_module_call_of_an_exact_import(files, name, tmp_path):
    """Check that the verifier extracts and boundary-checks every call of an
    imported file against eager PyTorch, and that these imports pass."""
    rows, failures = verify.verify_file(files[name]["imported"], *zoo_model(name), tmp_path)
    assert len(rows) == sum(len(e.get("calls", [0])) for e in checks.module_table(
        onnx.load(files[name]["imported"])).values())
    assert failures == []
    assert all(passed for *_, passed in rows), rows


def test_verifier_finds_the_value_dynamo_shares_across_bert_layers(files, tmp_path):
    """Check that the boundary check catches what dynamo's metadata does not say:
    the optimizer keeps one attention-mask computation, made inside layer 0's
    attention, for both layers, so layer 1 reads a value it never received."""
    rows, failures = verify.verify_file(files["bert"]["imported"], *zoo_model("bert"), tmp_path)
    failed = {key for key, *_, passed in rows if not passed}
    assert "/BertModel/BertEncoder/BertLayer.1/BertAttention/BertSelfAttention" in failed
    assert any("/BertModel/BertEncoder/BertLayer.1: consumes" in line and "not a tensor it received" in line
               for line in failures)
    # Every cut is written; those the boundary check refused cannot be run on
    # what the call received in eager PyTorch, and say so; the rest compute it.
    for key, _, extract, boundary, _ in rows:
        expected = "not checked" if boundary.startswith("FAIL") else "ok"
        assert extract.startswith(expected), (key, extract, boundary)


def test_torch_modules_1_gives_torch_nn_modules_the_torchscript_paths_segments(files, tmp_path):
    """Check that --torch-modules 1 keeps torch.nn modules as the plugin's
    HIERTAG_TORCH_MODULES=1 does: same tags."""
    out = tmp_path / "all.onnx"
    done = run_import(files["called_twice"]["dynamo"], "-o", out, "--torch-modules", "1")
    assert done.returncode == 0, done.stderr
    model, args = zoo_model("called_twice")
    reference = tmp_path / "reference.onnx"
    with hiertag.tagging(torch_modules=True):
        torch.onnx.export(model, args, str(reference), dynamo=False, opset_version=OPSET)
    imported = checks.module_table(onnx.load(out))
    assert "/CalledTwice/Expert/Linear" in imported
    assert set(imported) == set(checks.module_table(onnx.load(reference)))


def common_ancestor(tags):
    """The longest segment-wise prefix of tags: an oracle for the rules."""
    split = [tag.split("/") for tag in tags]
    common = []
    for segments in zip(*split, strict=False):
        if len(set(segments)) > 1:
            break
        common.append(segments[0])
    return "/".join(common)


def tags_by_output(model):
    return {name: checks.node_props(node)[core.TAG_KEY] for node in checks.walk_nodes(model.graph)
            for name in node.output}


def test_nodes_the_optimizer_made_take_their_neighbours_common_ancestor(tmp_path):
    """Check that the Splits onnxscript's optimizer makes for GPT-2's q/k/v (no
    metadata) are tagged by the neighbours rule with the attention they sit in."""
    exported, imported = tmp_path / "gpt2.dynamo.onnx", tmp_path / "gpt2.onnx"
    dynamo_export("gpt2", exported)
    summary = import_dynamo.import_file(exported, imported)
    model = onnx.load(imported)
    splits = [node for node in model.graph.node if import_dynamo.NAME_SCOPES_KEY not in checks.node_props(node)]
    assert [node.op_type for node in splits] == ["Split", "Split"]
    assert summary["tagged_by"]["neighbours"] == 2 and summary["tagged_by"]["metadata"] == summary["nodes"] - 2
    assert [checks.node_props(node)[core.TAG_KEY] for node in splits] == [
        f"/GPT2LMHeadModel/GPT2Model/GPT2Block.{layer}/GPT2Attention" for layer in (0, 1)]
    made = tags_by_output(model)
    for node in splits:
        readers = [checks.node_props(reader)[core.TAG_KEY] for reader in model.graph.node
                   if set(reader.input) & set(node.output)]
        neighbours = [made[name] for name in node.input if name in made] + readers
        assert checks.node_props(node)[core.TAG_KEY] == common_ancestor(neighbours)


def test_constants_without_metadata_take_their_readers_common_ancestor(tmp_path):
    """Check the consumers rule on an unoptimized export's Constants with their
    metadata removed: each gets the common ancestor of its readers' tags."""
    skip_unless_dynamo_export()
    exported = tmp_path / "called_twice.dynamo.onnx"
    model, args = zoo_model("called_twice")
    positional, keywords = import_dynamo.export_arguments(args)
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(model, positional, str(exported), kwargs=keywords, dynamo=True, optimize=False)
    model = onnx.load(exported)
    constants = [node for node in model.graph.node if node.op_type == "Constant"]
    assert constants
    for node in constants:
        del node.metadata_props[:]
    summary = import_dynamo.tag_dynamo_model(model)
    assert summary["tagged_by"]["consumers"] == len(constants)
    for node in constants:
        readers = [checks.node_props(reader)[core.TAG_KEY] for reader in model.graph.node
                   if set(reader.input) & set(node.output)]
        assert readers and checks.node_props(node)[core.TAG_KEY] == common_ancestor(readers)


class Gate(torch.nn.Module):
    """A branch (torch.cond): the dynamo exporter writes it as an If whose body
    nodes carry no module chain, though one branch calls a module."""

    def __init__(self):
        super().__init__()
        self.outer = zoo.corner_cases.Expert(8)
        self.inner = zoo.corner_cases.Expert(8)

    def forward(self, x):
        y = self.outer(x)
        return torch.cond(y.sum() > 0, lambda t: self.inner(t), lambda t: t * 2.0, (y,))


def test_nodes_in_if_bodies_take_the_tag_of_the_node_holding_them(tmp_path):
    """Check the enclosing rule on a real If: every body node gets the If's tag,
    and the file validates."""
    skip_unless_dynamo_export()
    exported, imported = tmp_path / "gate.dynamo.onnx", tmp_path / "gate.onnx"
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(Gate().eval(), (torch.randn(4, 8),), str(exported), dynamo=True)
    summary = import_dynamo.import_file(exported, imported)
    model = onnx.load(imported)
    branch = next(node for node in model.graph.node if node.op_type == "If")
    body = [node for graph in import_dynamo._subgraphs(branch) for node in checks.walk_nodes(graph)]
    assert body and summary["tagged_by"]["enclosing"] == len(body)
    assert {checks.node_props(node)[core.TAG_KEY] for node in body} == {checks.node_props(branch)[core.TAG_KEY]}
    assert checks.node_props(branch)[core.TAG_KEY] == "/Gate"
    assert run_tool("validate", imported).returncode == 0


def assert_refused(done, out, *words):
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert lines[0].startswith("hiertag import-dynamo: ") and "Traceback" not in done.stderr
    assert all(word in lines[0] for word in words), lines[0]
    assert not out.exists()
    assert not [leftover for leftover in out.parent.iterdir() if leftover.name.startswith(f".{out.name}")]


def test_untagged_torchscript_file_is_refused(tmp_path):
    """Check that a file without the dynamo exporter's metadata is refused, and nothing written."""
    plain = tmp_path / "plain.onnx"
    model, args = zoo_model("called_twice")
    torch.onnx.export(model, args, str(plain), dynamo=False, opset_version=OPSET)
    out = tmp_path / "out.onnx"
    assert_refused(run_import(plain, "-o", out), out, "pkg.torch.onnx.name_scopes", "dynamo=True")


def test_missing_file_is_refused(tmp_path):
    """Check that a missing input is one line, exit 2."""
    out = tmp_path / "out.onnx"
    assert_refused(run_import(tmp_path / "nothing.onnx", "-o", out), out,
                   "cannot open the file (missing or unreadable)")


def test_every_refusal_of_import_file_is_a_dynamo_import_error(files, tmp_path):
    """Check that import_file raises DynamoImportError for what the shared helpers
    refuse (a missing or non-ONNX input, an output that is the input) as for
    what import-dynamo itself refuses, and writes nothing."""
    text = tmp_path / "text.onnx"
    text.write_text("not a model\n")
    source = files["called_twice"]["dynamo"]
    out = tmp_path / "out.onnx"
    for args, said in (((tmp_path / "nothing.onnx", out), "cannot open the file"),
                       ((text, out), "not a well-formed ONNX model"),
                       ((source, source), "is the input"),
                       ((files["called_twice"]["hiertag"], out), "already tagged")):
        with pytest.raises(import_dynamo.DynamoImportError, match=said):
            import_dynamo.import_file(*args)
        assert not out.exists()


def test_non_onnx_file_is_refused(tmp_path):
    """Check that a file that is not ONNX is one line, exit 2."""
    text = tmp_path / "text.onnx"
    text.write_text("not a model\n")
    out = tmp_path / "out.onnx"
    assert_refused(run_import(text, "-o", out), out, "not a well-formed ONNX model")


@pytest.mark.parametrize("kind", ["hiertag", "imported"])
def test_already_tagged_file_is_refused(files, kind, tmp_path):
    """Check that a hiertag-tagged file (a TorchScript export, or an import) is refused."""
    out = tmp_path / "out.onnx"
    assert_refused(run_import(files["called_twice"][kind], "-o", out), out, "already tagged")


def test_bad_torch_modules_value_is_refused(files, tmp_path):
    """Check that --torch-modules takes what HIERTAG_TORCH_MODULES takes."""
    out = tmp_path / "out.onnx"
    assert_refused(run_import(files["called_twice"]["dynamo"], "-o", out, "--torch-modules", "Layer-Norm"),
                   out, "--torch-modules")


# Whether torch.onnx.export without dynamo= runs the dynamo exporter (torch 2.9 on) or
# the TorchScript one (2.4 to 2.8).
DEFAULT_IS_DYNAMO = inspect.signature(torch.onnx.export).parameters["dynamo"].default is True


@pytest.mark.skipif(DEFAULT_IS_DYNAMO, reason=f"torch {torch.__version__}'s default export is the dynamo one")
def test_hiertag_1_tags_the_default_call_where_it_is_the_torchscript_exporter(tmp_path, monkeypatch):
    """Check that where torch's default export call runs the TorchScript exporter
    (torch 2.4 to 2.8: the call a user of those releases writes), HIERTAG=1 tags it."""
    monkeypatch.setenv("HIERTAG", "1")
    model, args = zoo_model("called_twice")
    out = tmp_path / "default.onnx"
    torch.onnx.export(model, args, str(out))
    written = onnx.load(out)
    assert core.TABLE_KEY in checks.model_props(written)
    assert all(core.TAG_KEY in checks.node_props(node) for node in checks.walk_nodes(written.graph))


def test_flag_off_dynamo_export_is_torchs_own(tmp_path, monkeypatch):
    """Check that with HIERTAG unset or 0 the dynamo export is byte for byte the
    one of a process that never loaded hiertag: torch's metadata, no hiertag entry."""
    skip_unless_dynamo_export()
    never_loaded = tmp_path / "never_loaded.onnx"
    script = textwrap.dedent(f"""
        import contextlib, io, sys, torch
        from hiertag import zoo
        from hiertag.verbs import import_dynamo
        model, args = zoo.ALL["called_twice"]()
        positional, keywords = import_dynamo.export_arguments(args)
        with contextlib.redirect_stdout(io.StringIO()):
            torch.onnx.export(model, positional, {str(never_loaded)!r}, kwargs=keywords, dynamo=True)
    """)
    env = {key: value for key, value in os.environ.items() if not key.startswith("HIERTAG")}
    subprocess.run([sys.executable, "-c", script], check=True, env=env, cwd=ROOT, capture_output=True)
    for flag in (None, "0"):
        if flag is None:
            monkeypatch.delenv("HIERTAG", raising=False)
        else:
            monkeypatch.setenv("HIERTAG", flag)
        out = tmp_path / f"flag_{flag}.onnx"
        dynamo_export("called_twice", out)
        assert out.read_bytes() == never_loaded.read_bytes()
        assert Path(f"{out}.data").read_bytes() == Path(f"{never_loaded}.data").read_bytes()
    model = onnx.load(out)
    assert not any(key == core.TAG_KEY or key.startswith("hiertag.")
                   for node in checks.walk_nodes(model.graph) for key in checks.node_props(node))
    assert not any(key.startswith("hiertag.") for key in checks.model_props(model))
    assert all(import_dynamo.NAME_SCOPES_KEY in checks.node_props(node) for node in model.graph.node)
