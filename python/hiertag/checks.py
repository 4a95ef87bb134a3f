"""Reading a tagged ONNX file back, and the module-boundary check: shared by
the verifier (hiertag verify, hiertag/verbs/verify.py) and the end-to-end tests.

torch and onnxruntime are imported by the functions that run a model, so the
verbs that only read files (select, report, graphml, explorer, compare without
--values) import neither (tests/e2e/test_verbs.py)."""

import array
import functools
import json
import os
import sys
import tempfile
import weakref

import numpy as np
import onnx
from google.protobuf import message

from hiertag import core
from hiertag.core import CALL_KEY, SHARED_KEY, TABLE_KEY, TAG_KEY


def torchscript_exporter():
    """The module of torch's TorchScript-based exporter: where torch.onnx.utils.export is
    defined (torch.onnx.utils in torch 2.4 to 2.8, torch.onnx._internal.torchscript_exporter.utils
    later), as the plugin finds it."""
    import torch.onnx.utils
    return sys.modules[torch.onnx.utils.export.__module__]


def node_props(node, names=None):
    """{key: value} of the node's metadata_props; with `names`, a dict of
    strings, each key and value the one string `names` holds for it (hiertag
    carry's tables hold a call's tag on every node of the call)."""
    if names is None:
        return {p.key: p.value for p in node.metadata_props}
    return {names.setdefault(p.key, p.key): names.setdefault(p.value, p.value) for p in node.metadata_props}


def walk_graphs(graph):
    """The graph and every graph nested in its nodes' attributes (If/Loop/Scan bodies), in pre-order."""
    yield graph
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from walk_graphs(attribute.g)
            for sub in attribute.graphs:
                yield from walk_graphs(sub)


def walk_nodes(graph):
    """Every node, nested graphs included, in pre-order."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attribute.g)
            for sub in attribute.graphs:
                yield from walk_nodes(sub)


def module_table(model):
    return json.loads({p.key: p.value for p in model.metadata_props}[TABLE_KEY])


def is_within(tag, ancestor):
    """Whether `tag` is `ancestor` or lies below it (segment-wise)."""
    return core.is_tag_ancestor_or_self(ancestor, tag)


# The tag of the parent module; "" for a root tag.
parent_tag = core.parent_tag


def call_count(table, tag):
    return len(table.get(tag, {}).get("calls", [0]))


# Module calls in a tagged file. A reference is (tag, call): call None means
# every call. Which calls of an ancestor a reference ran in, and whether a
# reader belongs to a reference, are the core's (core.CallTable), as are the
# boundary rule and the rewrites that cut boundaries (module_boundaries,
# rewritten_boundaries).

# 'TAG' -> (TAG, None); 'TAG#K' -> (TAG, K); ValueError when something else follows the last '#'.
parse_ref = core.parse_call_ref


def node_refs(node):
    """The node's references: its own (tag, hiertag.call), then hiertag.shared_with's."""
    return refs(node_props(node))


def refs(props):
    """node_refs of a node's entries (node_props)."""
    if TAG_KEY not in props:
        return []
    return [(props[TAG_KEY], int(props.get(CALL_KEY, "0")))] + \
        [parse_ref(text) for text in json.loads(props.get(SHARED_KEY, "[]"))]


def model_props(model):
    return {p.key: p.value for p in model.metadata_props}


def rewritten_boundaries(model, table=None):
    """{boundary key: why} for the module calls whose boundary an export pass
    (or hiertag carry) removed, as the file records it: the core's rule
    (core.rewritten_boundaries), which `hiertag extract` refuses by. `model`:
    a ModelProto, or the file opened once (core.TaggedFile) with its `table`."""
    table = module_table(model) if table is None else table
    return {boundary_key(table, tag, call): why for (tag, call), why in core.rewritten_boundaries(model).items()}


def strip_tags(model, in_place=False):
    """The model without hiertag's entries: a copy, or `model` itself stripped
    when `in_place`."""
    if in_place:
        copy = model
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
    for node in walk_nodes(copy.graph):
        keep = [p for p in node.metadata_props if p.key != TAG_KEY and not p.key.startswith(core.KEY_PREFIX)]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    keep = [p for p in copy.metadata_props if not p.key.startswith(core.KEY_PREFIX)]
    del copy.metadata_props[:]
    copy.metadata_props.extend(keep)
    return copy


