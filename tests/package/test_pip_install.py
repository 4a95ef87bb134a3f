"""The pip route, as a user takes it (README "Install"): the source distribution
made from the checkout, a wheel built from it with `pip wheel
--no-build-isolation` in a fresh venv next to the same torch with the build's
tools from PyPI (scikit-build-core, cmake, ninja, nlohmann-json, nanobind) and
nothing found on the system but the compiler, and that wheel installed into
another fresh venv that held only torch before; there, from a folder outside the
checkout, the plugin loads from hiertag.library_path(), an export with HIERTAG=1
is tagged, and the installed `hiertag` command validates it. The wheel names and
requires the torch it was built against, and its binaries need nothing but
torch's libraries and the C/C++ runtime. One build of the package, two venvs:
about five minutes. `pip install --no-build-isolation .` of the checkout itself is
what scripts/test_torch.sh does on the oldest and newest supported torch (CI's
last lanes)."""

import importlib.machinery
import json
import re
import subprocess
import sys
import zipfile
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


def pinned(*packages):
    """The requirements.txt pins of `packages`."""
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return [line for line in lines if line.split("==")[0] in packages]


BUILD_TOOLS = pinned("scikit-build-core", "cmake", "ninja", "nlohmann-json", "nanobind", "build")
TORCH_RELEASE = torch.__version__.split("+")[0]
# The wheel's local version label names the torch it was built against.
TORCH_LABEL = "torch" + re.sub(r"[^0-9A-Za-z]+", ".", torch.__version__)
# Nothing of the system's but the compiler: CMake looks for no package under
# /usr (Debian's nlohmann-json, libonnx, GoogleTest stay unseen).
NO_SYSTEM_PACKAGES = "--config-settings=cmake.define.CMAKE_IGNORE_PREFIX_PATH=/usr"


def fresh_venv(path, build_backend=False):
    """A venv holding this torch and, to build the package there, the build's
    tools from PyPI."""
    run([sys.executable, "-m", "venv", str(path)])
    run([str(path / "bin" / "pip"), "install", "-q", f"torch=={TORCH_RELEASE}"] +
        (BUILD_TOOLS if build_backend else []))
    return path


def assert_tags_from_outside(venv, workdir):
    workdir.mkdir()
    prefix = str(venv)
    run([str(venv / "bin" / "python"), "-c", EXPORT.format(prefix=prefix)], cwd=workdir)
    validated = run([str(venv / "bin" / "hiertag"), "validate", "net.onnx"], cwd=workdir)
    assert validated.stdout.strip() == "net.onnx: valid: 4 nodes tagged, 3 modules"
    tree = run([str(venv / "bin" / "hiertag"), "tree", "net.onnx", "--json"], cwd=workdir)
    assert '"tag":"/Net/Block.1"' in tree.stdout
    # A Python verb: it reads the file through the installed core extension (hiertag.core).
    report = json.loads(run([str(venv / "bin" / "hiertag"), "report", "net.onnx", "--json"], cwd=workdir).stdout)
    assert report["format_version"] == "3" and report["valid"]
    assert [module["tag"] for module in report["modules"]] == ["/Net", "/Net/Block.0", "/Net/Block.1"]


@pytest.fixture(scope="module")
def sdist(tmp_path_factory):
    dist = tmp_path_factory.mktemp("dist")
    run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(dist), str(ROOT)])
    (built,) = dist.glob("hiertag-*.tar.gz")
    return built


