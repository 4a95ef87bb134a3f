"""The skips of the end-to-end tests are torch's limits, pinned per release
(tests/e2e/expected_skips.py): torch's TorchScript exporter fails, without hiertag,
on exactly the bundled models the table names for this release, with the errors it
names; a model failing otherwise, or failing before or outside torch's exporter,
fails its tests instead of skipping them. test_dynamo.py checks the dynamo
exporter's part of the table."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from hiertag import zoo
from hiertag.zoo import sweep_models
from tests.e2e import expected_skips
from tests.e2e.export_plain import attempt, export_bytes
from tests.e2e.exportable import export_in_subprocess, note_plain_exports

ROOT = Path(__file__).resolve().parents[2]


def test_torchs_exporter_fails_on_exactly_the_expected_models():
    """Check that torch's TorchScript exporter, in a process that never loaded hiertag,
    fails on exactly the bundled models (zoo and sweep) the table names for this
    release, each with the error it names, raised in torch's exporter."""
    expected = expected_skips.expected("torchscript")
    files, failed = export_in_subprocess([*zoo.ALL, *sweep_models.MODELS])
    note_plain_exports(files, failed)
    assert sorted(failed) == sorted(expected), {name: failure["error"][:200] for name, failure in failed.items()}
    for name, failure in sorted(failed.items()):
        skip, message = expected_skips.verdict(name, failure, expected)
        assert skip, message


def test_the_table_names_only_bundled_models():
    """Check that every model the table names is one export_plain.py can build."""
    bundled = set(zoo.ALL) | set(sweep_models.MODELS)
    for exporter, releases in expected_skips.EXPORTERS.items():
        for release, table in releases.items():
            assert not set(table or {}) - bundled, (exporter, release, set(table) - bundled)


def ci_releases():
    """(torch release, transformers release) of each venv CI runs tests in: the
    project's (requirements.txt) and scripts/test.sh's other_torch, with the
    transformers scripts/torch_requirements.py pins for each."""
    torch_pin = re.search(r"^torch==(\S+)", (ROOT / "requirements.txt").read_text(), re.M).group(1)
    others = re.search(r"^other_torch=\(([^)]*)\)", (ROOT / "scripts" / "test.sh").read_text(), re.M).group(1).split()
    releases = []
    for version in [torch_pin, *others]:
        pins = subprocess.run([sys.executable, str(ROOT / "scripts" / "torch_requirements.py"), version],
                              capture_output=True, text=True, check=True).stdout
        transformers_pin = re.search(r"^transformers==(\S+)", pins, re.M).group(1)
        releases.append((expected_skips._release(version), expected_skips._release(transformers_pin)))
    return releases


def test_every_release_ci_runs_is_measured():
    """Check that the table holds both exporters' skips for every torch release CI
    tests, with the transformers its venv pins."""
    releases = ci_releases()
    assert ("2.4", "4.57") in releases and len(releases) == 3
    for exporter, table in expected_skips.EXPORTERS.items():
        assert [release for release in releases if release not in table] == [], exporter


class _Forward(torch.nn.Module):
    def __init__(self, forward):
        super().__init__()
        self.body = forward

    def forward(self, x):
        return self.body(x)


def _failure(build):
    exported, failure = attempt(build, export_bytes)
    assert exported is None and failure is not None
    return failure


def _unsupported_op(x):
    # an operator the TorchScript exporter has no symbolic for at opset 17 (torch 2.4 to 2.14; linalg_svd neither)
    return torch.histc(x, bins=4)


HISTC = {"histc_model": "UnsupportedOperatorError: Exporting the operator 'aten::histc' to ONNX opset version 17"}


def test_torchs_refusal_named_by_the_table_skips():
    """Check that torch's exporter refusing a model, as the table says, skips it."""
    failure = _failure(lambda: (_Forward(_unsupported_op), (torch.randn(8),)))
    assert failure["stage"] == "export" and failure["origin"].startswith("torch."), failure
    assert expected_skips.verdict("histc_model", failure, HISTC)[0]


def test_torchs_refusal_of_a_model_the_table_does_not_name_fails():
    """Check that torch's exporter refusing a model the table says it exports fails."""
    failure = _failure(lambda: (_Forward(_unsupported_op), (torch.randn(8),)))
    skip, message = expected_skips.verdict("other_model", failure, HISTC)
    assert not skip and "says it exports" in message


def test_torchs_refusal_for_another_reason_fails():
    """Check that torch refusing a model the table names, with another error, fails."""
    failure = _failure(lambda: (_Forward(lambda x: torch.linalg.svd(x)[1]), (torch.randn(3, 3),)))
    skip, message = expected_skips.verdict("histc_model", failure, HISTC)
    assert not skip and "not for the reason" in message, message


def test_a_model_that_cannot_be_built_fails():
    """Check that an error raised building the model (a bug in a zoo builder) fails,
    even for a model the table names."""
    def broken_builder():
        raise AttributeError("module 'transformers' has no attribute 'NoSuchConfig'")
    failure = _failure(broken_builder)
    assert failure["stage"] == "build"
    skip, message = expected_skips.verdict("histc_model", failure, HISTC)
    assert not skip and "could not be built" in message


def test_a_models_own_code_failing_under_the_exporter_fails():
    """Check that an error the model's own forward raises while torch traces it
    is not taken for torch's exporter's, even where the table names the model and
    the message matches."""
    def forward(x):
        raise RuntimeError("UnsupportedOperatorError: Exporting the operator 'aten::histc' to ONNX opset version 17")
    failure = _failure(lambda: (_Forward(forward), (torch.randn(8),)))
    assert failure["stage"] == "export" and failure["origin"] == __name__, failure
    skip, message = expected_skips.verdict("histc_model", failure, HISTC)
    assert not skip and "not in torch's exporter" in message


def test_skip_or_fail_fails_the_test_on_an_unexpected_failure():
    """Check that the helper the tests call turns a verdict into pytest's skip or failure."""
    failure = _failure(lambda: (_Forward(_unsupported_op), (torch.randn(8),)))
    with pytest.raises(pytest.fail.Exception):
        expected_skips.skip_or_fail("torchscript", "bert", failure)
