"""The legacy HTP baseline writes hiertag's format and shows its known defect."""

import sys
from pathlib import Path

import onnx

from tests.e2e.test_export import export
from tests.models import zoo

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import legacy_htp  # noqa: E402
import metrics  # noqa: E402


def test_legacy_htp_writes_a_valid_file_in_hiertags_format(tmp_path):
    model, args = zoo.bert()
    path = tmp_path / "legacy.onnx"
    trace = legacy_htp.export(model, args, str(path))
    written = onnx.load(path)
    onnx.checker.check_model(written, full_check=True)
    tagged, total = metrics.coverage(written)
    assert trace and tagged == total > 0


def test_projection_crosses_layers_where_hiertag_does_not(tmp_path):
    model, args = zoo.bert()
    path = tmp_path / "legacy.onnx"
    legacy_htp.export(model, args, str(path))
    legacy = metrics.cross_layer_contamination(onnx.load(path))
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