@pytest.fixture(scope="module")
def wheel(sdist, tmp_path_factory):
    """The wheel built from the source distribution, in a venv of its own."""
    builder = fresh_venv(tmp_path_factory.mktemp("builder") / "env", build_backend=True)
    wheels = tmp_path_factory.mktemp("wheels")
    run([str(builder / "bin" / "pip"), "wheel", "-q", "--no-build-isolation", "--no-deps", NO_SYSTEM_PACKAGES,
         str(sdist), "-w", str(wheels)])
    (built,) = wheels.glob("hiertag-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """A venv that held torch and nothing else, with the wheel installed by pip
    (which brings the wheel's own requirements)."""
    venv = fresh_venv(tmp_path_factory.mktemp("user") / "env")
    run([str(venv / "bin" / "pip"), "install", "-q", str(wheel)])
    return venv


def test_source_distribution_is_named_for_the_release(sdist):
    assert sdist.name == f"hiertag-{hiertag_version()}.tar.gz"


def test_source_distribution_requires_any_supported_torch(sdist):
    """Check that the source distribution requires the supported range of torch
    (cmake/HiertagTorch.cmake's), not one release: a wheel built from it requires
    the release it was built against (the test below)."""
    import tarfile
    with tarfile.open(sdist) as archive:
        (metadata,) = [name for name in archive.getnames() if name.count("/") == 1 and name.endswith("/PKG-INFO")]
        requires = [line for line in archive.extractfile(metadata).read().decode().splitlines()
                    if line.startswith("Requires-Dist: torch")]
    cmake = (ROOT / "cmake" / "HiertagTorch.cmake").read_text()
    oldest, beyond = (re.search(rf"^set\({name} ([0-9.]+)\)", cmake, re.MULTILINE).group(1)
                      for name in ("HIERTAG_TORCH_OLDEST", "HIERTAG_TORCH_BEYOND"))
    assert len(requires) == 1 and "==" not in requires[0], requires
    assert sorted(requires[0].split(": ", 1)[1].removeprefix("torch").split(",")) == [f"<{beyond}", f">={oldest}"]


def test_wheel_installed_in_a_venv_without_build_tools_tags_exports_from_another_folder(installed, tmp_path):
    assert_tags_from_outside(installed, tmp_path / "work")


def test_installed_command_lists_every_verb(installed):
    done = run([str(installed / "bin" / "hiertag"), "--help"])
    for verb in ("validate", "tree", "extract", "export", "verify"):
        assert f"  {verb}" in done.stdout


def test_wheel_names_and_requires_the_torch_it_was_built_for(wheel):
    assert wheel.name.startswith(f"hiertag-{hiertag_version()}+{TORCH_LABEL}-"), wheel.name
    with zipfile.ZipFile(wheel) as archive:
        (metadata,) = [name for name in archive.namelist() if name.endswith(".dist-info/METADATA")]
        requires = [line for line in archive.read(metadata).decode().splitlines() if line.startswith("Requires-Dist:")]
    assert f"Requires-Dist: torch=={TORCH_RELEASE}" in requires, requires


# The C and C++ runtime: what every program on the system links.
RUNTIME = {"linux-vdso.so.1", "ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0",
           "librt.so.1", "libutil.so.1", "libstdc++.so.6", "libgcc_s.so.1"}


def test_every_binary_of_the_wheel_needs_only_torch_and_the_runtime(wheel, tmp_path):
    """`ldd` of each binary (with torch's own libraries findable, as they are once
    torch is imported) lists torch's libraries, what they bring from torch's
    package dependencies, and the C/C++ runtime; nothing of the system's."""
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    binaries = [path for path in (tmp_path / "hiertag" / "_native").iterdir() if path.read_bytes()[:4] == b"\x7fELF"]
    # The plugin, its torch side, the native tool and the core's extension (hiertag.core).
    assert {path.name for path in binaries} == {"libhiertag.so", "libhiertag_python.so", "hiertag",
                                                f"_core{importlib.machinery.EXTENSION_SUFFIXES[0]}"}
    torch_lib = Path(torch.__file__).parent / "lib"
    site_packages = torch_lib.parents[1]
    for binary in binaries:
        listed = run(["ldd", str(binary)], env={"LD_LIBRARY_PATH": str(torch_lib), "PATH": "/usr/bin:/bin"}).stdout
        for line in listed.strip().splitlines():
            name, _, resolved = line.strip().partition(" => ")
            name, resolved = name.split()[0], resolved.split(" (")[0]
            assert "not found" not in resolved, f"{binary.name}: {line}"
            if Path(name).name in RUNTIME:
                continue
            assert Path(resolved).resolve().is_relative_to(site_packages), f"{binary.name} needs {line.strip()}"


def hiertag_version():
    text = (ROOT / "python" / "hiertag" / "__init__.py").read_text()
    return re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE).group(1)
