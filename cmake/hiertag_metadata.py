"""Package metadata that depends on the torch the package is built against
(a scikit-build-core dynamic-metadata provider, pyproject.toml): a plugin built
against one torch release does not load into another, so

  version       the package's own (python/hiertag/__init__.py) with that torch
                as a local label: 0.3.0+torch2.14.1.cu130
  dependencies  the package's own, and that torch release: torch==2.14.1

A source distribution is built for no torch: its version is the package's own
and it requires a supported torch (torch>=2.4.0,<2.15.0: the range
cmake/HiertagTorch.cmake checks, read from there). Runs in the Python that
builds the package (pip --no-build-isolation: the one holding torch)."""

import re
from pathlib import Path


def _torch_version():
    try:
        import torch
    except ImportError as error:
        raise RuntimeError("hiertag is built against the installed torch: install torch first, then "
                           "pip install --no-build-isolation (README \"Install\")") from error
    return str(torch.__version__)


def _package_version(version_file):
    text = Path(version_file).read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no __version__ in {version_file}")
    return match.group(1)


def _supported_torch(cmake_file):
    text = Path(cmake_file).read_text()
    oldest = re.search(r"^set\(HIERTAG_TORCH_OLDEST ([0-9.]+)\)", text, re.MULTILINE)
    beyond = re.search(r"^set\(HIERTAG_TORCH_BEYOND ([0-9.]+)\)", text, re.MULTILINE)
    if oldest is None or beyond is None:
        raise RuntimeError(f"no supported torch range in {cmake_file}")
    return f"torch>={oldest.group(1)},<{beyond.group(1)}"


class Provider:
    def __init__(self):
        self.state = "wheel"

    def build_state(self, state):
        self.state = state

    def dynamic_metadata(self, settings, project):
        version = _package_version(settings["version-file"])
        if self.state == "sdist":
            supported = _supported_torch(settings["torch-range-file"])
            return {"version": version, "dependencies": [*settings["requires"], supported]}
        torch_version = _torch_version()
        release = torch_version.split("+")[0]
        label = "torch" + re.sub(r"[^0-9A-Za-z]+", ".", torch_version)
        return {
            "version": f"{version}+{label}",
            "dependencies": [*settings["requires"], f"torch=={release}"],
        }
