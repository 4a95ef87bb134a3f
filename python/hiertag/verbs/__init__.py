"""What every verb of the hiertag command shares: one-line errors (exit
status 2, never a traceback), loading a tagged file with the native tool's
wording, the tagged file opened in process (core.TaggedFile), refusing an output that is one of the verb's
inputs, and writing a result (a model too, over 2 GiB as well) atomically."""

import json
import os
import shutil
import tempfile
from pathlib import Path

import onnx
from onnx import external_data_helper

from hiertag import checks, core
from hiertag.verb import Parser, UsageError, Verb, fail, first_line, one_line, run_verb  # noqa: F401 (every verb's verbs.fail, verbs.Parser, ...)


def torch_modules_option(given):
    """A verb's --torch-modules (`given`; None: HIERTAG_TORCH_MODULES's value, as
    the plugin reads it), parsed once, by the core's parser the plugin reads the
    variable with: (its text, where it came from: "--torch-modules" or
    "HIERTAG_TORCH_MODULES", its core.TorchModuleSegments). A malformed value is a
    UsageError in the plugin's words, naming where it came from."""
    text, source = ((given, "--torch-modules") if given is not None
                    else (os.environ.get("HIERTAG_TORCH_MODULES", ""), "HIERTAG_TORCH_MODULES"))
    try:
        return text, source, core.TorchModuleSegments.parse(text)
    except ValueError as error:
        fail(f"{source}={error}")


def load_model(path, data_directory=None, read_data=True, weights_in_place=False):
    """The ONNX model at `path`, its external data read in from `data_directory`
    (default: the model's folder), or only checked when not `read_data`; a
    missing, empty, truncated or non-ONNX file, and external data that cannot
    be read safely, is a UsageError. `weights_in_place`: for a verb that reads
    the graph and has ONNX Runtime run it from the files but never reads a
    weight's values (carry), its weights (main-graph initializers over
    core.WEIGHT_BYTES) are not read into memory: one the file holds points at
    its bytes in the file (core.with_weights_left_in_file), one in an external
    data file stays there; every other tensor is read in (SMALL_TENSOR_BYTES)."""
    path = Path(path)
    if not path.is_file() or not os.access(path, os.R_OK):
        fail(f"{path}: cannot open the file (missing or unreadable)")
    if path.stat().st_size == 0:
        fail(f"{path}: the file is empty")
    if weights_in_place:
        try:
            data = core.with_weights_left_in_file(path.read_bytes(), path.name, core.WEIGHT_BYTES)
        except ValueError as error:  # the core's one-line reason
            fail(f"{path}: {error}")
    try:
        model = onnx.ModelProto.FromString(data) if weights_in_place else onnx.load(str(path), load_external_data=False)
    except Exception:
        fail(f"{path}: not a well-formed ONNX model (truncated or another format)")
    if not model.HasField("graph"):
        fail(f"{path}: not an ONNX model (no graph)")
    read_external_data(model, path, data_directory, "small" if weights_in_place else read_data)
    return model


def read_external_data(model, path, data_directory=None, read_data=True):
    """Reads the external data of `model` (read from `path`) in from
    `data_directory` (default: the model's folder); only checks it when not
    `read_data`, and reads in all but weights when it is "small"
    (SMALL_TENSOR_BYTES). A location that is not safe, a missing file or a
    range outside it is a UsageError worded as the native tool words it, and
    nothing is opened for it."""
    path = Path(path)
    directory = Path(data_directory) if data_directory is not None else path.parent
    tensors, files = list(external_tensors(model)), {}
    for tensor, subject in tensors:
        problem = external_data_problem(directory, tensor, files)
        if problem:
            fail(f"{path}: {subject}: {problem}")
    try:
        if read_data == "small":
            for tensor, subject in tensors:
                if _external_length(tensor, files) <= (core.WEIGHT_BYTES if subject.startswith("initializer")
                                                       else SMALL_TENSOR_BYTES):
                    external_data_helper.load_external_data_for_tensor(tensor, str(directory))
        elif read_data:
            external_data_helper.load_external_data_for_model(model, str(directory))
    except Exception as error:
        fail(f"{path}: cannot read its external data ({first_line(error)})")


