"""carry's correspondence: which nodes and values of the transformed model
stand for which of the tagged original's (the rules of the verb's docstring,
hiertag.verbs.carry), over each model's main graph (Graph), the original's
reachability (Reachability) and the value shapes shape inference finds."""

import tempfile
from collections import defaultdict
from pathlib import Path

import onnx
from onnx import external_data_helper

from hiertag import core


class Graph:
    """One model's main graph: its nodes as protobuf, and the core's tables of
    its values (core.ValueGraph, core/carry/value_graph.h): who makes and who
    reads each, what each node reads with weights left out, and which values
    each node descends from. Nodes are indices into `nodes`; a name the graph
    never mentions has no maker and no readers."""

    def __init__(self, model):
        # The model's own node list, not a list of its nodes: protobuf makes a
        # node's Python object when it is read, and a list would hold one per
        # node of both models for as long as carry runs.
        self.nodes = model.graph.node
        native = core.value_graph(model)
        self.inputs, self.outputs = native.inputs, native.outputs
        self.initializers, self.weights = native.initializers, native.weights
        self.producer = native.producer  # (name) -> node or None
        self.consumers = native.consumers  # (name) -> [(node, input position or None)]
        self.reads = native.reads  # (node) -> [name]
        self.used_outputs = native.used_outputs  # (node) -> [name]
        self.has_value = native.has_value  # an input, initializer or node output
        self.made = native.made  # () -> every node output, in node order
        # Descent, weights aside: whether a node makes or reads a value, or
        # reads what a node descending from it makes (known: a graph input or a
        # made value, which a node can descend from).
        self.known = native.known
        self.descends = native.descends  # (node, value)
        self.descending = native.descending  # (nodes, values) -> those descending from any
        self.between = native.between  # (earliest value, end node) -> end's ancestors descending from it


