"""Loading the plugin more than once is harmless."""

import shutil

import onnx
import torch

from scripts import hiertag_checks as tm
from tests.conftest import PLUGIN
from tests.e2e.test_export import export
from tests.models import zoo


def assert_tagged_once(model_bytes):
    for node in tm.walk_nodes(onnx.load_from_string(model_bytes).graph):
        keys = [p.key for p in node.metadata_props]
        assert keys.count(tm.TAG_KEY) == 1, f"{node.name}: {keys}"


def test_loading_the_same_library_again_changes_nothing():
    torch.ops.load_library(str(PLUGIN))
    model, args = zoo.ALL["containers"]()
    assert_tagged_once(export(model, args, "1"))


def test_loading_a_copy_from_another_path_installs_nothing_twice(tmp_path):
    for name in ("libhiertag.so", "libhiertag_python.so"):
        shutil.copy(PLUGIN.parent / name, tmp_path / name)
    torch.ops.load_library(str(tmp_path / "libhiertag.so"))
    model, args = zoo.ALL["containers"]()
    assert_tagged_once(export(model, args, "1"))