# The external data a verb that keeps weights outside (carry) still reads in:
# a tensor of at most core.WEIGHT_BYTES, or at most this many bytes but for an
# initializer, is a shape input or a constant that shape inference and ONNX
# Runtime's graph resolution read the values of (ONNX Runtime reads no
# Constant's value from a file); the rest stays in its file.
SMALL_TENSOR_BYTES = 64 * 1024


def external_tensors(model):
    """(tensor, "initializer 'NAME'" or "tensor 'NAME'") for every tensor the
    model keeps in an external data file."""
    for graph in checks.walk_graphs(model.graph):
        tensors = [(tensor, "initializer") for tensor in graph.initializer]
        tensors += [(tensor, "tensor") for node in graph.node for attribute in node.attribute
                    for tensor in [*([attribute.t] if attribute.HasField("t") else []), *attribute.tensors]]
        for tensor, kind in tensors:
            if external_data_helper.uses_external_data(tensor):
                yield tensor, f"{kind} '{tensor.name}'"


def external_data_problem(directory, tensor, files=None):
    """Why `tensor`'s external data cannot be read from `directory`, worded as
    the native tool words it (core/onnx/external_data.cpp: a location is relative,
    names no "..", stays inside the model's folder with links resolved, and its
    range lies in the file), or None. A hostile location is never opened.
    `files`: {location: its problem or its size}, what the tensors of one
    folder share, filled in as they are asked."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries.get("location", "")
    files = {} if files is None else files
    if location not in files:
        files[location] = _file_problem(directory, location)
    size = files[location]
    if isinstance(size, str):
        return size
    try:
        offset = int(entries.get("offset", "0"))
        length = int(entries["length"]) if "length" in entries else size - offset
    except ValueError:
        return f"external data of '{location}' has an offset or length that is no number"
    if offset > size:
        return f"external data file '{location}' holds {size} bytes, the tensor starts at byte {offset}"
    if length > size - offset:
        return f"external data file '{location}' holds {size} bytes, the tensor needs {offset} + {length}"
    return None


def _file_problem(directory, location):
    """Why external data at `location` cannot be read from `directory` (a
    string, external_data_problem's words), or the file's size."""
    reason = None
    if not location:
        reason = "is empty"
    elif "\0" in location:
        reason = "holds a NUL byte"
    elif os.path.isabs(location) or location[0] in "/\\":
        reason = "is an absolute path"
    elif ".." in Path(location).parts:
        reason = "leads outside the model's folder"
    else:
        folder = os.path.realpath(directory)
        file = os.path.realpath(os.path.join(folder, location))
        if os.path.commonpath([folder, file]) != folder:
            reason = "leads outside the model's folder"
    if reason:
        return f"external data location '{location}' {reason}"
    if not os.path.isfile(file):
        return f"external data file '{location}' does not exist next to the model"
    return os.path.getsize(file)


def _external_length(tensor, files):
    """The length of a checked external tensor's range (`files` as
    external_data_problem filled it)."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    if "length" in entries:
        return int(entries["length"])
    return files[entries["location"]] - int(entries.get("offset", "0"))


