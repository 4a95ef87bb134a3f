"""Reading a tagged ONNX file back, and the module-boundary check: shared by
the verifier (scripts/verify_modules.py) and the end-to-end tests."""

import json

import numpy as np
import onnx
import onnxruntime
import torch
from torch.onnx._internal.torchscript_exporter import utils as exporter_utils

TAG_KEY = "hierarchy_tag"
SHARED_KEY = "hiertag.shared_with"
TABLE_KEY = "hiertag.modules"


def node_props(node):
    return {p.key: p.value for p in node.metadata_props}


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
    return tag == ancestor or tag.startswith(ancestor + "/")


def strip_tags(model):
    """The model without hiertag's entries (a copy)."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in walk_nodes(copy.graph):
        keep = [p for p in node.metadata_props if p.key not in (TAG_KEY, SHARED_KEY)]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    keep = [p for p in copy.metadata_props if not p.key.startswith("hiertag.")]
    del copy.metadata_props[:]
    copy.metadata_props.extend(keep)
    return copy


def flatten_tensors(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value.detach().clone())
    elif isinstance(value, (bool,)):
        return
    elif isinstance(value, (int, float)):
        out.append(torch.tensor(value))
    elif isinstance(value, dict):
        for item in value.values():
            flatten_tensors(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            flatten_tensors(item, out)
    elif hasattr(value, "to_tuple"):
        flatten_tensors(value.to_tuple(), out)
    return out


# Scripted model -> the nn.Module it was scripted from (same paths, same
# weights): forward hooks cannot run on a ScriptModule, so the boundary check
# records the eager twin.
_EAGER_TWINS = {}


def register_eager_twin(scripted, eager):
    _EAGER_TWINS[id(scripted)] = eager


def eager_reference(model):
    """The module whose forward hooks stand for `model`'s calls."""
    return _EAGER_TWINS.get(id(model), model)


def record_module_io(model, args):
    """{qualified path: (received, returned)} for every module called through
    __call__, recorded with forward hooks (cloned: modules mutate in place)
    while the exporter's own tracer runs the model on the arguments as the
    exporter decides them: the values are real, and models take the code paths
    they take under export (transformers keeps an all-ones attention mask when
    tracing and drops it in plain eager mode)."""
    calls = {}
    handles = []
    for path, module in model.named_modules():
        def pre(module, hook_args, hook_kwargs, path=path):
            calls.setdefault(path, ([], []))[0].extend(flatten_tensors((hook_args, hook_kwargs), []))

        def post(module, hook_args, hook_kwargs, output, path=path):
            calls.setdefault(path, ([], []))[1].extend(flatten_tensors(output, []))

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True))
    try:
        decided = exporter_utils._decide_input_format(model, args)
        with torch.no_grad():
            torch.jit._get_trace_graph(model, tuple(decided), strict=False)
    finally:
        for handle in handles:
            handle.remove()
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


def node_tags(node):
    """The node's tag followed by its hiertag.shared_with tags."""
    props = node_props(node)
    return [props[TAG_KEY]] + json.loads(props.get(SHARED_KEY, "[]"))


def module_boundaries(model):
    """{tag: (values consumed from outside, values produced for outside, aliases)}
    over the main graph, for every tag in the table.

    A node belongs to module M when its tag or one of its hiertag.shared_with
    tags lies within M. A use of a member's output is outside M unless the user
    lies within another module the node was kept for, outside M (that module's
    own merged copy; an ancestor of M that computed the same value included).
    Initializers and Constant outputs are weights, not data a module receives.
    `aliases` maps outputs made by a value-preserving Cast/Identity of a value
    consumed from outside (the tracer maps later uses of a tensor that a no-op
    `.to()` returned to that node) to the value they alias."""
    graph = model.graph
    constants = {i.name for i in graph.initializer}
    constants.update(o for n in graph.node if n.op_type == "Constant" for o in n.output)
    graph_outputs = {o.name for o in graph.output}
    consumers = {}
    for node in graph.node:
        for name in _implicit_inputs(node):
            consumers.setdefault(name, []).append(node)
    boundaries = {}
    for tag in module_table(model):
        members = [n for n in graph.node if any(is_within(t, tag) for t in node_tags(n))]
        ids = {id(n) for n in members}
        produced = {o for n in members for o in n.output}
        inputs = {name for n in members for name in _implicit_inputs(n)
                  if name not in produced and name not in constants}
        outputs, aliases = set(), {}
        for node in members:
            # Another module the node was kept for, outside this one (an
            # ancestor that computed the same value included), reads it as its
            # own copy of the computation.
            sharers = [t for t in node_tags(node) if not is_within(t, tag)]
            for name in node.output:
                if name in constants:
                    continue
                outside = [c for c in consumers.get(name, []) if id(c) not in ids and
                           not any(is_within(t, s) for t in node_tags(c) for s in sharers)]
                if name in graph_outputs or outside:
                    outputs.add(name)
                    if node.op_type in ("Cast", "Identity") and node.input[0] in inputs:
                        aliases[name] = node.input[0]
        boundaries[tag] = (sorted(inputs), sorted(outputs), aliases)
    return boundaries


