"""hiertag: exact module tags for every node of torch's TorchScript-based ONNX export.

    import torch, hiertag
    torch.ops.load_library(hiertag.library_path())
    with hiertag.tagging():                       # or HIERTAG=1 in the environment
        torch.onnx.export(model, args, "model.onnx", dynamo=False)

The plugin (libhiertag.so) hooks torch's exporter; the `hiertag` command reads,
checks and acts on the tagged files (`hiertag --help`)."""

import contextlib
import os
import sys
from pathlib import Path

__version__ = "0.3.0"

# The ONNX opset of hiertag's own exports (tests, verifier, bundled models, `hiertag export`).
OPSET = 17

_PACKAGE = Path(__file__).resolve().parent


def _native_dirs():
    """Where the native files are: $HIERTAG_NATIVE_DIR when set (another build of
    them); installed (pip), in the package; in a checkout (python/hiertag beside
    CMakeLists.txt), in build/."""
    if os.environ.get("HIERTAG_NATIVE_DIR"):
        return [Path(os.environ["HIERTAG_NATIVE_DIR"]).resolve()]
    return [_PACKAGE / "_native", _PACKAGE.parents[1] / "build"]


def _native_file(name):
    directories = _native_dirs()
    for directory in directories:
        if (directory / name).exists():
            return directory / name
    raise FileNotFoundError(
        f"hiertag: {name} not found in {' or '.join(str(d) for d in directories)} "
        "(install the package with pip, or build the checkout: scripts/build.sh)")


def library_path():
    """Absolute path of the plugin, libhiertag.so: pass it to torch.ops.load_library."""
    return str(_native_file("libhiertag.so"))


def tool_path():
    """Absolute path of the native command-line tool (validate, tree, extract)."""
    return str(_native_file("hiertag"))


_FLAGS = ("HIERTAG", "HIERTAG_TORCH_MODULES", "HIERTAG_REPORT")


def install_failure():
    """Why the plugin refused to install in this process (another torch release,
    a torch it cannot hook, libhiertag_python.so not loadable), as it recorded
    on torch._C (include/hiertag/plugin/install_markers.h); None if it did not."""
    torch = sys.modules.get("torch")
    return getattr(torch._C, "_hiertag_plugin_install_failure", None) if torch is not None else None


def _why_not_installed():
    """None when the plugin's hooks are installed in this process (it marks
    torch._C when it installs them), else why no export would be tagged."""
    torch = sys.modules.get("torch")  # no torch imported: no plugin either
    if torch is not None and getattr(torch._C, "_hiertag_plugin_installed", False):
        return None
    failure = install_failure()
    if failure:
        return f"the plugin is not installed ({failure})"
    return "the plugin is not loaded: call torch.ops.load_library(hiertag.library_path()) first"


def unknown_torch_modules(text):
    """The names of a HIERTAG_TORCH_MODULES value ('0', '1' or 'A,B') that no
    torch.nn / torch.ao class has, found as the plugin finds them at an export
    (such a name has no effect). ValueError with the reason for a malformed
    value; RuntimeError when the plugin is not loaded."""
    why = _why_not_installed()
    if why is not None:
        raise RuntimeError(f"hiertag.unknown_torch_modules(): {why}")
    import torch
    return list(torch._C._hiertag_unknown_torch_modules(text))


def torch_modules_text(torch_modules):
    """HIERTAG_TORCH_MODULES's text for tagging()'s `torch_modules`: None stays
    None; False "0", True "1", a string itself, an iterable of class names joined
    by commas (not checked here)."""
    if torch_modules is None:
        return None
    if torch_modules is True or torch_modules is False:
        return "1" if torch_modules else "0"
    return torch_modules if isinstance(torch_modules, str) else ",".join(torch_modules)


@contextlib.contextmanager
def tagging(torch_modules=None, report=None):
    """Tags the exports inside the block: sets HIERTAG=1 (and, when given,
    HIERTAG_TORCH_MODULES and HIERTAG_REPORT) for its duration and restores the
    environment on exit.

    torch_modules: False (torch.nn modules get no tag segment), True (every
    module does), or class names ("LayerNorm", or an iterable of them); None
    leaves HIERTAG_TORCH_MODULES as the environment has it. report: True or
    False for HIERTAG_REPORT; None leaves it. The plugin must be loaded
    (torch.ops.load_library(hiertag.library_path())): without it the block
    would write untagged files, so RuntimeError is raised on entering it,
    the environment untouched; a malformed torch_modules raises ValueError
    there too, in the words of the plugin's parser."""
    why = _why_not_installed()
    if why is not None:
        raise RuntimeError(f"hiertag.tagging(): {why}; no export would be tagged")
    modules = torch_modules_text(torch_modules)
    if modules is not None:  # parsed here as the plugin parses it, so it fails before any export
        from hiertag import core
        try:
            core.TorchModuleSegments.parse(modules)
        except ValueError as error:
            raise ValueError(f"hiertag.tagging(): torch_modules={error}") from None
    saved = {name: os.environ.get(name) for name in _FLAGS}
    settings = {"HIERTAG": "1"}
    if modules is not None:
        settings["HIERTAG_TORCH_MODULES"] = modules
    if report is not None:
        settings["HIERTAG_REPORT"] = "1" if report else "0"
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
