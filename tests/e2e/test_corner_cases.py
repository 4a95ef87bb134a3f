"""End-to-end checks of the corner cases no library model shows, by name."""

import json

import onnx
import pytest

from scripts import hiertag_checks as tm
from tests.e2e.test_export import export
from tests.models import zoo


def tagged(name):
    model, args = zoo.ALL[name]()
    return onnx.load_from_string(export(model, args, "1"))


def tags_of(model, op_type):
    return [tm.node_props(n)[tm.TAG_KEY] for n in tm.walk_nodes(model.graph) if n.op_type == op_type]


def test_containers_disambiguate_same_class_siblings_behind_filtered_containers():
    table = tm.module_table(tagged("containers"))
    experts = {tag: entry["path"] for tag, entry in table.items() if entry["class"].endswith(".Expert")}
    assert experts == {
        "/Containers/Expert[stages.0.0]": "stages.0.0", "/Containers/Expert[stages.0.1]": "stages.0.1",
        "/Containers/Expert[stages.1.0]": "stages.1.0", "/Containers/Expert[stages.1.1]": "stages.1.1",
        "/Containers/Expert[heads.left]": "heads.left", "/Containers/Expert[heads.right]": "heads.right",
    }


def test_module_called_twice_keeps_one_tag_for_both_calls():
    model = tagged("called_twice")
    assert tags_of(model, "Gemm") == ["/CalledTwice/Expert", "/CalledTwice/Expert"]
    assert tags_of(model, "Softmax") == ["/CalledTwice"]


def test_children_of_a_directly_called_forward_keep_their_instance():
    model = tagged("direct_forward")
    assert tags_of(model, "LayerNormalization") == ["/DirectForward/Block.0/Norm", "/DirectForward/Block.1/Norm"]
    # The residual Add is written in Block.forward, which was called as
    # block.forward(x): torch records no call, so it belongs to the caller.
    assert tags_of(model, "Add") == ["/DirectForward", "/DirectForward"]


def test_scripted_function_loop_belongs_to_the_layer_that_called_it():
    model = tagged("scripted_loop")
    assert tags_of(model, "Loop") == ["/ScriptedLoop/LoopLayer.0", "/ScriptedLoop/LoopLayer.1"]
    assert tags_of(model, "Mul") == ["/ScriptedLoop/LoopLayer.0", "/ScriptedLoop/LoopLayer.1"]


def test_autograd_function_symbolic_nodes_belong_to_their_module():
    model = tagged("autograd_symbolic")
    assert tags_of(model, "Clip") == ["/AutogradSymbolic/Clamped.0", "/AutogradSymbolic/Clamped.1"]


def test_node_merged_by_cse_lists_the_other_layer():
    model = tagged("shared_subexpression")
    shared = [(tm.node_props(n)[tm.TAG_KEY], json.loads(tm.node_props(n)[tm.SHARED_KEY]))
              for n in model.graph.node if tm.SHARED_KEY in tm.node_props(n)]
    assert shared
    assert all(tag == "/SharedSubexpression/PositionalLayer.0" and others == ["/SharedSubexpression/PositionalLayer.1"]
               for tag, others in shared)


def test_scripted_model_table_names_the_real_classes_and_paths():
    table = tm.module_table(tagged("scripted_model"))
    assert {tag: (e["path"], e["class"]) for tag, e in table.items()} == {
        "/Scripted": ("", "tests.models.corner_cases.Scripted"),
        "/Scripted/ScriptedChild.0": ("layers.0", "tests.models.corner_cases.ScriptedChild"),
        "/Scripted/ScriptedChild.1": ("layers.1", "tests.models.corner_cases.ScriptedChild"),
        "/Scripted/ScriptedChild.0/Expert": ("layers.0.inner", "tests.models.corner_cases.Expert"),
        "/Scripted/ScriptedChild.1/Expert": ("layers.1.inner", "tests.models.corner_cases.Expert"),
    }


@pytest.mark.parametrize("setting, expected", [
    ("1", "/Containers/ModuleList/Sequential.0/Expert.0"),
    ("Sequential", "/Containers/Sequential.0/Expert.0"),
    ("LayerNorm", "/Containers/Expert[stages.0.0]"),
])
def test_torch_modules_setting_gives_torch_nn_modules_segments(monkeypatch, setting, expected):
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", setting)
    table = tm.module_table(tagged("containers"))
    assert expected in table
    assert [e["path"] for t, e in table.items() if t == expected] == ["stages.0.0"]


def test_invalid_flag_is_an_error_before_anything_is_written(tmp_path, monkeypatch):
    model, args = zoo.ALL["containers"]()
    monkeypatch.setenv("HIERTAG", "yes")
    path = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match="HIERTAG='yes' is not valid"):
        import torch
        torch.onnx.export(model, args, str(path), dynamo=False)
    assert not path.exists()


def test_invalid_torch_modules_setting_is_an_error(monkeypatch):
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "Layer Norm;x")
    with pytest.raises(ValueError, match="HIERTAG_TORCH_MODULES"):
        tagged("containers")
