"""End-to-end: every module of real exports extracted with the native tool (hiertag extract)
extract is a valid model that reproduces the full model's values."""

import json

import numpy as np
import onnx
import onnxruntime
import pytest

from hiertag import checks, zoo
from tests.e2e.exportable import zoo_model
from tests.e2e.test_export import export, run_tool


@pytest.mark.parametrize("name", ["bert", "gpt2", "t5", "resnet", "vit"])
def test_every_module_extracts_to_a_model_that_reproduces_the_full_model(name, tmp_path):
    torch_model, args = zoo_model(name)
    tagged = export(torch_model, args, "1")
    source = tmp_path / "model.onnx"
    source.write_bytes(tagged)
    model = onnx.load_from_string(tagged)
    extracted = {}
    for tag in checks.module_table(model):
        out = tmp_path / f"module{len(extracted)}.onnx"
        result = run_tool("extract", source, "--module", tag, "-o", out, "--json")
        assert result.returncode == 0, f"{tag}: {result.stderr}"
        extracted[tag] = (out, json.loads(result.stdout))
    wanted = sorted({n for _, info in extracted.values() for n in info["inputs"] + info["outputs"]})
    values = checks.intermediate_values(model, checks.feeds_for(tagged, torch_model, args), wanted)
    for tag, (path, info) in extracted.items():
        module = onnx.load(path)
        onnx.checker.check_model(module, full_check=True)
        assert module.opset_import == model.opset_import and module.ir_version == model.ir_version
        session = onnxruntime.InferenceSession(str(path))
        assert [i.name for i in session.get_inputs()] == info["inputs"]
        produced = session.run(info["outputs"], {n: values[n] for n in info["inputs"]})
        for output, value in zip(info["outputs"], produced, strict=True):
            np.testing.assert_allclose(value, values[output], rtol=1e-4, atol=1e-5, err_msg=f"{tag}: {output}")


def test_extract_refuses_unknown_module_and_writes_nothing(tmp_path):
    torch_model, args = zoo.bert()
    source = tmp_path / "model.onnx"
    source.write_bytes(export(torch_model, args, "1"))
    out = tmp_path / "out.onnx"
    result = run_tool("extract", source, "--module", "/BertModel/BertEncoder/BertLayr.0", "-o", out)
    assert result.returncode == 2 and result.stdout == "" and not out.exists()
    assert "closest: /BertModel/BertEncoder/BertLayer.0" in result.stderr
