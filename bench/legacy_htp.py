"""Legacy HTP ("hierarchical trace-and-project"): the baseline hiertag replaces.

A faithful reimplementation of the earlier Python tool's strategy (as the
documents hiertag started from describe it; the steps below are all of it),
kept in bench/ to compare against, NOT part of the product:
  1. pre/post forward hooks on every non-torch.nn module maintain a stack of
     tags (parent tag + "/" + Class[.N] when the attribute name is a list index);
  2. ~60 torch / torch.nn.functional / Tensor functions are patched; each call
     appends {op, current tag, order} to a trace;
  3. torch.onnx.export runs with the hooks active, and the patches while the
     model's forward runs (the tracing part of the export);
  4. projection: trace entries are grouped by op kind and ONNX nodes by op
     type; each op type's nodes, in graph order, take the next unused trace tag
     of a matching op;
  5. fill: constants take their consumers' tag, a node whose producers agree
     takes theirs, anything left takes the root tag (the fallback).
The result is written in hiertag's file format (node metadata_props
"hierarchy_tag", model metadata_props "hiertag.modules") so the same checks
score both. Its known defect is step 4: execution order and ONNX node order
differ, so tags cross layers.

One departure, forced: tensor indexing is recorded by a torch function mode,
not by assigning torch.Tensor.__getitem__ as the original did, which breaks
the exporter's symbolic functions for the rest of the process (_IndexingRecorder).
The benchmark still runs every export in a fresh process, for fair timing.

usage: export(model, args, path, input_names=None, opset_version=17)
         -> {"trace": [...], "root_fallback": nodes the fallback put on the root}
       python bench/legacy_htp.py zoo:NAME OUT.onnx      (a bundled model)"""

import collections
import functools
import json

import onnx
import torch
import torch.nn.functional as F

# Patched callables -> the ONNX op types their calls become (the projection key).
PATCHED_OPS = {
    "matmul": ("MatMul",), "bmm": ("MatMul",), "mm": ("MatMul", "Gemm"), "linear": ("Gemm", "MatMul"),
    "addmm": ("Gemm",), "add": ("Add",), "sub": ("Sub",), "mul": ("Mul",), "div": ("Div",),
    "pow": ("Pow",), "sqrt": ("Sqrt",), "rsqrt": ("Sqrt", "Reciprocal"), "exp": ("Exp",), "log": ("Log",),
    "tanh": ("Tanh",), "sigmoid": ("Sigmoid",), "relu": ("Relu",), "gelu": ("Gelu", "Erf"),
    "silu": ("Sigmoid",), "softmax": ("Softmax",), "log_softmax": ("LogSoftmax",),
    "layer_norm": ("LayerNormalization",), "group_norm": ("InstanceNormalization",),
    "batch_norm": ("BatchNormalization",), "embedding": ("Gather",), "dropout": ("Identity",),
    "conv1d": ("Conv",), "conv2d": ("Conv",), "max_pool2d": ("MaxPool",), "avg_pool2d": ("AveragePool",),
    "adaptive_avg_pool2d": ("GlobalAveragePool",), "scaled_dot_product_attention": ("MatMul", "Softmax"),
    "reshape": ("Reshape",), "view": ("Reshape",), "transpose": ("Transpose",), "permute": ("Transpose",),
    "flatten": ("Flatten", "Reshape"), "squeeze": ("Squeeze",), "unsqueeze": ("Unsqueeze",),
    "cat": ("Concat",), "stack": ("Concat",), "split": ("Split",), "chunk": ("Split",),
    "mean": ("ReduceMean",), "sum": ("ReduceSum",), "max": ("ReduceMax",), "min": ("ReduceMin",),
    "where": ("Where",), "masked_fill": ("Where",), "expand": ("Expand",), "contiguous": (),
    "to": ("Cast",), "float": ("Cast",), "type_as": ("Cast",), "clamp": ("Clip",), "neg": ("Neg",),
    "abs": ("Abs",), "erf": ("Erf",), "cumsum": ("CumSum",), "gather": ("GatherElements",),
    "index_select": ("Gather",), "__getitem__": ("Gather", "Slice"), "arange": ("Range",),
    "ne": ("Not", "Equal"), "eq": ("Equal",), "lt": ("Less",), "gt": ("Greater",),
}

_TARGETS = (torch, F, torch.Tensor)
_RECORDED_BY_MODE = {"__getitem__"}


def _is_torch_module(module):
    return type(module).__module__.startswith(("torch.nn", "torch.ao"))


def _segment(name, module):
    atom = name.rsplit(".", 1)[-1]
    return type(module).__name__ + (f".{atom}" if atom.isdigit() else "")


