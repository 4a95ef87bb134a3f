"""End-to-end: export real models with HIERTAG=1 and read the files back."""

import io
import json
import os

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from torch.onnx._internal.torchscript_exporter import utils as exporter_utils

from tests.e2e import tagged_model as tm
from tests.e2e.export_plain import OPSET
from tests.models import corner_cases, zoo


def export(model, args, flag):
    os.environ["HIERTAG"] = flag
    try:
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
        return buffer.getvalue()
    finally:
        os.environ.pop("HIERTAG", None)


def feeds_for(model_bytes, torch_model, args):
    """ONNX Runtime feeds: the arguments as the exporter itself decided them
    (keywords placed by signature, defaults such as GPT-2's logits_to_keep kept)."""
    decided = exporter_utils._decide_input_format(torch_model, args)
    values = [v for v in decided if isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool)]
    inputs = onnxruntime.InferenceSession(model_bytes).get_inputs()
    assert len(inputs) == len(values)
    return {i.name: (v.numpy() if isinstance(v, torch.Tensor) else np.array(v)) for i, v in zip(inputs, values)}


def run(model_bytes, feeds):
    return onnxruntime.InferenceSession(model_bytes).run(None, feeds)


# Known failures, strict: each fails the suite once it starts passing.
TORCH_SCRIPTED_EXPORT_NOT_REPEATABLE = (
    "torch itself: two exports of one scripted model differ (measured without hiertag: 2008 vs 1763 bytes)")
BOUNDARY_OPEN = {
    "bert": "mask Expand in the root consumed by the encoder; root kwargs not matched by the checker",
    "clip": "attention mask Expand consumed by the text encoder layers",
    "gpt2": "logits_to_keep / mask inputs and the sliced logits at the root",
    "llama": "rotary/mask Unsqueeze kept by CSE in layer 0 for layer 1; RMSNorm Cast outputs",
    "resnet": "open: not yet analysed",
    "sam": "open: not yet analysed",
    "scripted_loop": "open: not yet analysed",
    "shared_subexpression": "open: CSE-shared chain seen by the checker",
    "t5": "relative position bias shared by the layers",
}


def known_failure(reason):
    return pytest.mark.xfail(strict=True, reason=reason)


@pytest.fixture(scope="module", params=sorted(zoo.ALL))
def exported(request):
    torch_model, args = zoo.ALL[request.param]()
    tagged = export(torch_model, args, "1")
    plain = export(torch_model, args, "0")
    return request.param, torch_model, args, tagged, plain


def test_every_node_has_a_tag_listed_in_the_module_table(exported):
    name, _, _, tagged, _ = exported
    model = onnx.load_from_string(tagged)
    table = tm.module_table(model)
    nodes = list(tm.walk_nodes(model.graph))
    assert nodes
    for node in nodes:
        props = tm.node_props(node)
        assert tm.TAG_KEY in props, f"{name}: node {node.name} ({node.op_type}) has no tag"
        assert props[tm.TAG_KEY] in table, f"{name}: {props[tm.TAG_KEY]} not in the module table"
        for shared in json.loads(props.get(tm.SHARED_KEY, "[]")):
            assert shared in table
    for tag in table:
        parent = tag.rsplit("/", 1)[0]
        assert parent == "" or parent in table, f"{name}: ancestor {parent} of {tag} missing"


def test_module_table_names_the_real_module_instances(exported):
    name, torch_model, _, tagged, _ = exported
    table = tm.module_table(onnx.load_from_string(tagged))
    modules = dict(torch_model.named_modules())
    paths = [entry["path"] for entry in table.values()]
    assert len(paths) == len(set(paths)), f"{name}: two tags name one module"
    for tag, entry in table.items():
        assert entry["path"] in modules, f"{name}: {tag} -> unknown path {entry['path']!r}"
        module = modules[entry["path"]]
        if isinstance(module, torch.jit.ScriptModule):
            assert entry["class"].endswith("." + module.original_name) or entry["class"] == module.original_name
            short = module.original_name
        else:
            assert entry["class"] == torch.typename(type(module))
            short = type(module).__name__
        assert tag.rsplit("/", 1)[1].split(".")[0].split("[")[0] == short
    root_tag = [t for t, e in table.items() if e["path"] == ""]
    assert len(root_tag) == 1 and root_tag[0].count("/") == 1


def test_checker_accepts_and_runtime_gives_identical_outputs(exported):
    _, torch_model, args, tagged, plain = exported
    onnx.checker.check_model(onnx.load_from_string(tagged), full_check=True)
    feeds = feeds_for(plain, torch_model, args)
    for ours, theirs in zip(run(tagged, feeds), run(plain, feeds)):
        np.testing.assert_array_equal(ours, theirs)


def test_tags_survive_a_load_save_round_trip(exported, tmp_path):
    _, _, _, tagged, _ = exported
    path = tmp_path / "round_trip.onnx"
    onnx.save(onnx.load_from_string(tagged), path)
    again = onnx.load(path)
    assert [tm.node_props(n) for n in tm.walk_nodes(again.graph)] == \
        [tm.node_props(n) for n in tm.walk_nodes(onnx.load_from_string(tagged).graph)]


def test_rest_of_the_file_equals_the_untagged_export(exported, request):
    name, _, _, tagged, plain = exported
    if name == "scripted_model":
        request.applymarker(known_failure(TORCH_SCRIPTED_EXPORT_NOT_REPEATABLE))
    stripped = tm.strip_tags(onnx.load_from_string(tagged))
    assert stripped.SerializeToString() == onnx.load_from_string(plain).SerializeToString()


def test_flag_off_is_byte_identical_to_a_process_without_hiertag(exported, never_loaded_exports, request):
    name, _, _, _, plain = exported
    if name == "scripted_model":
        request.applymarker(known_failure(TORCH_SCRIPTED_EXPORT_NOT_REPEATABLE))
    assert plain == never_loaded_exports[name]


def test_every_module_passes_the_boundary_check(exported, request):
    name, torch_model, args, tagged, plain = exported
    if name in BOUNDARY_OPEN:
        request.applymarker(known_failure(BOUNDARY_OPEN[name]))
    model = onnx.load_from_string(tagged)
    reference = corner_cases.EAGER_TWINS.get(id(torch_model), torch_model)
    checked, skipped, failures = tm.check_module_boundaries(model, reference, args,
                                                            feeds_for(plain, torch_model, args))
    assert checked
    assert not failures, f"{name}: " + "\n".join(failures)
