"""hiertag's torch-free C++ core for the Python verbs (bindings/core_module.cpp):
the format's metadata keys and version, the tag grammar (escaping, call
references), HIERTAG_TORCH_MODULES' values, the module table and call tags,
and the rules that place a node no record tags.
The plugin and the native tool run the same code, so a verb cannot spell the
format differently. Imports neither torch nor onnxruntime.

    from hiertag import core
    core.TAG_KEY                               # "hierarchy_tag"
    core.parse_call_ref("/Net/Block#2")        # ("/Net/Block", 2)
    table = core.ModuleTable([("", "m.Net", "Net", True), ("a", "m.L", "L", True)])
    table.tag(1)                               # "/Net/L"

The extension, _core, lies with the other native files (hiertag._native_dirs:
the package's _native/ when installed, build/ in a checkout)."""

import array
import functools
import importlib.machinery
import importlib.util
import sys
import tempfile
import typing
from pathlib import Path

from google.protobuf import message

import hiertag


def _load():
    directories = hiertag._native_dirs()
    for directory in directories:
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = directory / f"_core{suffix}"
            if path.exists():
                spec = importlib.util.spec_from_file_location("hiertag._core", path)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
                sys.modules["hiertag._core"] = module
                return module
    raise ImportError(f"hiertag: the core extension (_core{importlib.machinery.EXTENSION_SUFFIXES[0]}) is not in "
                      f"{' or '.join(str(d) for d in directories)} (install the package with pip, or build the "
                      "checkout: scripts/build.sh)")


_core = _load()

TAG_KEY = _core.TAG_KEY
CALL_KEY = _core.CALL_KEY
SHARED_KEY = _core.SHARED_KEY
SPANS_KEY = _core.SPANS_KEY
REWRITE_KEY = _core.REWRITE_KEY
TABLE_KEY = _core.TABLE_KEY
REWRITES_KEY = _core.REWRITES_KEY
FORMAT_VERSION_KEY = _core.FORMAT_VERSION_KEY
FORMAT_VERSION = _core.FORMAT_VERSION
KEY_PREFIX = _core.KEY_PREFIX
SOURCE_KEY = _core.SOURCE_KEY
CARRY_KEY = _core.CARRY_KEY

escape_class_name = _core.escape_class_name
escape_qualifier = _core.escape_qualifier
canonical_tag = _core.canonical_tag
parse_call_ref = _core.parse_call_ref
format_call_ref = _core.format_call_ref
is_tag_ancestor_or_self = _core.is_tag_ancestor_or_self
parent_tag = _core.parent_tag

write_module_table = _core.write_module_table
write_rewrites = _core.write_rewrites
write_tag_list = _core.write_tag_list

TorchModuleSegments = _core.TorchModuleSegments
unknown_torch_modules_note = _core.unknown_torch_modules_note
printable = _core.printable  # a name as every line hiertag prints quotes it
ModuleTable = _core.ModuleTable
CallTags = _core.CallTags

place_by_rules = _core.place_by_rules
calls_of_readers = _core.calls_of_readers
unplaced = _core.unplaced
main_graph_value_infos = _core.main_graph_value_infos  # an inferred model's types without its graph
# A model file's bytes with its main graph's weights pointing at where they lie in it.
with_weights_left_in_file = _core.with_weights_left_in_file

# An initializer of more bytes than this is a weight: the core and carry read
# no such tensor's values (shape inputs, the few integers shape inference and
# ONNX Runtime's graph resolution read, are far smaller).
WEIGHT_BYTES = 1024

# A tagged file opened once (core/file/file_commands.h): validate, tree and
# extract, results as the native tool's --json prints them; refusals raise
# TaggedFileError (a ValueError) or, for extract, its subclass of the kind.
TaggedFile = _core.TaggedFile
TaggedFileError = _core.TaggedFileError
UnknownModule = _core.UnknownModule
ExtractRefused = _core.ExtractRefused
OverwritesInput = _core.OverwritesInput
BadValueTypes = _core.BadValueTypes
WriteFailed = _core.WriteFailed