class _Tracer:
    """Hooks and patches of one export."""

    def __init__(self, model):
        self.model = model
        self.stack = ["/" + type(model).__name__]
        self.trace = []
        self.table = {self.stack[0]: {"path": "", "class": torch.typename(type(model))}}
        self.handles = []
        self.originals = []
        self.depth = 0
        self.indexing = None

    def __enter__(self):
        for name, module in self.model.named_modules():
            if not name or _is_torch_module(module):
                continue
            self.handles.append(module.register_forward_pre_hook(functools.partial(self._push, name, module)))
            self.handles.append(module.register_forward_hook(self._pop))
        # The patches are live while the model's forward runs (the tracing part
        # of the export), installed by the root's hooks.
        self.handles.append(self.model.register_forward_pre_hook(lambda *_: self._patch()))
        self.handles.append(self.model.register_forward_hook(lambda *_: self._unpatch()))
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        self._unpatch()

    def _patch(self):
        self.indexing = _IndexingRecorder(self)
        self.indexing.__enter__()
        for target in _TARGETS:
            for op in PATCHED_OPS:
                if op in _RECORDED_BY_MODE:
                    continue
                original = getattr(target, op, None)
                # Functions only: torch.float is the dtype float32, not Tensor.float.
                if not callable(original):
                    continue
                # Many Tensor methods are inherited from the C base class: put
                # back exactly what was there (an own attribute, or none).
                owned = op in vars(target)
                self.originals.append((target, op, original, owned))
                setattr(target, op, self._recording(op, original))

    def _unpatch(self):
        for target, op, original, owned in reversed(self.originals):
            if owned:
                setattr(target, op, original)
            else:
                delattr(target, op)
        self.originals = []
        if self.indexing is not None:
            self.indexing.__exit__(None, None, None)
            self.indexing = None

    def _push(self, name, module, *_):
        tag = self.stack[-1] + "/" + _segment(name, module)
        self.table.setdefault(tag, {"path": name, "class": torch.typename(type(module))})
        self.stack.append(tag)

    def _pop(self, *_):
        self.stack.pop()

    def _recording(self, op, original):
        tracer = self

        @functools.wraps(original)
        def record(*args, **kwargs):
            if tracer.depth == 0:
                tracer.trace.append({"op": op, "tag": tracer.stack[-1], "order": len(tracer.trace)})
            tracer.depth += 1
            try:
                return original(*args, **kwargs)
            finally:
                tracer.depth -= 1
        return record


class _IndexingRecorder(torch.overrides.TorchFunctionMode):
    """Records tensor indexing. The original tool assigned a wrapper to
    torch.Tensor.__getitem__; in CPython that gives the class a sequence slot
    that deleting the attribute does not take back, so every tensor becomes a
    "sequence" and the exporter's own symbolic functions fail later in the same
    export (GPT-2: "len() of a 0-d tensor" while translating aten::size). A
    torch function mode records the same calls without touching the class."""

    def __init__(self, tracer):
        super().__init__()
        self.tracer = tracer

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.Tensor.__getitem__ and self.tracer.depth == 0:
            self.tracer.trace.append({"op": "__getitem__", "tag": self.tracer.stack[-1],
                                      "order": len(self.tracer.trace)})
        return func(*args, **(kwargs or {}))


def _project(graph, trace, root):
    """Step 4: each op type's nodes, in graph order, take the next unused trace
    tag of an op that becomes that op type."""
    queues = collections.defaultdict(collections.deque)
    for entry in trace:
        for op_type in PATCHED_OPS[entry["op"]]:
            queues[op_type].append(entry)
    used = set()
    tags = {}
    for node in graph.node:
        queue = queues.get(node.op_type)
        while queue and id(queue[0]) in used:
            queue.popleft()
        if queue:
            entry = queue.popleft()
            used.add(id(entry))
            tags[node.name or id(node)] = entry["tag"]
    return tags


def _fill(graph, tags, root):
    """Step 5: constants from consumers, agreeing producers, else the root."""
    key = lambda node: node.name or id(node)  # noqa: E731
    producer = {o: n for n in graph.node for o in n.output}
    consumers = collections.defaultdict(list)
    for node in graph.node:
        for name in node.input:
            consumers[name].append(node)
    changed = True
    while changed:
        changed = False
        for node in graph.node:
            if key(node) in tags:
                continue
            if node.op_type == "Constant":
                found = [tags[key(c)] for o in node.output for c in consumers[o] if key(c) in tags]
            else:
                found = [tags[key(producer[i])] for i in node.input if i in producer and key(producer[i]) in tags]
                if len(set(found)) != 1:
                    found = []
            if found:
                tags[key(node)] = found[0]
                changed = True
    fallback = 0
    for node in graph.node:
        if key(node) not in tags:
            tags[key(node)] = root
            fallback += 1
    return tags, fallback


def export(model, args, path, input_names=None, opset_version=17):
    """Exports `model` with legacy HTP tags in hiertag's file format; returns
    the trace and how many nodes only the fallback tagged."""
    with _Tracer(model) as tracer:
        torch.onnx.export(model, args, path, input_names=input_names, opset_version=opset_version, dynamo=False)
    onnx_model = onnx.load(path)
    graph = onnx_model.graph
    root = tracer.stack[0]
    tags, fallback = _fill(graph, _project(graph, tracer.trace, root), root)
    for node in graph.node:
        node.metadata_props.add(key="hierarchy_tag", value=tags[node.name or id(node)])
    used = set(tags.values())
    table = {tag: entry for tag, entry in tracer.table.items()
             if any(u == tag or u.startswith(tag + "/") for u in used)}
    onnx_model.metadata_props.add(key="hiertag.modules", value=json.dumps(table, sort_keys=True))
    onnx.save(onnx_model, path)
    return {"trace": tracer.trace, "root_fallback": fallback}


if __name__ == "__main__":
    import sys
    import warnings

    from hiertag import zoo

    warnings.simplefilter("ignore")
    kind, _, name = sys.argv[1].partition(":")
    if len(sys.argv) != 3 or kind != "zoo" or name not in zoo.ALL:
        sys.exit(f"usage: legacy_htp.py zoo:NAME OUT.onnx  (NAME: {', '.join(zoo.ALL)})")
    model, args = zoo.ALL[name]()
    export(model, args, sys.argv[2])