class Correspondence:
    """The transformed model's nodes against the original's (the verb's docstring, hiertag.verbs.carry)."""

    def __init__(self, original, transformed, tagged, data_folders=(None, None)):
        """`tagged`: the original's entries (tagged.Tagged), whose node entries
        it takes over (release_matching lets go of them)."""
        self.table, self.calls = tagged.table, tagged.calls
        self.o_props, tagged.node_props = tagged.node_props, None
        # One string per name, one tuple per shape, for the tables and the node entries.
        names, shapes = tagged.names, {}
        self.o = Graph(original)
        self.t = Graph(transformed)
        # Inference's results (a ValueInfoProto for every value of a model) are
        # each let go of once read, the original's before the transformed
        # model's inference: what carry may record of them is kept serialized,
        # until the check is done.
        o_inferred = _inferred_values(original, names, data_folders[0])
        self.o_shapes, self.o_types = _value_shapes(o_inferred, shapes)
        untyped = _untyped(transformed, self.t)
        o_infos = {name: info.SerializeToString() for name, info in o_inferred.items() if name in untyped}
        del o_inferred
        t_inferred = _inferred_values(transformed, names, data_folders[1])
        self.t_shapes, _ = _value_shapes(t_inferred, shapes)
        self.reshaped = {name for name, shape in self.t_shapes.items()
                         if name in self.o_shapes and not _same_shape(self.o_shapes[name], shape)}
        self.types = _types_to_record(self, untyped, o_infos, t_inferred)
        del o_infos, t_inferred
        self.matched = {}
        self._corr = {}
        self._walks = {}
        self._match()

    def release_matching(self):
        """Lets go of what only matching and placing read (Carrier.release_placing)."""
        self.o_props = self._walks = self.o_types = self.readers = self.present_in_t = None
        self.o.initializers = self.t.initializers = None

    def known(self, name):
        return self.o.has_value(name) and name not in self.reshaped

    def _weight_readers(self):
        """{original initializer: the one node reading it}, for initializers
        exactly one node reads (a deduplicated weight several nodes read says
        nothing about which one a node stands for; Constant outputs, which
        tools merge freely, say nothing either)."""
        readers = {}
        for weight in self.o.initializers:
            found = {index for index, _ in self.o.consumers(weight)}
            if len(found) == 1:
                readers[weight] = found.pop()
        return readers

    # Matching transformed nodes to original ones, which places renamed values.
    def _match(self):
        taken = set()
        by_name = defaultdict(list)
        for index, node in enumerate(self.o.nodes):
            by_name[node.name].append(index)
        for t_index, node in enumerate(self.t.nodes):
            made = {self.o.producer(name) for name in node.output if self.known(name)} - {None}
            if len(made) == 1:
                o_index = made.pop()
                if self.o.nodes[o_index].op_type == node.op_type and o_index not in taken:
                    self.matched[t_index] = o_index
                    taken.add(o_index)
        for t_index, node in enumerate(self.t.nodes):
            named = by_name.get(node.name, []) if node.name else []
            if t_index not in self.matched and len(named) == 1 and named[0] not in taken \
                    and self.o.nodes[named[0]].op_type == node.op_type:
                self.matched[t_index] = named[0]
                taken.add(named[0])
        # A weight only one original node computes with names that node, whatever
        # the op the tool turned it into (a Gemm into MatMul and Add).
        self.readers = self._weight_readers()
        for t_index, _node in enumerate(self.t.nodes):
            if t_index in self.matched:
                continue
            found = self.weight_anchors(t_index) - taken
            if len(found) == 1:
                self.matched[t_index] = found.pop()
                taken.add(self.matched[t_index])
        self.present_in_t = {index for index, node in enumerate(self.o.nodes)
                             if any(self.t.has_value(name) for name in node.output if name)}
        changed = True
        while changed:
            changed = False
            for t_index, _node in enumerate(self.t.nodes):
                if t_index in self.matched or all(self.known(name) for name in self.t.used_outputs(t_index)):
                    continue
                o_index = self._structural_match(t_index, taken)
                if o_index is not None:
                    self.matched[t_index] = o_index
                    taken.add(o_index)
                    changed = True

    def weight_anchors(self, t_index):
        """The original nodes computing with the initializers this node reads,
        where that says which node (one reader), and the reader lies where the
        node's placed inputs allow: after them, or making one of them (a bias
        the tool split off the node that added it). A tool that merged equal
        initializers (zero biases) makes the name point elsewhere: refused."""
        node = self.t.nodes[t_index]
        found = {self.readers[name] for name in node.input if name in self.readers and name in self.t.weights}
        placed = [self.corr(name) for name in self.t.reads(t_index)]
        placed = [value for value in placed if value is not None]
        return {index for index in found
                if all(self.o.descends(index, value) or self.o.producer(value) == index for value in placed)}

    def _structural_match(self, t_index, taken):
        """The original node of the same op type that reads, at the same
        position, the value this node's first placed input stands for, or a
        value the tool computed from it inside this node (through original
        nodes no transformed node makes or matches). Ties go to the candidate
        consistent with the node's other inputs and with the known values
        downstream of it, then to the closest name."""
        node = self.t.nodes[t_index]
        placed = [(position, self.corr(name)) for position, name in enumerate(node.input)
                  if name and name not in self.t.weights]
        placed = [(position, value) for position, value in placed if value is not None]
        if not placed:
            return None
        first_position, first_value = placed[0]
        candidates, seen, frontier = [], set(), [first_value]
        while frontier:
            value = frontier.pop()
            for o_index, position in self.o.consumers(value):
                if o_index in seen:
                    continue
                seen.add(o_index)
                if self.o.nodes[o_index].op_type == node.op_type and o_index not in taken:
                    candidates.append((o_index, position == first_position))
                if o_index not in taken and o_index not in self.present_in_t and \
                        not all(name in self.o.weights for name in self.o.nodes[o_index].output):
                    frontier.extend(name for name in self.o.nodes[o_index].output if name)
        if not candidates:
            return None
        downstream = self._known_downstream(t_index)

        def consistent(o_index):
            reads_all = all(self.o.descends(o_index, value) for _, value in placed[1:])
            feeds_known = all(self.o.descends(self.o.producer(name), self.o.nodes[o_index].output[0])
                              for name in downstream
                              if self.o.producer(name) is not None and self.o.nodes[o_index].output)
            return reads_all, feeds_known

        def rank(candidate):
            o_index, same_position = candidate
            return (*consistent(o_index), same_position,
                    max(_common_prefix(node.name, text) for text in [self.o.nodes[o_index].name,
                                                                     *self.o.nodes[o_index].output]),
                    -o_index)

        return max(candidates, key=rank)[0]

    def _known_downstream(self, t_index):
        """The first values with original names on every path from the node's outputs."""
        found, stack, seen = set(), list(self.t.used_outputs(t_index)), set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if self.known(name):
                found.add(name)
                continue
            for consumer, _ in self.t.consumers(name):
                stack.extend(self.t.used_outputs(consumer))
        return found

    # Which original value a transformed value stands for.
    def corr(self, name):
        """The original value a transformed value stands for: its name's, or,
        renamed, what its matched readers read (the latest of them: the value
        after what its maker absorbed) or what its matched maker made; among
        the original values between those two, the one of its shape."""
        if self.known(name):
            return name
        if name in self._corr:
            return self._corr[name]
        read_as = [self.o.nodes[self.matched[c]].input[p] for c, p in self.t.consumers(name)
                   if c in self.matched and p is not None and p < len(self.o.nodes[self.matched[c]].input)]
        read_as = [value for value in read_as if value and value not in self.o.weights]
        latest = max(read_as, key=self._order) if read_as else None
        earliest = None
        maker = self.t.producer(name)
        if maker in self.matched:
            position = list(self.t.nodes[maker].output).index(name)
            outputs = self.o.nodes[self.matched[maker]].output
            if position < len(outputs) and outputs[position]:
                earliest = outputs[position]
        shape = self.t_shapes.get(name)
        if shape is None or (latest or earliest) is None:
            return latest or earliest
        fitting = [value for value in self._between(earliest, latest) if _same_shape(self.o_shapes.get(value), shape)]
        if not fitting:
            return latest or earliest
        # Known readers: what the maker absorbed ends where they read. Only the
        # maker known: it absorbed no more than the value's shape says.
        return max(fitting, key=self._order) if latest else min(fitting, key=self._order)

    def _order(self, value):
        maker = self.o.producer(value)
        return -1 if maker is None else maker

    def _between(self, earliest, latest):
        """Original values from `earliest` to `latest` (either may be None:
        then as far as values the transformed model no longer has reach)."""
        found = {value for value in (earliest, latest) if value}
        if earliest and latest:
            end = self.o.producer(latest)
            if end is None or not self.o.known(earliest):
                return found
            for index in self.o.between(earliest, end):
                found.update(name for name in self.o.nodes[index].output if name)
            return found
        stack = [latest or earliest]
        while stack:
            value = stack.pop()
            if latest:
                index = self.o.producer(value)
                following = self.o.reads(index) if index is not None else []
            else:
                following = [out for index, _ in self.o.consumers(value) for out in self.o.nodes[index].output]
            for name in following:
                if name and name not in found and not self.t.has_value(name) and name not in self.o.weights:
                    found.add(name)
                    stack.append(name)
        return found

    def freeze(self):
        """Matching is done: corr answers no longer change, so remember them."""
        for name in self.t.made():
            self._corr[name] = self.corr(name)

    def _walk(self, name, forward):
        """The placed values nearest to an unplaced one, upstream or downstream."""
        key = (name, forward)
        if key not in self._walks:
            self._walks[key] = set()
            found = set()
            if forward:
                for consumer, _ in self.t.consumers(name):
                    for output in self.t.used_outputs(consumer):
                        value = self.corr(output)
                        found |= {value} if value is not None else self._walk(output, True)
            elif self.t.producer(name) is not None:
                for read in self.t.reads(self.t.producer(name)):
                    value = self.corr(read)
                    found |= {value} if value is not None else self._walk(read, False)
            self._walks[key] = found
        return self._walks[key]

    def anchors(self, t_index):
        """(original values the node reads, original values it makes)."""
        ins, outs = set(), set()
        kept = self._dropped_before(t_index)
        for name in self.t.reads(t_index):
            value = kept.get(name) or self.corr(name)
            ins |= {value} if value is not None else self._walk(name, False)
        for name in self.t.used_outputs(t_index):
            value = self.corr(name)
            outs |= {value} if value is not None else self._walk(name, True)
        return ins, outs

    def _dropped_before(self, t_index):
        """{input: the original value the node's original read there}, where
        the node is its original (same op, same attributes) and reads, in
        place of that value, an earlier one of the same type and shape: the
        tool dropped value-preserving nodes in between (a no-op Cast), which
        are no computation of this node."""
        if t_index not in self.matched:
            return {}
        node, original = self.t.nodes[t_index], self.o.nodes[self.matched[t_index]]
        if node.op_type != original.op_type or list(node.attribute) != list(original.attribute):
            return {}
        kept = {}
        # Optional trailing inputs may be listed on one side only: the inputs both list.
        for name, read in zip(node.input, original.input, strict=False):
            value = self.corr(name) if name else None
            if value is None or not read or value == read or self.o.producer(read) is None or \
                    read in self.o.weights:
                continue
            if self.o.descends(self.o.producer(read), value) and \
                    self.o_types.get(value) == self.o_types.get(read) and self.o_types.get(value) is not None and \
                    self.o_shapes.get(value) == self.o_shapes.get(read) and self.o_shapes.get(value) is not None:
                kept[name] = read
        return kept

    def region(self, ins, outs):
        """The original nodes computing `outs` from `ins`: back from outs
        through values the transformed model no longer has, kept to those
        computed from ins when the node reads anything."""
        makers = {self.o.producer(u) for u in outs if u not in ins} - {None}
        found, stack = set(), list(makers)
        while stack:
            index = stack.pop()
            if index in found:
                continue
            found.add(index)
            for name in self.o.reads(index):
                maker = self.o.producer(name)
                if name in ins or maker is None or self.t.has_value(name):
                    continue
                stack.append(maker)
        if ins:
            # What the node makes it stands for; what lies before that only when
            # computed from what it reads (not a computation the tool merged
            # into another node's, which reads other values).
            found = makers | self.o.descending(found, ins)
        return found