def value_types():
    """What TaggedFile.extract, TaggedFile.value_types and run_tool take as
    `value_types`: a callable that, given a serialized model (a piece of a
    file's main graph: the core infers a piece at a time, so that inference
    never holds the whole model), returns it as ONNX's shape inference (the onnx
    package's C++, with data propagation) types it, serialized, bytes to bytes
    (the model is never parsed into Python objects); None when inference fails
    (extract then names the first value it cannot type). The native tool's own
    build may have no ONNX library (a wheel's has none)."""
    def infer(model):
        from onnx.onnx_cpp2py_export import shape_inference  # imported on first need: 28 MB resident
        try:
            return shape_inference.infer_shapes(model, False, False, True)
        except Exception:  # what inference cannot type stays untyped; extract names the value
            return None
    return infer


tool_commands = _core.tool_commands  # the native commands' (name, summary), as the tool declares them


class ToolRun(typing.NamedTuple):
    """A run of the native tool's command line: its exit status and output,
    named as subprocess.run's result names them (bytes)."""
    returncode: int
    stdout: bytes
    stderr: bytes

    def text(self):
        """The same run, its output decoded (UTF-8: the tool escapes what is not)."""
        return self._replace(stdout=self.stdout.decode(), stderr=self.stderr.decode())


def run_tool(arguments):
    """The native tool's command line (validate, tree, extract) run in process
    over core/file, as the `hiertag` binary runs it (a ToolRun); extract types
    values its file does not by value_types()."""
    return ToolRun(*_core.run_tool([str(argument) for argument in arguments], value_types()))


def inferred_value_infos(path, **options):
    """ONNX's shape inference of the model file at `path`
    (onnx.shape_inference.infer_shapes_path with `options`), run file to file in
    ONNX's C++, as a GraphProto holding the inferred main graph's inputs,
    outputs and value_info alone (main_graph_value_infos): the model is never
    parsed into Python objects. Raises what inference raises."""
    import onnx
    with tempfile.TemporaryDirectory(prefix="hiertag-inferred-") as directory:
        inferred = Path(directory) / "inferred.onnx"
        try:
            onnx.shape_inference.infer_shapes_path(str(path), str(inferred), **options)
        finally:
            hand_back_freed_memory()
        return onnx.GraphProto.FromString(main_graph_value_infos(inferred.read_bytes()))


def hand_back_freed_memory():
    """Hands the heap the C library holds free back to the system (glibc's
    malloc_trim; elsewhere nothing). ONNX's C++ shape inference parses the
    whole model into small allocations and frees them; glibc keeps that room,
    which Python's small objects (in arenas of their own) do not reuse, so the
    process's resident set would stay as high as that moment (README "Scale")."""
    trim = getattr(_c_library(), "malloc_trim", None)
    if trim is not None:
        trim(0)


@functools.cache
def _c_library():
    import ctypes
    return ctypes.CDLL(None)


def serialized(model):
    """A model's bytes: `model` itself, or a ModelProto serialized. The core reads
    the graph and never a weight's bytes, so a model protobuf cannot serialize
    (2 GiB or more, its weights read in) is serialized from a copy whose main
    graph's large initializers hold no data; `model` is left as it is, and no
    weight's bytes are read (a tensor over 2 GiB in a Constant or a subgraph
    still cannot be serialized)."""
    if isinstance(model, bytes):
        return model
    try:
        return model.SerializeToString()
    except message.EncodeError:
        pass
    light = type(model)()
    _copy_fields(model, light, skip={"graph"})
    _copy_fields(model.graph, light.graph, skip={"initializer"})
    for tensor in model.graph.initializer:
        weight = larger_than(tensor, WEIGHT_BYTES)
        _copy_fields(tensor, light.graph.initializer.add(), skip=_DATA_FIELDS if weight else ())
    return light.SerializeToString()


# TensorProto's fields that hold its values.
_DATA_FIELDS = {"raw_data", "float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data"}