def flatten_tensors(value, out, depth=0, copy=True):
    """The tensors in a call's arguments or result (cloned; `copy` False: the
    tensors themselves, numbers skipped). A function passed as an argument
    brings the tensors it closes over (`lambda x: self.attn(x, x, x, mask)`
    hands the callee `mask`); a module passed as one brings only weights."""
    import torch
    if depth > 8:
        return out
    if isinstance(value, torch.Tensor):
        out.append(value.detach().clone() if copy else value)
    elif isinstance(value, (bool,)):
        return out
    elif isinstance(value, (int, float)):
        if copy:
            out.append(torch.tensor(value))
    elif isinstance(value, dict):
        for item in value.values():
            flatten_tensors(item, out, depth + 1, copy)
    elif isinstance(value, (list, tuple)):
        for item in value:
            flatten_tensors(item, out, depth + 1, copy)
    elif hasattr(value, "to_tuple"):
        flatten_tensors(value.to_tuple(), out, depth + 1, copy)
    elif isinstance(value, functools.partial):
        flatten_tensors((value.args, value.keywords), out, depth + 1, copy)
    elif callable(value) and getattr(value, "__closure__", None):
        for cell in value.__closure__:
            try:
                flatten_tensors(cell.cell_contents, out, depth + 1, copy)
            except ValueError:  # an empty cell
                pass
    return out


def _attribute_tensors(module):
    """{name: tensor} of the tensors a module holds as plain attributes."""
    import torch
    return {name: value for name, value in vars(module).items() if isinstance(value, torch.Tensor)}


# Scripted model -> the nn.Module it was scripted from (same paths, same
# weights): forward hooks cannot run on a ScriptModule, so the boundary check
# records the eager twin. Weak keys: an entry goes with its scripted model, so
# a later model that Python puts at the freed one's address (same id()) is not
# taken for it.
_EAGER_TWINS = weakref.WeakKeyDictionary()


def register_eager_twin(scripted, eager):
    _EAGER_TWINS[scripted] = eager


def eager_reference(model):
    """The module whose forward hooks stand for `model`'s calls."""
    try:
        return _EAGER_TWINS.get(model, model)
    except TypeError:  # a user's module without a hash (__eq__ defined, __hash__ not) is no twin
        return model


# The metadata torch's dynamo exporter writes on the graph of every file it makes.
DYNAMO_GRAPH_KEY = "pkg.torch.export.ExportedProgram.graph_signature"


def is_dynamo_export(model):
    """Whether the ModelProto was written by torch's dynamo exporter."""
    return any(entry.key == DYNAMO_GRAPH_KEY for entry in model.graph.metadata_props)


def dynamo_arguments(args):
    """torch.onnx.export's TorchScript-path `args` (a trailing dict holds keyword
    arguments) as the dynamo path takes them: (positional tuple, kwargs dict).
    The dynamo exporter passes only these, leaving every other parameter at its
    default."""
    args = args if isinstance(args, tuple) else (args,)
    if args and isinstance(args[-1], dict):
        return args[:-1], args[-1]
    return args, {}


@functools.cache
def _keyword_call_class():
    """The class (made once, torch imported only then) of a model called with keyword
    tensors, for the tracer, which passes positional tensors only: the model is its
    child, so its parameters stay parameters."""
    import torch

    class KeywordCall(torch.nn.Module):
        def __init__(self, model, positional, traced, fixed):
            super().__init__()
            self.model, self.positional, self.traced, self.fixed = model, positional, traced, fixed

        def forward(self, *tensors):
            given = dict(zip(self.traced, tensors[self.positional:], strict=True))
            return self.model(*tensors[:self.positional], **given, **self.fixed)

    return KeywordCall


