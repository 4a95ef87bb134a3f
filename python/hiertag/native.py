"""The native tool (validate, tree, extract) run from Python. extract gets the
value types ONNX's shape inference (the onnx package) gives its model: a
wheel's tool has no ONNX library of its own, and a checkout's gets the same
types this way. Imports neither torch nor onnxruntime."""

import contextlib
import os
import re
import subprocess
import tempfile
from pathlib import Path

# The native extract's options that take a value (tool/cli.cpp).
_EXTRACT_VALUE_OPTIONS = {"--module", "-o", "--call", "--external-data", "--value-types"}


@contextlib.contextmanager
def value_types_file(model_path):
    """A temporary ONNX file whose main graph lists the value types ONNX's shape
    inference (the onnx package) gives the model at `model_path`: what the native
    extract's --value-types reads. A wheel's tool has no ONNX library of its own,
    and a checkout's gets the same types this way. Only the types are kept;
    weights in external files are not read, nor is the model parsed into
    Python objects (core.inferred_value_infos). None when the file is no ONNX
    model: the native tool, which reads it too, says what is wrong with it."""
    import onnx
    from google.protobuf.message import DecodeError
    from hiertag import core
    try:
        graph = core.inferred_value_infos(model_path, data_prop=True)
    except Exception:  # what inference cannot type stays untyped; extract names the value
        try:
            graph = onnx.GraphProto.FromString(core.main_graph_value_infos(Path(model_path).read_bytes()))
        except (ValueError, DecodeError, OSError):  # DecodeError: the core frames entries, protobuf reads them
            yield None
            return
    graph.name = "value_types"
    with tempfile.TemporaryDirectory(prefix="hiertag-types-") as directory:
        path = Path(directory) / "value_types.onnx"
        onnx.save(onnx.helper.make_model(graph), str(path))
        yield path


def _extract_model(arguments):
    """The MODEL of a native `extract ...` argument list, or None."""
    values = iter(arguments[1:])
    for argument in values:
        if argument in _EXTRACT_VALUE_OPTIONS:
            next(values, None)
        elif not argument.startswith("-"):
            return argument
    return None


def run_tool(arguments, **run_options):
    """Runs the native tool (validate, tree, extract) with `arguments`;
    subprocess.run's result. An extract gets its model's value types
    (value_types_file) unless the arguments give them or ask for --help."""
    import hiertag
    arguments = [str(argument) for argument in arguments]
    tool = hiertag.tool_path()
    model = _extract_model(arguments) if arguments[:1] == ["extract"] else None
    if model is None or not os.path.isfile(model) or {"--value-types", "--help", "-h"} & set(arguments):
        return subprocess.run([tool, *arguments], **run_options)
    with value_types_file(model) as types:
        typed = ["--value-types", str(types)] if types is not None else []
        return subprocess.run([tool, *arguments, *typed], **run_options)


def error_line(stderr):
    """The native tool's error (its first line on stderr) without its
    "hiertag COMMAND: " prefix, for a verb that says its own name."""
    lines = stderr.strip().splitlines()
    return re.sub(r"^hiertag [a-z-]+: ", "", lines[0]) if lines else ""