def larger_than(proto, limit):
    """Whether protobuf message `proto` serializes to more than `limit` bytes
    (true past 2 GiB, where upb cannot even size it)."""
    try:
        return proto.ByteSize() > limit
    except message.EncodeError:
        return True


def _copy_fields(source, target, skip=()):
    """Copies every field of `source` into `target` but those named in `skip`,
    which are never read."""
    for field in source.DESCRIPTOR.fields:
        if field.name in skip or (field.has_presence and not source.HasField(field.name)):
            continue
        value = getattr(source, field.name)
        if field.is_repeated:
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


class CallTable:
    """A tagged model's module calls (module_calls_in_file.h): `calls_at(ref,
    ancestor)`, the set of the ancestor's calls the reference ran in, and
    `belongs(user, ref)`. References are (tag, call), call None for every call.
    `model`: bytes or a ModelProto."""

    def __init__(self, model):
        self._table = _core.CallTable(serialized(model))

    def calls_at(self, ref, ancestor):
        return set(self._table.calls_at(tuple(ref), ancestor))

    def belongs(self, user, ref):
        return self._table.belongs(tuple(user), tuple(ref))


def value_graph(model):
    """carry's tables of `model`'s main graph (bytes or a ModelProto): the
    core's ValueGraph (core/carry/value_graph.h)."""
    return _core.ValueGraph(serialized(model))


def _asked(model, question):
    """The core's answer to `question` (module_boundaries, rewritten_boundaries,
    rewrite_records, weight_values) about `model`: the opened TaggedFile's
    method of that name, which reads no bytes again, or the _core function of
    that name over the model's bytes."""
    if isinstance(model, TaggedFile):
        return getattr(model, question)()
    return getattr(_core, question)(serialized(model))


def module_boundaries(model):
    """{(tag, call): (inputs, outputs, nodes)} for every call of every module
    of the tagged model `model` (its serialized bytes, a ModelProto, or
    a TaggedFile, opened once for many questions), by the
    module-boundary rule `hiertag extract` cuts by (tool/module_boundaries.h):
    the values the call's nodes read from outside and hand out, in node order,
    and the positions in the main graph of the nodes the file gives the call
    (weight nodes too), an array("i"). ValueError for a model that is not
    tagged or has malformed references."""
    rows = _asked(model, "module_boundaries")
    # One string per name, which many calls' boundaries list (a dict: see
    # hiertag/verbs/carry/correspondence.py Graph).
    names = {}
    return {(tag, call): ([names.setdefault(n, n) for n in inputs], [names.setdefault(n, n) for n in outputs],
                          _positions(nodes))
            for tag, call, inputs, outputs, nodes in rows}


def _positions(packed):
    """Node positions the core packs as native int32, as an array("i"): a call
    lists the nodes of every call inside it, too many for a Python int each."""
    positions = array.array("i")
    positions.frombytes(packed)
    return positions


def rewritten_boundaries(model):
    """{(tag, call): why} for every call of the tagged model `model` (bytes, a
    ModelProto or a TaggedFile) whose boundary the file records an export pass (or hiertag
    carry) removed: a rewrite listing a call within it and one outside it, or a
    "rewired" record listing it (tool/module_boundaries.h CutBy).
    `hiertag extract` refuses these calls; the verifier does not check them."""
    rows = _asked(model, "rewritten_boundaries")
    return {(tag, call): why for tag, call, why in rows}


def rewrite_records(model):
    """The rewrites the tagged model `model` (bytes, a ModelProto or a TaggedFile) records
    across module boundaries: its hiertag.rewrites records, then a "fused"
    record for every node with hiertag.spans that none names, as dicts (pass,
    kind, modules, node; cause and reason when the writer gave them)."""
    return _asked(model, "rewrite_records")


def weight_values(model):
    """The main graph's weights in `model` (bytes, a ModelProto or a TaggedFile; tagged or
    not): initializers, and the outputs of Constants and of nodes computing from
    weights alone (the Identity torch writes for a deduplicated parameter). No
    module call receives or hands them out (README "Module boundaries")."""
    return set(_asked(model, "weight_values"))
