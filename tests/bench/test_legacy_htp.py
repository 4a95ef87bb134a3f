"""The legacy HTP baseline writes hiertag's format and shows its known defect.

Each legacy export runs in a process of its own: the baseline patches torch,
as the tool it reproduces did, and leaves the process unable to export some
models afterwards (bench/legacy_htp.py)."""

import subprocess
import sys
from pathlib import Path

import onnx

from tests.e2e.test_export import export
from tests.models import zoo

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import metrics  # noqa: E402


def legacy_export(name, path):
    subprocess.run([sys.executable, str(BENCH / "legacy_htp.py"), f"zoo:{name}", str(path)], check=True,
                   capture_output=True)
    return onnx.load(path)


def test_legacy_htp_writes_a_valid_file_in_hiertags_format(tmp_path):
    written = legacy_export("bert", tmp_path / "legacy.onnx")
    onnx.checker.check_model(written, full_check=True)
    tagged, total = metrics.coverage(written)
    assert tagged == total > 0


def test_projection_crosses_layers_where_hiertag_does_not(tmp_path):
    legacy = metrics.cross_layer_contamination(legacy_export("bert", tmp_path / "legacy.onnx"))
    model, args = zoo.bert()
    ours = metrics.cross_layer_contamination(onnx.load_from_string(export(model, args, "1")))
    assert ours == []
    assert legacy, "the baseline's trace projection is expected to cross layers on a 2-layer BERT"


def test_contamination_counts_a_node_named_in_one_layer_and_tagged_in_another():
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="/encoder/layer.1/attention/Relu")
    node.metadata_props.add(key="hierarchy_tag", value="/M/L.0")
    other = onnx.helper.make_node("Relu", ["y"], ["z"], name="/encoder/layer.0/attention/Relu")
    other.metadata_props.add(key="hierarchy_tag", value="/M/L.0")
    graph = onnx.helper.make_graph([node, other], "g", [], [])
    model = onnx.helper.make_model(graph)
    model.metadata_props.add(key="hiertag.modules",
                             value='{"/M": {"path": "", "class": "M"}, "/M/L.0": {"path": "encoder.layer.0", "class": "L"}}')
    assert metrics.cross_layer_contamination(model) == ["/encoder/layer.1/attention/Relu"]
