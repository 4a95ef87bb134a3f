"""The bundled models (hiertag.zoo, its sweep_models too) torch's own exporters
cannot export, without hiertag (in a process that never loaded it), per torch
release and the transformers release its venv pins (scripts/torch_requirements.py),
each with a stable part of the error torch gives. A test skips a model only where
this table says torch fails on it, for this reason; any other failure of a plain
export fails the test: a model the table does not name, another error, an error
raised building the model (a bug in a zoo builder, a transformers release missing
a class) or raised by code that is not torch's (the model's own forward).
test_expected_skips.py and test_dynamo.py check that exactly these models fail,
with these errors, on the release that runs them.

Measured with tests/e2e/export_plain.py (`scripts/test_torch.sh VERSION --
tests/e2e/test_expected_skips.py tests/e2e/test_dynamo.py` runs both checks)."""

import re

import pytest
import torch
import transformers

# torch 2.4 with transformers 4.57: torch 2.4's symbolic for scaled_dot_product_attention
# cannot take the float `scale` transformers 4.57 passes (its message's last line:
# "(Occurred when translating scaled_dot_product_attention)"). On torch < 2.5 transformers
# 4.57 ors its causal masks in place (`causal_mask |= ...`: aten::__ior_), and Mistral's
# sliding window ands masks (aten::bitwise_and, ONNX's from opset 18): no symbolic at opset 17.
_SDPA_SCALE = "(Occurred when translating scaled_dot_product_attention)"
_MASK_OR = "UnsupportedOperatorError: Exporting the operator 'aten::__ior_' to ONNX opset version 17"
# Routers of mixture-of-experts models count tokens per expert with a histogram.
_HISTC = "UnsupportedOperatorError: Exporting the operator 'aten::histc' to ONNX opset version 17"
# ViLT samples image patches with a number of samples computed from the input.
_MULTINOMIAL = ("SymbolicValueError: Expected node type 'onnx::Constant' for argument 'num_samples' "
                "of node 'multinomial'")

# (torch release, transformers release) -> {model: part of the error of torch.onnx.export(..., dynamo=False)}
TORCHSCRIPT = {
    ("2.4", "4.57"): {
        **{name: _SDPA_SCALE for name in (
            "vit", "clip", "sam", "wav2vec2", "ast", "bart", "beit", "blenderbot_small", "data2vec_audio", "deit",
            "dinov2", "hubert", "m2m100", "marian", "mbart", "opt", "pegasus", "siglip", "whisper")},
        **{name: _MASK_OR for name in ("gpt2", "llama", "gemma", "gpt_bigcode", "mixtral", "phi", "qwen2")},
        "mistral": "UnsupportedOperatorError: Exporting the operator 'aten::bitwise_and' to ONNX opset version 17",
        "vilt": _MULTINOMIAL,
    },
    ("2.13", "5.23"): {"mixtral": _HISTC, "qwen2_moe": _HISTC, "vilt": _MULTINOMIAL},
    ("2.14", "5.23"): {"mixtral": _HISTC, "qwen2_moe": _HISTC, "vilt": _MULTINOMIAL},
}

# The dynamo exporter (torch.onnx.export(..., dynamo=True, kwargs=...)) on hiertag.zoo.
# None: torch has no such exporter (torch 2.4's dynamo=True is the older
# dynamo_export, which takes no kwargs= and writes no module metadata).
_DYNAMO_FROM_2_13 = {
    # T5's and SAM's attention view a transposed (non-contiguous) tensor as merged heads
    "t5": "<class 'ValueError'>: Cannot view a tensor with shape",
    "sam": "<class 'ValueError'>: Cannot view a tensor with shape",
    "scripted_model": "<class 'ValueError'>: Exporting a ScriptModule is not supported",
    # a branch on a tensor's value (clamp_if_large: `if bool(x.abs().max() > 100.0)`)
    "alias_chains": "GuardOnDataDependentSymNode'>: Could not guard on data-dependent expression",
    # torch.fx writes the graph as Python source named after the modules: a NUL in a module's name
    "hostile_names": "<class 'SyntaxError'>: source code string cannot contain null bytes",
}
DYNAMO = {
    ("2.4", "4.57"): None,
    ("2.13", "5.23"): _DYNAMO_FROM_2_13,
    ("2.14", "5.23"): _DYNAMO_FROM_2_13,
}

EXPORTERS = {"torchscript": TORCHSCRIPT, "dynamo": DYNAMO}


def _release(version):
    return ".".join(re.match(r"(\d+)\.(\d+)", version).groups())


def release():
    """(torch release, transformers release) of this process, as the tables key them."""
    return _release(torch.__version__), _release(transformers.__version__)


def measured(exporter):
    """Whether the table holds this release for `exporter`."""
    return release() in EXPORTERS[exporter]


def expected(exporter):
    """{model: part of torch's error} for this release, None where torch has no such
    exporter; fails the calling test on a release nobody measured."""
    if not measured(exporter):
        torch_release, transformers_release = release()
        pytest.fail(f"tests/e2e/expected_skips.py: no {exporter} skips measured for torch {torch_release} with "
                    f"transformers {transformers_release}: measure them (tests/e2e/export_plain.py) and add them")
    return EXPORTERS[exporter][release()]


# The packages torch's exporters run: torch, and the ONNX builder and IR its dynamo
# exporter writes with.
EXPORTER_PACKAGES = ("torch", "onnxscript", "onnx_ir")


def verdict(name, failure, table):
    """(skip, message) for a plain export of `name` that failed with `failure`
    (export_plain.py's record) against `table` (None: the release was not
    measured): skip only torch's own exporter failing as the table says."""
    where = f"torch {torch.__version__} cannot export {name}, without hiertag too"
    if failure["stage"] != "export":
        return False, f"{name} could not be built, before torch's exporter ran: {failure['error']}"
    if failure["origin"].split(".")[0] not in EXPORTER_PACKAGES:
        return False, (f"{name}'s plain export failed in {failure['origin']}, not in torch's exporter: "
                       f"{failure['error']}")
    if table is None:
        return True, f"{where} (this release's skips are not measured): {failure['error'][:300]}"
    if name not in table:
        return False, (f"{where}, which tests/e2e/expected_skips.py says it exports on this release: "
                       f"{failure['error'][:300]}")
    if table[name] not in failure["text"]:
        return False, (f"{where}, but not for the reason tests/e2e/expected_skips.py gives ({table[name]!r}): "
                       f"{failure['error'][:300]}")
    return True, f"{where}: {failure['error'][:300]}"


def skip_or_fail(exporter, name, failure):
    """Skips the calling test where torch's `exporter` is expected to fail on `name`
    as it did; fails it otherwise."""
    table = EXPORTERS[exporter][release()] if measured(exporter) else None
    if measured(exporter) and table is None:
        pytest.fail(f"torch {torch.__version__} has no {exporter} exporter the tests use, yet {name} was exported "
                    f"with it: {failure['error'][:300]}")
    skip, message = verdict(name, failure, table)
    if skip:
        pytest.skip(message)
    pytest.fail(message)