def record_module_io(model, args, dynamo=False):
    """{qualified path: [(received, returned) per call, in call order]} for
    every module call, through __call__ or straight to .forward(): each
    module's forward is wrapped for the run (values cloned: modules mutate in
    place) while the model runs as the exporter ran it, so the values are real
    and models take the code paths they take under export: the TorchScript
    exporter's own tracer on the arguments as it decides them (transformers
    keeps an all-ones attention mask when tracing and drops it in plain eager
    mode; a parameter not given, GPT-2's logits_to_keep, is passed its
    default); `dynamo`, for a file of the dynamo exporter: on the arguments
    given, as torch.export calls the model, still under that tracer (the code
    paths of a traced model)."""
    import torch
    calls = {}
    decided = None if dynamo else torchscript_exporter()._decide_input_format(model, args)
    wrapped = []
    for path, module in model.named_modules():
        original = module.forward

        @functools.wraps(original)
        def forward(*call_args, _path=path, _original=original, _module=module, **call_kwargs):
            arguments = (call_args, call_kwargs)
            record = (flatten_tensors(arguments, []), [])
            calls.setdefault(_path, []).append(record)
            given = flatten_tensors(arguments, [], copy=False)
            versions = [t._version for t in given]
            attributes = _attribute_tensors(_module)
            result = _original(*call_args, **call_kwargs)
            returned = record[1]
            returned.extend(flatten_tensors(result, []))
            # Results handed out otherwise: inputs changed in place, tensors put
            # into argument containers (a list the caller reads), tensors set on
            # the module's own attributes (an attention map kept for the caller).
            returned.extend(t.detach().clone() for t, v in zip(given, versions, strict=True) if t._version != v)
            known = {id(t) for t in given}
            returned.extend(t.detach().clone() for t in flatten_tensors(arguments, [], copy=False)
                            if id(t) not in known)
            returned.extend(value.detach().clone() for name, value in _attribute_tensors(_module).items()
                            if attributes.get(name) is not value)
            return result

        wrapped.append((module, module.__dict__.get("forward")))
        module.forward = forward
    try:
        # With gradients on, as the exporters trace: modules take the same
        # paths (nn.TransformerEncoderLayer's fast path runs only without them).
        if dynamo:
            # Under the tracer too (the code paths of a traced model: transformers
            # keeps the attention mask under torch.export as under tracing), on the
            # arguments given.
            positional, keywords = dynamo_arguments(args)
            traced = [name for name, value in keywords.items() if isinstance(value, torch.Tensor)]
            fixed = {name: value for name, value in keywords.items() if name not in traced}
            call = _keyword_call_class()(model, len(positional), traced, fixed)
            torch.jit._get_trace_graph(call, (*positional, *(keywords[name] for name in traced)), strict=False)
        else:
            torch.jit._get_trace_graph(model, tuple(decided), strict=False)
    finally:
        for module, own in wrapped:
            if own is None:
                del module.__dict__["forward"]
            else:
                module.__dict__["forward"] = own
    return calls


def _implicit_inputs(node):
    """Names a node reads, its subgraphs' outer-scope references included."""
    names = [name for name in node.input if name]
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []) + list(attribute.graphs)
        for graph in graphs:
            defined = {i.name for i in graph.input} | {i.name for i in graph.initializer}
            for inner in walk_nodes(graph):
                defined.update(inner.output)
            for inner in walk_nodes(graph):
                names.extend(n for n in inner.input if n and n not in defined)
    return names


def module_boundaries(model, members=None):
    """{(tag, call): (values consumed from outside, values produced for outside)}
    over the main graph, for every call of every tag in the table, sorted: the
    rule of README "Module boundaries" as the core states it once
    (tool/module_boundaries.h, which `hiertag extract` cuts by; core.module_boundaries).
    `members`, a dict, receives {(tag, call): indices of the main-graph nodes
    the file gives that call, weight nodes too}."""
    boundaries = {}
    for key, (inputs, outputs, nodes) in core.module_boundaries(model).items():
        boundaries[key] = (sorted(inputs), sorted(outputs))
        if members is not None:
            members[key] = nodes
    return boundaries


def feeds_for(model, torch_model, args):
    """ONNX Runtime feeds for an export of `torch_model` on `args` (`model`: its
    bytes, or its path, which a model with external data needs): the
    arguments as the exporter itself decided them (keywords placed by
    signature, defaults such as GPT-2's logits_to_keep kept), in order; an
    argument torch dropped from the graph (read only for its shape, constant-
    folded) is skipped, the graph's inputs matched in order by type and shape."""
    import onnxruntime
    import torch
    decided = torchscript_exporter()._decide_input_format(torch_model, args)
    values = [v for v in decided if isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool)]
    arrays = [v.numpy() if isinstance(v, torch.Tensor) else np.array(v) for v in values]
    # A path (str or Path) lets ONNX Runtime find external data beside the file.
    source = str(model) if isinstance(model, (str, os.PathLike)) else model
    inputs = onnxruntime.InferenceSession(source).get_inputs()
    feeds = {}
    position = 0
    for graph_input in inputs:
        while position < len(arrays) and not _fits(graph_input, arrays[position]):
            position += 1
        if position == len(arrays):
            raise ValueError(f"no argument fits the model's input '{graph_input.name}' "
                             f"({graph_input.type} {graph_input.shape})")
        feeds[graph_input.name] = arrays[position]
        position += 1
    return feeds


