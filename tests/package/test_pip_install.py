"""The pip route, as a user takes it (README "Install with pip"): a fresh venv
next to the same torch, `pip install --no-build-isolation` of the checkout, and
a wheel from `pip wheel` installed into another fresh venv; in each, from a
folder outside the checkout, the plugin loads from hiertag.library_path(), an
export with HIERTAG=1 is tagged, and the installed `hiertag` command validates
it. Slow (one build of the package, two venvs): about three minutes."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

EXPORT = """
import hiertag, torch
assert hiertag.library_path().startswith({prefix!r}), hiertag.library_path()
torch.ops.load_library(hiertag.library_path())

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
    def forward(self, x):
        return self.proj(x).relu()

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(), Block()])
    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x

with hiertag.tagging():
    torch.onnx.export(Net().eval(), (torch.randn(1, 4),), "net.onnx", dynamo=False)
"""


def run(command, **kwargs):
    done = subprocess.run(command, capture_output=True, text=True, **kwargs)
    assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done


def fresh_venv(path, build_backend=False):
    """A venv holding torch (the machine's local 2.13 CPU build) and, to build
    the package there, its build backend."""
    run([sys.executable, "-m", "venv", str(path)])
    run([str(path / "bin" / "pip"), "install", "-q", f"torch=={torch.__version__.split('+')[0]}"] +
        (["scikit-build-core"] if build_backend else []))
    return path


def assert_tags_from_outside(venv, workdir):
    workdir.mkdir()
    prefix = str(venv)
    run([str(venv / "bin" / "python"), "-c", EXPORT.format(prefix=prefix)], cwd=workdir)
    validated = run([str(venv / "bin" / "hiertag"), "validate", "net.onnx"], cwd=workdir)
    assert validated.stdout.strip() == "net.onnx: valid: 4 nodes tagged, 3 modules"
    tree = run([str(venv / "bin" / "hiertag"), "tree", "net.onnx", "--json"], cwd=workdir)
    assert '"tag":"/Net/Block.1"' in tree.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    venv = fresh_venv(tmp_path_factory.mktemp("venv") / "env", build_backend=True)
    run([str(venv / "bin" / "pip"), "install", "-q", "--no-build-isolation", str(ROOT)])
    return venv


def test_pip_install_of_the_checkout_tags_exports_from_another_folder(installed, tmp_path):
    assert_tags_from_outside(installed, tmp_path / "work")


def test_installed_command_lists_every_verb(installed):
    done = run([str(installed / "bin" / "hiertag"), "--help"])
    for verb in ("validate", "tree", "extract", "export", "verify"):
        assert f"  {verb}" in done.stdout


def test_wheel_installs_into_another_venv_and_works_there(installed, tmp_path):
    wheels = tmp_path / "wheels"
    run([str(installed / "bin" / "pip"), "wheel", "-q", "--no-build-isolation", "--no-deps", str(ROOT),
         "-w", str(wheels)])
    (wheel,) = wheels.glob("hiertag-*.whl")
    other = fresh_venv(tmp_path / "other")
    run([str(other / "bin" / "pip"), "install", "-q", str(wheel)])
    assert_tags_from_outside(other, tmp_path / "work")