def _untyped(model, graph):
    """The values `model`'s main graph (`graph`, its Graph) makes that it gives no type."""
    typed = {info.name for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    return {name for name in graph.made() if name not in typed}


def _types_to_record(correspondence, untyped, o_infos, t_inferred):
    """What carry records in the transformed model's value_info, as a
    serialized GraphProto holding those ValueInfoProtos alone (sorted by name),
    for `model.graph.MergeFromString` once carry's check is done (a type for
    nearly every value, held as protobuf through the check, was as large as
    the values it holds). `extract` types a module's boundary values from the
    file or ONNX's own inference, which knows no contrib op: the types
    inference found here for the values it makes and does not type
    (`untyped`), and for a value the original has, unchanged, the original's
    type (`o_infos`: {value: its ValueInfoProto serialized}), unless the tool
    changed element types (fp16) where both models say."""
    found = {name: info for name, info in t_inferred.items() if name in untyped}
    o_types = correspondence.o_types
    retyped = any(o_types[name] != info.type.tensor_type.elem_type for name, info in t_inferred.items()
                  if name in o_types)
    if not retyped:
        for name in untyped:
            if name not in found and name in o_infos and correspondence.known(name):
                found[name] = onnx.ValueInfoProto.FromString(o_infos[name])
    return onnx.GraphProto(value_info=[found[name] for name in sorted(found)]).SerializeToString()


def _onnx_inferred(model):
    """The values ONNX's shape inference types in `model`'s main graph, as a
    GraphProto holding its inputs, outputs and value_info alone
    (core.inferred_value_infos on the model written out): no parsed copy of
    the model is made in Python (a parsed copy was the largest thing carry
    held after inference)."""
    with tempfile.TemporaryDirectory(prefix="hiertag-carry-") as directory:
        path = Path(directory) / "model.onnx"
        path.write_bytes(model.SerializeToString())
        return core.inferred_value_infos(path, strict_mode=False)


def _inferred_values(model, names, data_folder=None):
    """{value: ValueInfoProto} from ONNX shape inference, then ONNX Runtime's
    symbolic one, which knows its own contrib ops (a tool's fused nodes) and
    computes with the values of any initializer an op reads (read from
    `data_folder` as it asks for them, for a model read without its weights);
    either may give up on a model, leaving what the other found."""
    sources = []
    try:
        sources.append(_onnx_inferred(model))
    except Exception:  # a model ONNX cannot infer (over 2 GB, unknown IR): no types from it
        pass
    # The second only adds values the first left untyped: when it typed every
    # value of the main graph, the second (seconds at depth) has nothing to add.
    wanted = {name for node in model.graph.node for name in node.output if name}
    wanted |= {value.name for value in [*model.graph.input, *model.graph.output]}
    if sources and wanted <= _typed_names(sources[0]):
        return _merged_values(sources, names)
    try:
        # Its infer_shapes() writes sym_shape_infer_temp.onnx into the working
        # directory when one node defeats it; its steps, run here, keep what
        # it found up to that node and write nothing.
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)
        inference._preprocess(model)
        inference.initializers_ = _ReadWhenAsked(inference.initializers_, data_folder)
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        sources.append(inference.out_mp_.graph)
    except Exception:  # ops it does not know (a layout's blocked kernels), another ONNX Runtime: ONNX's types
        pass
    return _merged_values(sources, names)


