"""The legacy HTP baseline writes hiertag's format, shows its known defect,
and leaves torch as it found it.

Each legacy export runs in a process of its own, as in the benchmark: the
baseline patches torch while it exports."""

import subprocess
import sys
from pathlib import Path

import onnx

import metrics
from hiertag import zoo
from tests.e2e.test_export import export

BENCH = Path(__file__).resolve().parents[2] / "bench"


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


AFTER_LEGACY = """
import io, sys, warnings
sys.path.insert(0, {bench!r})
warnings.simplefilter("ignore")
import torch, legacy_htp
from hiertag import OPSET, zoo
before = dict(vars(torch.Tensor))
model, args = zoo.bert()
legacy_htp.export(model, args, {path!r})
assert dict(vars(torch.Tensor)) == before, "torch.Tensor changed"
model, args = zoo.gpt2()
torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=OPSET)
"""


def test_torch_exports_other_models_after_a_legacy_export(tmp_path):
    # Assigning torch.Tensor.__getitem__, as the original tool did, left every
    # later export of GPT-2 in the process failing ("len() of a 0-d tensor").
    script = AFTER_LEGACY.format(root=str(BENCH.parent), bench=str(BENCH), path=str(tmp_path / "legacy.onnx"))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]


EVERY_ARCHITECTURE = """
import sys, warnings
sys.path.insert(0, {bench!r})
warnings.simplefilter("ignore")
import legacy_htp
from hiertag import zoo
for name in {names!r}:
    model, args = zoo.ALL[name]()
    legacy_htp.export(model, args, {directory!r} + "/" + name + ".onnx")
"""


def test_legacy_htp_exports_the_benchmarks_architectures(tmp_path):
    # One process for all, as a user of the original tool would run them; each
    # must still export (LLaMA's rotary code passes dtype=torch.float, which a
    # patch of the dtype torch.float turned into a function).
    names = ["bert", "gpt2", "t5", "llama", "vit", "resnet"]
    script = EVERY_ARCHITECTURE.format(root=str(BENCH.parent), bench=str(BENCH), names=names,
                                       directory=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    for name in names:
        tagged, total = metrics.coverage(onnx.load(tmp_path / f"{name}.onnx"))
        assert tagged == total > 0


def test_contamination_counts_a_node_named_in_one_layer_and_tagged_in_another():
    node = onnx.helper.make_node("Relu", ["x"], ["y"], name="/encoder/layer.1/attention/Relu")
    node.metadata_props.add(key="hierarchy_tag", value="/M/L.0")
    other = onnx.helper.make_node("Relu", ["y"], ["z"], name="/encoder/layer.0/attention/Relu")
    other.metadata_props.add(key="hierarchy_tag", value="/M/L.0")
    graph = onnx.helper.make_graph([node, other], "g", [], [])
    model = onnx.helper.make_model(graph)
    table = '{"/M": {"path": "", "class": "M"}, "/M/L.0": {"path": "encoder.layer.0", "class": "L"}}'
    model.metadata_props.add(key="hiertag.modules", value=table)
    assert metrics.cross_layer_contamination(model) == ["/encoder/layer.1/attention/Relu"]