def external_data_files(path):
    """(location, path) of every external data file the ONNX model at `path`
    reads that lies inside its folder; [] for a file that is no ONNX model."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:
        return []
    folder = Path(path).parent
    files = {}
    for tensor, _ in external_tensors(model):
        if external_data_problem(folder, tensor) is None:
            location = next(entry.value for entry in tensor.external_data if entry.key == "location")
            files[location] = folder / location
    return sorted(files.items())


def is_tagged(model):
    return core.TABLE_KEY in checks.model_props(model)


def load_tagged(path, read_data=True, weights_in_place=False):
    """(model, module table) of a file tagged by hiertag (read as load_model
    reads it), or a UsageError worded as the native tool words it."""
    model = load_model(path, read_data=read_data, weights_in_place=weights_in_place)
    if not is_tagged(model):
        fail(f"{path}: not tagged by hiertag (no {core.TABLE_KEY} in the model's metadata_props)")
    try:
        table = checks.module_table(model)
    except json.JSONDecodeError as error:
        fail(f"{path}: the module table is not a JSON object ({error})")
    if not isinstance(table, dict) or not all(isinstance(entry, dict) for entry in table.values()):
        fail(f"{path}: the module table is not a JSON object of entries")
    return model, table


def open_tagged(path):
    """The tagged file at `path` opened once (core.TaggedFile: validate, tree,
    extract), or a UsageError with the native tool's one line."""
    try:
        return core.TaggedFile(str(path))
    except core.TaggedFileError as error:
        fail(str(error))


def module_tree(file, depth=-1):
    """The modules `hiertag tree --json` lists for `file`, a path or an opened
    core.TaggedFile; a UsageError with the native tool's one line."""
    opened = file if isinstance(file, core.TaggedFile) else open_tagged(file)
    try:
        return opened.tree(depth)["modules"]
    except core.TaggedFileError as error:
        fail(str(error))


def same_file(a, b):
    """Whether paths `a` and `b` are one file (one device and inode: the same
    path, or a symbolic or hard link to it)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_overwriting(outputs, inputs=(), models=()):
    """Fails, before anything is written, when one of `outputs` is one of the
    verb's input files: `inputs`, the ONNX `models` or an external data file
    one of those models reads. No verb destroys its input."""
    outputs = [str(output) for output in outputs if output is not None and os.path.exists(output)]
    if not outputs:
        return
    models = [str(model) for model in models if model is not None]
    for output in outputs:
        for given in [*models, *(str(i) for i in inputs if i is not None)]:
            if same_file(output, given):
                through = "" if os.path.abspath(output) == os.path.abspath(given) else " (the same file through a link)"
                fail(f"output '{output}' is the input '{given}'{through}: refusing to overwrite it")
    for model in models:
        for location, data in external_data_files(model):
            for output in outputs:
                if same_file(output, data):
                    fail(f"output '{output}' is the external data file '{location}' of the input '{model}': "
                         "refusing to overwrite it")


def _check_output(path):
    if path.is_dir():
        fail(f"output '{path}' is a directory")
    if not path.parent.is_dir():
        fail(f"output directory '{path.parent}' does not exist")


def write_atomically(path, write):
    """Calls write(temporary path) beside `path`, then renames it to `path`: a
    reader never sees half a file, and on any error nothing is left. The file
    gets the mode a new file gets (0666 less the umask), not mkstemp's 0600."""
    path = Path(path)
    _check_output(path)
    handle, staged = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    os.close(handle)
    try:
        write(staged)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(staged, 0o666 & ~umask)
        os.replace(staged, path)
    finally:
        if os.path.exists(staged):
            os.remove(staged)


# Protocol buffers cannot serialize a message of 2 GiB or more: a model that big
# keeps its weights in a data file beside it, as torch's exporters write them.
INLINE_LIMIT = 2**31 - 1


# A tensor of at least this many bytes of raw data goes to OUTPUT.data when a
# model is written with one (onnx.save's threshold).
DATA_FILE_THRESHOLD = 1024