def feeds_for(model_bytes, torch_model, args):
    """ONNX Runtime feeds for an export of `torch_model` on `args`: the
    arguments as the exporter itself decided them (keywords placed by
    signature, defaults such as GPT-2's logits_to_keep kept)."""
    decided = exporter_utils._decide_input_format(torch_model, args)
    values = [v for v in decided if isinstance(v, (torch.Tensor, int, float)) and not isinstance(v, bool)]
    inputs = onnxruntime.InferenceSession(model_bytes).get_inputs()
    if len(inputs) != len(values):
        raise ValueError(f"the model has {len(inputs)} inputs, the arguments give {len(values)} values")
    return {i.name: (v.numpy() if isinstance(v, torch.Tensor) else np.array(v)) for i, v in zip(inputs, values)}


def intermediate_values(model, feeds, names):
    """ONNX Runtime values of `names` (optimizations off so every node runs)."""
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    existing = {o.name for o in probe.graph.output}
    for name in names:
        if name not in existing:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = onnxruntime.InferenceSession(probe.SerializeToString(), options)
    wanted = [o.name for o in probe.graph.output]
    return dict(zip(wanted, session.run(wanted, feeds)))


def _matches(value, candidates):
    """Whether `value` equals one of the tensors up to float32 rounding: within
    1e-4 relative, or 1e-5 of the tensor's largest magnitude (ONNX computes
    differently, e.g. Conv and BatchNorm fused, so elements that cancel to
    near zero in a deep network differ by more than a fixed absolute bound)."""
    for candidate in candidates:
        expected = candidate.numpy()
        if expected.shape != value.shape:
            continue
        if expected.size == 0:
            return True
        expected = expected.astype(np.float64)
        scale = max(1.0, float(np.max(np.abs(expected))))
        if np.allclose(value.astype(np.float64), expected, rtol=1e-4, atol=1e-5 * scale):
            return True
    return False


def module_boundary_results(model, torch_model, args, feeds):
    """For every module in the table called through __call__: each value its
    nodes consume from outside equals a tensor it received in eager PyTorch, and
    each value they produce for outside equals a tensor it returned. Returns
    ({tag: failures of that module, empty when it passes}, skipped paths)."""
    table = module_table(model)
    calls = record_module_io(torch_model, args)
    boundaries = module_boundaries(model)
    names = sorted({n for ins, outs, _ in boundaries.values() for n in ins + outs})
    values = intermediate_values(model, feeds, names)
    results, skipped = {}, []
    for tag, (inputs, outputs, aliases) in sorted(boundaries.items()):
        path = table[tag]["path"]
        if path not in calls:
            skipped.append(path)
            continue
        received, returned = calls[path]
        failures = results.setdefault(tag, [])
        for name in inputs:
            if not _matches(values[name], received):
                failures.append(f"{tag}: consumes '{name}' {values[name].shape}, not a tensor it received")
        for name in outputs:
            if name in aliases and np.array_equal(values[name], values[aliases[name]]) and \
                    _matches(values[name], received):
                continue
            if not _matches(values[name], returned):
                failures.append(f"{tag}: produces '{name}' {values[name].shape}, not a tensor it returned")
    return results, skipped


def check_module_boundaries(model, torch_model, args, feeds):
    """module_boundary_results as (checked paths, skipped paths, failures)."""
    table = module_table(model)
    results, skipped = module_boundary_results(model, torch_model, args, feeds)
    checked = [table[tag]["path"] for tag in results]
    return checked, skipped, [failure for failures in results.values() for failure in failures]
