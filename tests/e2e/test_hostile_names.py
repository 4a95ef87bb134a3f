"""Module names as hostile as Python allows (zoo model hostile_names): they
round-trip exactly through the module table, --json and --csv, stay one
printable line in tags and in the text output, and name their module to
extract; HIERTAG_TORCH_MODULES naming no torch class says so."""

import csv
import io
import json
import os
import unicodedata
import urllib.parse

import onnx
import onnxruntime
import pytest
import torch
from torch import nn

from hiertag import OPSET, checks, core
from hiertag.zoo import corner_cases
from tests.e2e import native_tool
from tests.e2e.exportable import zoo_model

ROOT_TAG = "/HostileNames"


def run_tool(*args):
    """(exit status, stdout, stderr), output as bytes: nothing decoded away."""
    done = native_tool.run_tool(*args, text=False)
    return done.returncode, done.stdout, done.stderr


def controls(text):
    """The control characters (Unicode category Cc) in `text`."""
    return [c for c in text if unicodedata.category(c) == "Cc"]


def export(model, args, path=None):
    os.environ["HIERTAG"] = "1"
    try:
        target = path if path is not None else io.BytesIO()
        torch.onnx.export(model, args, target, dynamo=False, opset_version=OPSET)
        return None if path is not None else target.getvalue()
    finally:
        os.environ.pop("HIERTAG", None)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(torch model, args, path of the tagged file, its ModelProto)."""
    model, args = zoo_model("hostile_names")
    path = tmp_path_factory.mktemp("hostile") / "hostile.onnx"
    export(model, args, path)
    return model, args, path, onnx.load(path)


def tagged_modules(model):
    """{qualified name: module} of the modules with a tag segment (not torch.nn)."""
    return {name: module for name, module in model.named_modules()
            if not torch.typename(type(module)).startswith("torch.nn.")}


def test_table_paths_and_classes_are_the_exact_python_names(exported):
    model, _, _, proto = exported
    table = checks.module_table(proto)
    assert {entry["path"]: entry["class"] for entry in table.values()} == \
        {name: torch.typename(type(module)) for name, module in tagged_modules(model).items()}
    paths = {entry["path"] for entry in table.values()}
    assert set(corner_cases.HOSTILE_NAMES) <= paths
    classes = {entry["class"] for entry in table.values()}
    assert {f"hiertag.zoo.corner_cases.{name}" for name in corner_cases.HOSTILE_NAMES if "\x00" not in name} <= classes


def test_tags_are_printable_and_escape_what_the_grammar_and_the_terminal_cannot_hold(exported):
    table = checks.module_table(exported[3])
    for tag in table:
        assert not controls(tag), repr(tag)
    spelled = {entry["path"]: tag for tag, entry in table.items()}
    assert spelled["line\nbreak"] == ROOT_TAG + "/Expert[line%0Abreak]"
    assert spelled["esc\x1b[31m"] == ROOT_TAG + "/Expert[esc%1B%5B31m]"
    assert spelled["nul\x00"] == ROOT_TAG + "/Expert[nul%00]"
    assert spelled["csi\x9b"] == ROOT_TAG + "/Expert[csi%C2%9B]"
    assert spelled["del\x7f"] == ROOT_TAG + "/Expert[del%7F]"
    assert spelled["~tilde"] == ROOT_TAG + "/Expert[%7Etilde]"
    assert spelled['say "hi"'] == ROOT_TAG + '/Expert[say "hi"]'
    assert spelled["層"] == ROOT_TAG + "/Expert[層]"
    assert spelled["stack/\n1.0"] == ROOT_TAG + "/Expert[stack%2F%0A1.0]"
    assert spelled["classes.5"] == ROOT_TAG + "/line%0Abreak.5"
    assert spelled["classes.7"] == ROOT_TAG + "/esc%1B%5B31m.7"


def test_every_qualifier_and_class_decodes_to_the_python_name(exported):
    model, _, _, proto = exported
    modules = tagged_modules(model)
    for tag, entry in checks.module_table(proto).items():
        if entry["path"] == "":
            continue
        segment = tag.rsplit("/", 1)[1]
        if segment.endswith("]"):
            class_part, qualifier = segment[:-1].split("[", 1)
            assert urllib.parse.unquote(qualifier, errors="strict") == entry["path"]
        else:
            class_part = segment.rsplit(".", 1)[0]
        assert urllib.parse.unquote(class_part, errors="strict") == type(modules[entry["path"]]).__name__


def test_nodes_carry_the_tags_of_the_table(exported):
    proto = exported[3]
    table = checks.module_table(proto)
    gemm_tags = [checks.node_props(n)[core.TAG_KEY] for n in proto.graph.node if n.op_type == "Gemm"]
    assert len(gemm_tags) == len(table) - 1 == len(set(gemm_tags))
    assert set(gemm_tags) == set(table) - {ROOT_TAG}


def test_checker_and_onnx_runtime_accept_the_file_with_torch_outputs(exported):
    model, args, path, proto = exported
    onnx.checker.check_model(proto, full_check=True)
    (output,) = onnxruntime.InferenceSession(str(path)).run(None, {proto.graph.input[0].name: args[0].numpy()})
    torch.testing.assert_close(torch.from_numpy(output), model(*args), rtol=1e-5, atol=1e-6)


def test_validate_says_valid(exported):
    status, out, _ = run_tool("validate", exported[2])
    assert status == 0, out
    assert out.decode().endswith(" modules\n") and ": valid: " in out.decode()


def test_tree_text_shows_one_line_per_module_with_control_characters_escaped(exported):
    _, _, path, proto = exported
    status, out, _ = run_tool("tree", path)
    assert status == 0
    text = out.decode("utf-8", errors="strict")
    lines = text.splitlines()
    assert not [line for line in lines if controls(line)]
    header_lines = [line for line in lines if not line.lstrip().startswith(("nodes ", "ops "))]
    assert len(header_lines) == len(checks.module_table(proto))
    assert "  Expert[line%0Abreak]  hiertag.zoo.corner_cases.Expert  line\\nbreak" in lines
    assert "  Expert[esc%1B%5B31m]  hiertag.zoo.corner_cases.Expert  esc\\x1b[31m" in lines
    assert "  Expert[nul%00]  hiertag.zoo.corner_cases.Expert  nul\\x00" in lines
    assert "  Expert[csi%C2%9B]  hiertag.zoo.corner_cases.Expert  csi\\u009b" in lines
    assert "  tab%09stop.6  hiertag.zoo.corner_cases.tab\\tstop  classes.6" in lines


def test_tree_json_and_csv_carry_the_exact_values(exported):
    _, _, path, proto = exported
    expected = {tag: (entry["path"], entry["class"]) for tag, entry in checks.module_table(proto).items()}
    status, out, _ = run_tool("tree", path, "--json")
    assert status == 0
    modules = json.loads(out.decode("utf-8", errors="strict"))["modules"]
    assert {m["tag"]: (m["path"], m["class"]) for m in modules} == expected
    status, out, _ = run_tool("tree", path, "--csv")
    assert status == 0
    rows = list(csv.DictReader(io.StringIO(out.decode("utf-8", errors="strict"), newline="")))
    assert {row["tag"]: (row["path"], row["class"]) for row in rows} == expected


@pytest.mark.parametrize("name", ["line\nbreak", "nul\x00", 'say "hi"', "it's", "層", "stack/\n1.0", "classes.7"])
def test_extract_takes_the_tag_as_tree_prints_it(exported, name, tmp_path):
    model, args, path, proto = exported
    tag = next(tag for tag, entry in checks.module_table(proto).items() if entry["path"] == name)
    out_path = tmp_path / "module.onnx"
    status, out, err = run_tool("extract", path, "--module", tag, "-o", out_path)
    assert status == 0, err
    assert out.decode() == f"{out_path}: {tag}: 2 nodes, 1 inputs, 1 outputs, 2 initializers\n"
    extracted = onnx.load(out_path)
    assert checks.module_table(extracted)[tag]["path"] == name
    module = dict(model.named_modules())[name]
    inputs = torch.randn(4, 8)
    (output,) = onnxruntime.InferenceSession(str(out_path)).run(None, {extracted.graph.input[0].name: inputs.numpy()})
    torch.testing.assert_close(torch.from_numpy(output), module(inputs), rtol=1e-5, atol=1e-6)


def test_unknown_module_error_stays_one_line_with_escapes(exported):
    status, out, err = run_tool("extract", exported[2], "--module", ROOT_TAG + "/Expert[esc\x1b[2Jnew\nline]")
    assert status == 2 and out == b""
    text = err.decode("utf-8", errors="strict")
    assert text.count("\n") == 1 and not controls(text.rstrip("\n"))
    assert "unknown module '/HostileNames/Expert[esc\\x1b[2Jnew\\nline]'; closest: " in text


def test_the_cores_escaping_spells_segments_as_the_plugin_wrote_them(exported):
    # The Python verbs (import-dynamo) escape through the core's extension (hiertag.core).
    model, _, _, proto = exported
    modules = tagged_modules(model)
    for tag, entry in checks.module_table(proto).items():
        segment = tag.rsplit("/", 1)[1]
        short = type(modules[entry["path"]]).__name__
        if segment.endswith("]"):
            assert segment == f"{core.escape_class_name(short)}[{core.escape_qualifier(entry['path'])}]"
        else:
            assert segment.split(".")[0] == core.escape_class_name(short)


class _Net(nn.Module):
    def __init__(self, children):
        super().__init__()
        for name, child in children.items():
            setattr(self, name, child)

    def forward(self, x):
        for child in self.children():
            x = child(x)
        return x


def test_a_name_from_bytes_that_are_not_utf8_is_refused_by_torch_with_or_without_hiertag():
    # os.fsdecode(b"\xff") is "\udcff": torch's exporter cannot pass it to C++
    # and raises before hiertag sees the model, so no tag ever holds one.
    name = os.fsdecode(b"layer\xff")
    for flag in ("0", "1"):
        os.environ["HIERTAG"] = flag
        try:
            with pytest.raises(TypeError, match="_jit_onnx_create_full_scope_name"):
                torch.onnx.export(_Net({name: nn.Linear(2, 2)}), (torch.randn(1, 2),), io.BytesIO(),
                                  dynamo=False, opset_version=OPSET)
        finally:
            os.environ.pop("HIERTAG", None)


def test_names_the_module_table_cannot_hold_are_refused_in_one_line():
    # Two modules under one qualified name, and a class without a name.
    dotted = _Net({"a.b": corner_cases.Expert(2), "a": _Net({"b": corner_cases.Expert(2)})})
    nameless = _Net({"a": type("", (corner_cases.Expert,), {})(2)})
    for model, reason in ((dotted, "two modules have the qualified name 'a.b'"),
                          (nameless, "module 'a' has a class with an empty name")):
        with pytest.raises(ValueError) as refused:
            export(model, (torch.randn(1, 2),))
        assert str(refused.value).startswith("hiertag: " + reason) and "\n" not in str(refused.value)


def test_torch_modules_naming_no_torch_class_says_so_and_exports(capsys, monkeypatch):
    model, args = zoo_model("containers")
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "Linear,LayerNrom,Expert")
    table = checks.module_table(onnx.load_from_string(export(model, args)))
    warnings = [line for line in capsys.readouterr().err.splitlines() if "HIERTAG_TORCH_MODULES" in line]
    assert warnings == ["hiertag: HIERTAG_TORCH_MODULES names 'Expert', 'LayerNrom', which are not torch.nn or "
                        "torch.ao classes: they have no effect (the list picks the torch classes that keep a tag "
                        "segment; every other class has one)"]
    assert any(entry["class"] == "torch.nn.modules.linear.Linear" for entry in table.values())


def test_torch_modules_naming_only_torch_classes_prints_nothing(capsys, monkeypatch):
    model, args = zoo_model("containers")
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "Linear,LayerNorm")
    export(model, args)
    assert "HIERTAG_TORCH_MODULES" not in capsys.readouterr().err