def save_model(model, output, sources=(), data_from=None):
    """Writes `model` to OUTPUT, self-contained unless it is too big for one
    file: then its weights go to OUTPUT.data beside it, which must not be a file
    the models `sources` read. Tensors `model` still keeps in external data
    files (read with read_data=False from the file `data_from`, whose folder
    their locations are relative to) are read in when the model fits in one
    file; else their ranges are copied file to file into OUTPUT.data, each range
    once, so no weight is held in memory. Both files are written in a folder
    beside OUTPUT and renamed only when complete (the data file first): no
    half-written file is left. Past the limit `model`'s tensors are left
    pointing into OUTPUT.data."""
    path = Path(output)
    _check_output(path)
    external = [tensor for tensor, _ in external_tensors(model)]
    if external and data_from is None:
        raise ValueError("save_model: the model keeps tensors in external data files; say which file it was read "
                         "from (data_from)")
    files = {}
    ranges = [(tensor, _external_range(tensor, Path(data_from).parent, files)) for tensor in external]
    outside = sum(length for _, (_, _, length) in ranges)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent))
    try:
        staged = staging / path.name
        if outside < INLINE_LIMIT and not core.larger_than(model, INLINE_LIMIT - outside):
            if external:
                _read_in(external, Path(data_from).parent, data_from)
            onnx.save(model, str(staged))
        else:
            data = f"{path.name}.data"
            refuse_overwriting([path.parent / data], models=sources)
            _write_data_file(model, ranges, staging / data, data)
            onnx.save(model, str(staged))
            # The data file gets the model file's mode (a new file's).
            shutil.copymode(staged, staging / data)
            os.replace(staging / data, path.parent / data)
        os.replace(staged, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _read_in(tensors, directory, data_from):
    """Reads the external data of `tensors` (checked when their model was read
    from `data_from`) in from `directory`: each then holds its data as a tensor
    read from a file holding it does (no data_location)."""
    try:
        for tensor in tensors:
            external_data_helper.load_external_data_for_tensor(tensor, str(directory))
            tensor.ClearField("data_location")
    except Exception as error:
        fail(f"{data_from}: cannot read its external data ({first_line(error)})")


def _external_range(tensor, directory, files):
    """(file, offset, length) of a tensor kept in an external data file;
    `files`: {location: (the file, its size)}, filled in as asked."""
    entries = {entry.key: entry.value for entry in tensor.external_data}
    location = entries["location"]
    if location not in files:
        source = (directory / location).resolve()
        files[location] = source, os.path.getsize(source)
    source, size = files[location]
    offset = int(entries.get("offset", "0"))
    length = int(entries["length"]) if "length" in entries else size - offset
    return source, offset, length


def _write_data_file(model, ranges, data_path, location):
    """Moves `model`'s weights into the file `data_path` (named `location` in
    the model): every tensor it keeps outside (`ranges`: (tensor, (file, offset,
    length))), copied range by range, each range once, and the raw data of
    initializers of DATA_FILE_THRESHOLD bytes or more."""
    copied = {}  # (file, offset, length) -> offset in the data file
    with open(data_path, "wb") as out:
        for tensor, key in ranges:
            if key not in copied:
                copied[key] = out.tell()
                source, offset, length = key
                with open(source, "rb") as data:
                    data.seek(offset)
                    while length:
                        chunk = data.read(min(length, 1 << 24))
                        if not chunk:
                            raise OSError(f"{source}: shorter than its tensors say")
                        out.write(chunk)
                        length -= len(chunk)
            _point_at(tensor, location, copied[key], key[2])
        for graph in checks.walk_graphs(model.graph):
            for tensor in graph.initializer:
                if tensor.data_location != onnx.TensorProto.EXTERNAL and len(tensor.raw_data) >= DATA_FILE_THRESHOLD:
                    offset = out.tell()
                    out.write(tensor.raw_data)
                    tensor.ClearField("raw_data")
                    _point_at(tensor, location, offset, out.tell() - offset)


def _point_at(tensor, location, offset, length):
    """Makes `tensor` one kept at `offset` in the data file `location`."""
    del tensor.external_data[:]
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", offset), ("length", length)):
        tensor.external_data.add(key=key, value=str(value))