def _fits(graph_input, array):
    """Whether `array` can feed ONNX Runtime input `graph_input` (its type and static dims)."""
    expected = graph_input.type.removeprefix("tensor(").removesuffix(")")
    names = {"float": "float32", "double": "float64", "bool": "bool"}
    if names.get(expected, expected) != str(array.dtype):
        return False
    shape = graph_input.shape
    return len(shape) == array.ndim and all(not isinstance(d, int) or d == n
                                            for d, n in zip(shape, array.shape, strict=True))


def with_outputs(model, names):
    """A copy of `model` whose main graph also outputs `names` (those it does not already)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    for name in names:
        if name not in existing:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    return probe


def unoptimized_session_options(data_folder=None):
    """ONNX Runtime session options with graph optimizations off, so every
    node of the file runs. `data_folder`: where the external data of a model
    read without it lies (ONNX Runtime maps it from there instead of holding a
    copy)."""
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    if data_folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(data_folder))
    return options


# ONNX Runtime's session set-up grows faster than the graph it is given: it
# looks graph outputs and initializers up by name in linear scans, and plans
# buffer reuse in quadratic time too (bench/ort_session_cost.py: 2.4 s to set
# up a 16k-node graph with every value an output, 40 s at 65k nodes).
# intermediate_values therefore runs a main graph of more nodes than this in
# consecutive segments, each its own session.
SEGMENT_NODES = 1000


def intermediate_values(model, feeds, names, data_folder=None, segment_nodes=SEGMENT_NODES, known=None):
    """ONNX Runtime values of the model's outputs and of `names` (optimizations
    off so every node runs; `data_folder` as for unoptimized_session_options).
    `known`: {name: array}, values computed before (another model's): a value
    equal to the one of its name there, in type, shape and every element, is
    handed back as that array, so the two are held once (hiertag carry's check
    by correspondence holds every value of both models, most of them the same).

    The main graph runs in segments of `segment_nodes` nodes in file order:
    each segment a model of those nodes, whose inputs are the graph inputs and
    initializers they read and the values earlier segments made (typed as
    computed), and whose outputs are the values later segments read and those
    asked for; the first segment is also given every feed and initializer asked
    for, so ONNX Runtime checks the feeds and hands back what is asked as one
    session does. What decides a kernel or its result is kept as one session has
    it: a Constant node read across a cut is copied into the segment (ONNX
    Runtime makes it a constant initializer, which MatMul prepacks), an
    initializer the graph also lists as an input stays overridable. A float16
    value does not cross a cut: ONNX Runtime runs a node with no float16
    kernel in float32 between Casts, and passes float32 on between two such
    nodes, which a cut would round. So every node runs the kernel it would run
    in one session, on the same inputs, and the values are one session's bit
    for bit. The whole graph runs in one session, whose error is the model's,
    when a value crossing a cut is not a tensor, or is a float16 or bfloat16
    one, when the feeds are not exactly the graph's feedable inputs, or when a
    segment cannot run."""
    found = {}
    for values in values_as_computed(model, feeds, names, data_folder, segment_nodes):
        found.update(held_once(values, known))
    return {name: found[name] for name in dict.fromkeys([*(o.name for o in model.graph.output), *names])}


def values_as_computed(model, feeds, names, data_folder=None, segment_nodes=SEGMENT_NODES):
    """intermediate_values as its segments compute them: yields {name: value}
    dicts, each value of the graph outputs and `names` in one of them, so a
    caller can compare values and let go of them as they come rather than
    hold every one (hiertag carry's check). One dict where intermediate_values
    runs one session. ONNX Runtime's error is raised as intermediate_values
    raises it, possibly after some dicts came: a segment that cannot run gives
    way to the one session, which hands on the values that have not come."""
    graph = model.graph
    if len(graph.node) <= segment_nodes or graph.sparse_initializer or not _feeds_fit(model, feeds):
        yield _session_values(model, names, feeds, data_folder)
        return
    came = set()
    try:
        for values in _segments(model, feeds, names, data_folder, segment_nodes):
            came.update(values)
            yield values
    except _CannotSegment:
        yield {name: value for name, value in _session_values(model, names, feeds, data_folder).items()
               if name not in came}


def held_once(values, known):
    """`values` with each one equal to the array of its name in `known` (in
    type, shape and every element, NaNs in the same places) replaced by that
    array, so the two are held once (intermediate_values)."""
    if not known:
        return values
    for name, value in values.items():
        before = known.get(name)
        if (isinstance(value, np.ndarray) and isinstance(before, np.ndarray) and value.dtype == before.dtype and
                value.shape == before.shape and value.dtype.kind in "biufc" and
                np.array_equal(value, before, equal_nan=value.dtype.kind in "fc")):
            values[name] = before
    return values


class _CannotSegment(Exception):
    pass


# Element types a cut may not carry (intermediate_values).
_WIDENED = {onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


def _feeds_fit(model, feeds):
    """Whether `feeds` name graph inputs only, and every input without an
    initializer (an initializer listed as an input is a constant, not fed,
    below IR 4): otherwise one session reports the model's error."""
    inputs = {i.name for i in model.graph.input}
    initializers = {i.name for i in model.graph.initializer}
    feedable = inputs if model.ir_version >= 4 else inputs - initializers
    return set(feeds) <= feedable and inputs - initializers <= set(feeds)


class _Crossings:
    """Which values of a graph cross from one segment of it into a later one
    (_segments), found from the last segment back: only those are tabled by
    name (a table of where every value is made and last read was as large as
    the values a check holds at depth). `exported[s]`: the values segment s
    makes that a later one reads; `last_read`: {such a value: the last segment
    reading it}; `constants`: {such a value a Constant makes: that node's
    position}; `made`: the names of `wanted` some node makes; `described[s]`:
    the positions in value_info of the values segment s makes."""

    def __init__(self, graph, segment_nodes, wanted):
        count = (len(graph.node) + segment_nodes - 1) // segment_nodes
        self.exported = [set() for _ in range(count)]
        self.described = [array.array("i") for _ in range(count)]
        self.last_read, self.constants, self.made = {}, {}, set()
        position = {info.name: index for index, info in enumerate(graph.value_info)}
        later = {}  # {value a later segment reads and none after this makes: the last segment reading it}
        for segment in reversed(range(count)):
            nodes = graph.node[segment * segment_nodes:(segment + 1) * segment_nodes]
            made = set()
            for offset, node in enumerate(nodes):
                for name in node.output:
                    if not name:
                        continue
                    made.add(name)
                    if name in wanted:
                        self.made.add(name)
                    if name in position:
                        self.described[segment].append(position.pop(name))
                    if name in later:
                        self.exported[segment].add(name)
                        self.last_read[name] = later.pop(name)
                        if node.op_type == "Constant":  # in any domain, as ONNX Runtime reads it
                            self.constants[name] = segment * segment_nodes + offset
            for node in nodes:
                for name in _implicit_inputs(node):
                    if name not in made:
                        later.setdefault(name, segment)


def _segments(model, feeds, names, data_folder, segment_nodes):
    """values_as_computed in segments: {name: value} of what each segment
    computes of the outputs and `names` (raises _CannotSegment)."""
    graph = model.graph
    outputs_declared = {o.name: o for o in graph.output}
    order = list(dict.fromkeys([*outputs_declared, *names]))
    wanted = set(order)
    # What a segment reads is listed again when it runs, and the value types
    # are found by position: tables of every node's reads or every ValueInfoProto
    # by name are each as large as the values held at depth.
    crossings = _Crossings(graph, segment_nodes, wanted)
    inputs = {i.name: i for i in graph.input}
    initializers = {i.name: i for i in graph.initializer}
    computed = {}  # the values a later segment reads
    for start in range(0, len(graph.node), segment_nodes):
        segment = start // segment_nodes
        nodes = graph.node[start:start + segment_nodes]
        copied, part_inputs, part_initializers, part_feeds = [], [], [], {}
        read_here = dict.fromkeys(n for node in nodes for n in _implicit_inputs(node))
        if segment == 0:
            # Every feed and every initializer asked for, read or not: ONNX Runtime
            # checks the feeds, and hands back what is asked as one session does.
            read_here.update(dict.fromkeys(feeds))
            read_here.update(dict.fromkeys(n for n in order if n in initializers))
        for name in read_here:
            if crossings.constants.get(name, start) < start:
                copied.append(graph.node[crossings.constants[name]])
            elif name in computed:
                value = computed[name]
                try:
                    element = onnx.helper.np_dtype_to_tensor_dtype(value.dtype)
                except (AttributeError, KeyError, ValueError):  # a sequence, a map: not fed as a tensor
                    raise _CannotSegment from None
                if element in _WIDENED:
                    raise _CannotSegment
                part_inputs.append(onnx.helper.make_tensor_value_info(name, element, value.shape))
                part_feeds[name] = value
            elif name in feeds:
                part_inputs.append(inputs[name])
                part_feeds[name] = feeds[name]
            elif name in initializers:
                part_initializers.append(initializers[name])
                if name in inputs:  # overridable, as in one session: not a constant
                    part_inputs.append(inputs[name])
            # else made in this segment, or a name of a subgraph's own scope
        made = [n for node in nodes for n in node.output if n]
        given = [n for n in order if segment == 0 and n in read_here and n not in crossings.made]
        exported = crossings.exported[segment]
        outputs = [n for n in made if n in wanted or n in exported] + given or made
        part = onnx.ModelProto(ir_version=model.ir_version, opset_import=model.opset_import, functions=model.functions)
        part.graph.name = graph.name
        part.graph.node.extend(copied)
        part.graph.node.extend(nodes)
        part.graph.input.extend(part_inputs)
        part.graph.initializer.extend(part_initializers)
        part.graph.output.extend(outputs_declared.get(n) or onnx.ValueInfoProto(name=n) for n in outputs)
        types = {info.name: info for info in map(graph.value_info.__getitem__, crossings.described[segment])}
        crossings.exported[segment] = crossings.described[segment] = None
        part.graph.value_info.extend(types[n] for n in made if n in types)
        try:
            values = _session_values(part, (), part_feeds, data_folder)
        except Exception:  # ONNX Runtime's error on a part: the whole model's is the one to report
            raise _CannotSegment from None
        computed.update(values)
        found = {n: v for n, v in values.items() if n in wanted}
        for name in [n for n in computed if crossings.last_read.get(n, -1) <= segment]:
            del computed[name]
            crossings.last_read.pop(name, None)
        wanted -= found.keys()
        yield found
    if wanted:  # made by no node, fed by none: the one session reports it as the model's error
        raise _CannotSegment


def _hold_weights(model, data_folder):
    """Reads the external data of `model`'s initializers in from `data_folder`
    when it then still fits in one protobuf message, so ONNX Runtime runs it as
    it runs a file holding them: a weight it maps from a file may lie unaligned,
    and a kernel can round differently over it (a BatchNormalization over a
    weight, by one ulp). A model read without its weights (carry) holds them
    only in the session that runs it; past 2 GiB they stay mapped."""
    from onnx import external_data_helper
    external = [tensor for graph in walk_graphs(model.graph) for tensor in graph.initializer
                if external_data_helper.uses_external_data(tensor)]
    lengths = [next((int(e.value) for e in tensor.external_data if e.key == "length"), None) for tensor in external]
    if not external or None in lengths or core.larger_than(model, _MESSAGE_LIMIT - sum(lengths)):
        return
    for tensor in external:
        external_data_helper.load_external_data_for_tensor(tensor, str(data_folder))


# What one protobuf message holds, with room for the fields around the data.
_MESSAGE_LIMIT = 2**31 - 2**20


def _session_values(model, names, feeds, data_folder=None):
    """{output: value} of one ONNX Runtime session, optimizations off, on
    `model` with `names` added to its outputs. Each tensor is copied into an
    array of its own: ONNX Runtime hands back arrays over its own tensors,
    which the array keeps alive at several kB each whatever their size (when
    carry held every value of both models: on the 200-layer decoder, 24k values
    of 23 MB of elements, its peak heap was 268 MB with ONNX Runtime's tensors
    and 210 MB with copies, by heaptrack)."""
    import onnxruntime
    probe = with_outputs(model, names)
    if data_folder is not None:
        _hold_weights(probe, data_folder)
    options = unoptimized_session_options(data_folder)
    wanted = [o.name for o in probe.graph.output]
    try:
        serialized = probe.SerializeToString()
    except message.EncodeError:  # 2 GiB or more: ONNX Runtime reads it from a file, its weights beside it
        with tempfile.TemporaryDirectory(prefix="hiertag-probe.") as folder:
            path = os.path.join(folder, "probe.onnx")
            onnx.save(probe, path, save_as_external_data=True, all_tensors_to_one_file=True, location="probe.data")
            del probe
            return _owned(zip(wanted, onnxruntime.InferenceSession(path, options).run(wanted, feeds), strict=True))
    del probe
    return _owned(zip(wanted, onnxruntime.InferenceSession(serialized, options).run(wanted, feeds), strict=True))


def _owned(values):
    """{name: value}, each array copied out of ONNX Runtime's tensor (_session_values)."""
    return {name: np.array(value) if isinstance(value, np.ndarray) else value for name, value in values}


# A value equals a tensor when every element is within this share of its own
# magnitude plus the typical magnitude of what differs (disagreement): float32
# rounding where ONNX Runtime computes differently from eager PyTorch (Conv and
# BatchNorm fused, another summation order), measured per element, with an
# absolute floor for the elements that cancel to near zero.
FLOAT32_TOLERANCE = 1e-4


def disagreement(value, expected):
    """How far `value` is from `expected`, element by element: the largest

        |value - expected| / (|expected| + typical)

    over the elements where the two differ, `typical` being the mean magnitude
    of `expected` over those elements (at least the smallest normal number of
    the coarser type). So `value` agrees with `expected` within a tolerance T
    (disagreement <= T) when every element is within T of its own magnitude,
    plus an absolute floor of T times the typical magnitude of what differs.

    The floor: an element that cancels to near zero (a sum of terms of the
    tensor's typical size) carries the rounding of those terms, not of its own
    size; the typical magnitude stands for theirs. It is taken over the
    differing elements only, so elements equal on both sides (a HuggingFace
    attention mask's finfo(float32).min, masked scores, zeros, copied values)
    agree whatever their size and set no scale: an extreme value cannot make
    the rest look equal. The mean, not the largest magnitude, so one large
    element cannot either.

    0 when equal (equal infinities, and NaNs in the same places, are equal);
    inf when the shapes differ, when an integer or boolean element differs, or
    when one has an infinity or NaN where the other has not. Every comparison
    of values goes through here: the boundary check and the verifier, carry's
    check, the carry matrix's judge, `hiertag compare`."""
    value, expected = np.asarray(value), np.asarray(expected)
    if value.shape != expected.shape:
        return float("inf")
    if expected.size == 0:
        return 0.0
    if not (np.issubdtype(expected.dtype, np.floating) or np.issubdtype(value.dtype, np.floating)):
        return 0.0 if np.array_equal(value, expected) else float("inf")
    a, b = value.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    if not differ.any():
        return 0.0
    a, b = a[differ], b[differ]
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    # Below the smallest normal number of the coarser type (float32: 1.2e-38)
    # precision is absolute, not relative: a tensor whose activations died to
    # subnormals (MobileViT's last stage at random weights) is compared there.
    floor = max(float(np.finfo(array.dtype).tiny) for array in (value, expected)
                if np.issubdtype(array.dtype, np.floating))
    magnitude = np.abs(b)
    largest = float(magnitude.max())
    # The mean as the largest times the mean of the ratios: no sum overflows.
    typical = max(largest * float(np.mean(magnitude / largest)) if largest > 0 else 0.0, floor)
    return float((np.abs(a - b) / (magnitude + typical)).max())


def median_disagreement(value, expected):
    """disagreement's measure over the elements that differ, their median: how
    far `value` is from `expected` for most of its elements, not at its worst.
    For telling another model's output (most elements off by their own size)
    from a lower-precision copy (most elements close, a few far: int8 rounds one
    of a data2vec-audio output's elements from 0.21 to 1.00). 0 when equal; inf
    where disagreement is inf for any element."""
    value, expected = np.asarray(value), np.asarray(expected)
    if value.shape != expected.shape:
        return float("inf")
    if expected.size == 0 or disagreement(value, expected) == 0.0:
        return 0.0
    if not (np.issubdtype(expected.dtype, np.floating) or np.issubdtype(value.dtype, np.floating)):
        return float("inf")
    a, b = value.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    a, b = a[differ], b[differ]
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        return float("inf")
    magnitude = np.abs(b)
    largest = float(magnitude.max())
    typical = largest * float(np.mean(magnitude / largest)) if largest > 0 else 0.0
    floor = max(float(np.finfo(array.dtype).tiny) for array in (value, expected)
                if np.issubdtype(array.dtype, np.floating))
    return float(np.median(np.abs(a - b) / (magnitude + max(typical, floor))))


def assign_tensors(values, tensors, tolerance=FLOAT32_TOLERANCE):
    """{value name: index into `tensors`}: for each boundary value the one
    recorded tensor it is, one to one (two values crossing a boundary are two
    tensors of the call, never one tensor claimed twice), preferring the
    closest. A value equal to no unclaimed tensor within `tolerance` is left
    out."""
    import torch
    arrays = [t.numpy() if isinstance(t, torch.Tensor) else np.asarray(t) for t in tensors]
    fits = {}
    for name, value in values.items():
        found = [(disagreement(value, array), index) for index, array in enumerate(arrays)
                 if array.shape == np.shape(value)]
        fits[name] = [index for distance, index in sorted(found) if distance <= tolerance]
    owner = {}

    def claim(name, seen):
        for index in fits[name]:
            if index in seen:
                continue
            seen.add(index)
            if index not in owner or claim(owner[index], seen):
                owner[index] = name
                return True
        return False

    for name in sorted(values, key=lambda n: (len(fits[n]), n)):
        claim(name, set())
    return {name: index for index, name in owner.items()}


def boundary_key(table, tag, call):
    """How results name one call: the tag, with "#k" when it has several calls."""
    return tag if call_count(table, tag) == 1 else f"{tag}#{call}"


NEVER_RAN = "its forward never ran: a container a caller reached past"


def key_tag(table, key):
    """The tag of a boundary key."""
    return key if key in table else key.rsplit("#", 1)[0]


def module_boundary_results(model, torch_model, args, feeds, tolerance=FLOAT32_TOLERANCE, assignments=None,
                            recorded=None):
    """For every call of every module in the table: each value its nodes
    consume from outside is a specific tensor that call received in eager
    PyTorch, and each value they produce for outside a specific tensor it
    returned, one to one (assign_tensors), each within `tolerance` of it
    (disagreement). The only modules not checked are those whose boundary
    the file itself records as removed by an export pass (rewritten_boundaries)
    and containers whose forward never ran ("ran": false in the table).
    Returns ({key: failures of that call, empty when it passes}, {key: why it
    was not checked}); keys as boundary_key gives them. `assignments`, a dict,
    receives {key: ({input: tensor it received}, {output: tensor it
    returned})} for the calls that pass. `recorded`: record_module_io's
    result for the model, when already recorded. A file of the dynamo exporter
    is checked against the model run as torch.export ran it (record_module_io)."""
    table = module_table(model)
    calls = recorded if recorded is not None else record_module_io(torch_model, args, is_dynamo_export(model))
    boundaries = module_boundaries(model)
    rewritten = rewritten_boundaries(model)
    names = sorted({n for ins, outs in boundaries.values() for n in ins + outs})
    values = intermediate_values(model, feeds, names)
    results, skipped = {}, {}
    # Not checked: modules whose boundary an export pass removed, and
    # containers that never ran (file's "ran": false); both are in the file.
    for (tag, call), (inputs, outputs) in sorted(boundaries.items()):
        key = boundary_key(table, tag, call)
        entry = table[tag]
        if key in rewritten:
            skipped[key] = rewritten[key]
            continue
        if entry.get("ran", True) is False:
            skipped[key] = NEVER_RAN
            continue
        instance_call = entry.get("calls", [0])[call]
        recorded = calls.get(entry["path"], [])
        failures = results.setdefault(key, [])
        if instance_call >= len(recorded):
            failures.append(f"{key}: the module ran {len(recorded)} times, the file records call {instance_call}")
            continue
        received, returned = recorded[instance_call]
        found = []
        for side, tensors, verb, what in ((inputs, received, "consumes", "received"),
                                          (outputs, returned, "produces", "returned")):
            assigned = assign_tensors({name: values[name] for name in side}, tensors, tolerance)
            for name in side:
                if name not in assigned:
                    failures.append(f"{key}: {verb} '{name}' {values[name].shape}, "
                                    f"{_nearest(values[name], tensors, assigned, what, tolerance)}")
            found.append({name: tensors[index] for name, index in assigned.items()})
        if assignments is not None and not failures:
            assignments[key] = tuple(found)
    return results, skipped


def _nearest(value, tensors, assigned, what, tolerance):
    """Why a value is none of the call's tensors, for a failure line."""
    same = [(disagreement(value, t.numpy()), index) for index, t in enumerate(tensors)
            if tuple(t.shape) == np.shape(value)]
    if not same:
        return f"no tensor it {what} has that shape"
    distance, index = min(same)
    if distance <= tolerance or index in assigned.values():
        return f"the tensor it equals ({what} #{index}) is another boundary value's"
    return f"not a tensor it {what} (nearest: #{index}, off by {distance:.1e} of its magnitude)"