class _ReadWhenAsked(dict):
    """{name: initializer} whose external data is read from `folder` when an
    initializer is asked for (a copy holding it, kept while the mapping is):
    the initializers ONNX Runtime's symbolic inference looks up by `in` and
    `[]`, which read only the few an op computes with."""

    def __init__(self, initializers, folder):
        super().__init__(initializers)
        self.folder, self.held = folder, {}

    def __getitem__(self, name):
        tensor = super().__getitem__(name)
        if self.folder is None or not external_data_helper.uses_external_data(tensor):
            return tensor
        if name not in self.held:
            held = onnx.TensorProto()
            held.CopyFrom(tensor)
            external_data_helper.load_external_data_for_tensor(held, str(self.folder))
            self.held[name] = held
        return self.held[name]


def _typed_names(source):
    return {info.name for info in [*source.input, *source.value_info, *source.output]
            if info.type.tensor_type.elem_type}


def _merged_values(sources, names):
    """{value: ValueInfoProto}: each value as the first source (a GraphProto)
    that types it has it; each name the string `names` has for it (Graph)."""
    found = {}
    for source in sources:
        for info in [*source.input, *source.value_info, *source.output]:
            if info.type.tensor_type.elem_type and info.name not in found:
                name = info.name
                found[names.setdefault(name, name)] = info
    return found


def _value_shapes(values, seen):
    """({value: shape (None for a symbolic dim)}, {value: element type});
    each shape the tuple `seen` has for it (most values share a few shapes)."""
    shapes, types = {}, {}
    for name, info in values.items():
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
            shapes[name] = seen.setdefault(shape, shape)
        types[name] = tensor.elem_type
    return shapes, types


def _same_shape(a, b):
    """Whether two inferred shapes can be one value's (unknown dims match anything)."""
    if a is None or b is None or len(a) != len(b):
        return False
    return all(x is None or y is None or x == y for x, y in zip(a, b, strict=True))


def _common_prefix(a, b):
    length = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        length += 1
    return length
