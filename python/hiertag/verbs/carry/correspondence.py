"""carry's correspondence: which nodes and values of the transformed model
stand for which of the tagged original's (the rules of the verb's docstring,
hiertag.verbs.carry), over each model's main graph (Graph), the original's
reachability (Reachability) and the value shapes shape inference finds."""

import tempfile
from collections import defaultdict
from pathlib import Path

from hiertag import checks, core


class Graph:
    """One model's main graph: its values and nodes, who makes and who reads each value."""

    def __init__(self, model, names=None):
        names = {} if names is None else names
        graph = model.graph
        self.nodes = list(graph.node)
        self.inputs = [i.name for i in graph.input]
        self.initializers = {i.name for i in graph.initializer}
        self.outputs = [o.name for o in graph.output]
        self.weights = core.weight_values(model)
        self.producer, self.consumers, self.reads = {}, defaultdict(list), []
        # Each name the tables hold as one string, shared through `names` with
        # the other model's tables and the shape tables: protobuf makes a new
        # string at each read, and they hold each name many times over (tens
        # of MB at depth). A dict, not sys.intern: CPython 3.12.0 to 3.12.5
        # never free interned strings.
        for index, node in enumerate(self.nodes):
            for name in node.output:
                if name:
                    self.producer[names.setdefault(name, name)] = index
            reads = [names.setdefault(name, name) for name in checks._implicit_inputs(node)]
            self.reads.append([name for name in reads if name not in self.weights])
            read = 0  # reads[read] is the next non-empty input, interned
            for position, name in enumerate(node.input):
                if name:
                    self.consumers[reads[read]].append((index, position))
                    read += 1
            for name in reads[read:]:
                self.consumers[name].append((index, None))
        self.values = set(self.inputs) | self.initializers | set(self.producer)

    def used_outputs(self, index):
        graph_outputs = set(self.outputs)
        used = [name for name in self.nodes[index].output
                if name and (self.consumers.get(name) or name in graph_outputs)]
        return used or [name for name in self.nodes[index].output if name]


class Reachability:
    """Which values of one graph (a Graph) each node is computed from, weights
    aside: a node descends from the values it reads, from everything those
    descend from, and from what it makes itself. Answered by searching back
    from the node, no further than the value's maker in a topological order,
    so memory stays linear in the graph (a bitmask of ancestors per node is
    quadratic: about 1 GB at 100k nodes); the graph inputs (weights aside)
    each node descends from are kept per node as a mask, being few."""

    def __init__(self, graph):
        self.g = graph
        inputs = [name for name in graph.inputs if name not in graph.producer and name not in graph.weights]
        self.input_bit = {name: k for k, name in enumerate(inputs)}
        self.position = _topological_positions(graph)
        self.from_inputs = [0] * len(graph.nodes)
        for index in sorted(range(len(graph.nodes)), key=self.position.__getitem__):
            mask = 0
            for name in graph.reads[index]:
                source = graph.producer.get(name)
                if source is not None:
                    mask |= self.from_inputs[source]
                elif name in self.input_bit:
                    mask |= 1 << self.input_bit[name]
            self.from_inputs[index] = mask

    def known(self, value):
        """Whether `value` is a graph input or made by a node (not a weight alone)."""
        return value in self.g.producer or value in self.input_bit

    def _upstream(self, start, lowest):
        """The nodes `start` (node indices) descend from, themselves included,
        at or after topological position `lowest`."""
        producer, reads, position = self.g.producer, self.g.reads, self.position
        found, stack = set(), [i for i in start if position[i] >= lowest]
        while stack:
            index = stack.pop()
            if index in found:
                continue
            found.add(index)
            for name in reads[index]:
                source = producer.get(name)
                if source is not None and source not in found and position[source] >= lowest:
                    stack.append(source)
        return found

    def descends(self, node, value):
        if value in self.g.producer:
            maker = self.g.producer[value]
            if maker == node:
                return True
            lowest = self.position[maker]
            seen, stack = {node}, [node]
            while stack:  # back from the node, no further than the maker's position
                for name in self.g.reads[stack.pop()]:
                    source = self.g.producer.get(name)
                    if source == maker:
                        return True
                    if source is not None and source not in seen and self.position[source] > lowest:
                        seen.add(source)
                        stack.append(source)
            return False
        return value in self.input_bit and bool(self.from_inputs[node] >> self.input_bit[value] & 1)

    def descending(self, nodes, values):
        """Those of `nodes` that descend from any of `values`."""
        producer, reads, position = self.g.producer, self.g.reads, self.position
        values = set(filter(self.known, values))  # a name nothing makes is no one's ancestor
        mask = sum(1 << self.input_bit[v] for v in values if v in self.input_bit)
        makers = {producer[v] for v in values if v in producer}
        # Those that read one, make one, or descend from a graph input among them.
        found = {index for index in nodes if self.from_inputs[index] & mask or index in makers
                 or any(name in values for name in reads[index])}
        if not makers:
            return found
        lowest = min(position[m] for m in makers)
        barren = set()  # searched through: no maker upstream of them
        for start in sorted(nodes, key=position.__getitem__):  # nearest the makers first
            if start in found or start in barren:
                continue
            seen, stack, reached = {start}, [start], False
            while stack and not reached:  # back from it, no further than the earliest maker
                for name in reads[stack.pop()]:
                    source = producer.get(name)
                    if source in makers or source in found:
                        reached = True
                        break
                    if source is not None and source not in seen and source not in barren and \
                            position[source] > lowest:
                        seen.add(source)
                        stack.append(source)
            if reached:
                found.add(start)
            else:
                barren |= seen
        return found

    def between(self, earliest, end):
        """The nodes node `end` descends from (itself included) that descend
        from value `earliest`."""
        if earliest in self.g.producer:
            upstream = self._upstream([end], self.position[self.g.producer[earliest]])
        else:
            upstream = self._upstream([end], -1)
        return self.descending(upstream, [earliest])


def _topological_positions(graph):
    """{node index: its position in a topological order}: the file's order
    when it is one (ONNX asks for it), else Kahn's on the reads."""
    producer = graph.producer
    if all(producer.get(name, -1) < index for index, reads in enumerate(graph.reads) for name in reads):
        return list(range(len(graph.nodes)))
    waiting = [sum(1 for name in set(reads) if name in producer) for reads in graph.reads]
    readers = defaultdict(list)
    for index, reads in enumerate(graph.reads):
        for name in set(reads):
            if name in producer:
                readers[producer[name]].append(index)
    ready = [index for index, count in enumerate(waiting) if count == 0]
    position = [len(graph.nodes)] * len(graph.nodes)  # a cycle's nodes (no valid ONNX has one) come last
    placed = 0
    while ready:
        index = ready.pop()
        position[index] = placed
        placed += 1
        for reader in readers[index]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    return position


class Correspondence:
    """The transformed model's nodes against the original's (the verb's docstring, hiertag.verbs.carry)."""

    def __init__(self, original, transformed):
        self.table = checks.module_table(original)
        self.calls = core.CallTable(original)
        names = {}  # one string per name and node entry (Graph)
        self.o = Graph(original, names)
        self.t = Graph(transformed, names)
        self.o_inferred = _inferred_values(original, names)
        self.o_shapes, self.o_types = _value_shapes(self.o_inferred)
        self.t_inferred = _inferred_values(transformed, names)
        self.t_shapes, _ = _value_shapes(self.t_inferred)
        self.reshaped = {name for name, shape in self.t_shapes.items()
                         if name in self.o_shapes and not _same_shape(self.o_shapes[name], shape)}
        self.o_props = [checks.node_props(node, names) for node in self.o.nodes]
        self.reach = Reachability(self.o)
        self.matched = {}
        self._corr = {}
        self._walks = {}
        self._match()

    def _descends_from(self, node, value):
        return self.reach.descends(node, value)

    def release_inferred(self):
        """Lets go of shape inference's results once carry recorded its types:
        a type for every value of both models, while the value check after it
        runs ONNX Runtime sessions."""
        self.o_inferred = self.t_inferred = None

    def known(self, name):
        return name in self.o.values and name not in self.reshaped

    def _weight_readers(self):
        """{original initializer: the one node reading it}, for initializers
        exactly one node reads (a deduplicated weight several nodes read says
        nothing about which one a node stands for; Constant outputs, which
        tools merge freely, say nothing either)."""
        readers = {}
        for weight in self.o.initializers:
            found = {index for index, _ in self.o.consumers.get(weight, [])}
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
            made = {self.o.producer[name] for name in node.output if name in self.o.producer and self.known(name)}
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
                             if any(name in self.t.values for name in node.output if name)}
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
        placed = [self.corr(name) for name in self.t.reads[t_index]]
        placed = [value for value in placed if value is not None]
        return {index for index in found
                if all(self._descends_from(index, value) or self.o.producer.get(value) == index for value in placed)}

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
            for o_index, position in self.o.consumers.get(value, []):
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
            reads_all = all(self._descends_from(o_index, value) for _, value in placed[1:])
            feeds_known = all(self._descends_from(self.o.producer[name], self.o.nodes[o_index].output[0])
                              for name in downstream if name in self.o.producer and self.o.nodes[o_index].output)
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
            for consumer, _ in self.t.consumers.get(name, []):
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
        read_as = [self.o.nodes[self.matched[c]].input[p] for c, p in self.t.consumers.get(name, [])
                   if c in self.matched and p is not None and p < len(self.o.nodes[self.matched[c]].input)]
        read_as = [value for value in read_as if value and value not in self.o.weights]
        latest = max(read_as, key=self._order) if read_as else None
        earliest = None
        maker = self.t.producer.get(name)
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
        return self.o.producer.get(value, -1)

    def _between(self, earliest, latest):
        """Original values from `earliest` to `latest` (either may be None:
        then as far as values the transformed model no longer has reach)."""
        found = {value for value in (earliest, latest) if value}
        if earliest and latest:
            end = self.o.producer.get(latest)
            if end is None or not self.reach.known(earliest):
                return found
            for index in self.reach.between(earliest, end):
                found.update(name for name in self.o.nodes[index].output if name)
            return found
        stack = [latest or earliest]
        while stack:
            value = stack.pop()
            if latest:
                index = self.o.producer.get(value)
                following = self.o.reads[index] if index is not None else []
            else:
                following = [out for index, _ in self.o.consumers.get(value, []) for out in self.o.nodes[index].output]
            for name in following:
                if name and name not in found and name not in self.t.values and name not in self.o.weights:
                    found.add(name)
                    stack.append(name)
        return found

    def freeze(self):
        """Matching is done: corr answers no longer change, so remember them."""
        for name in self.t.producer:
            self._corr[name] = self.corr(name)

    def _walk(self, name, forward):
        """The placed values nearest to an unplaced one, upstream or downstream."""
        key = (name, forward)
        if key not in self._walks:
            self._walks[key] = set()
            found = set()
            if forward:
                for consumer, _ in self.t.consumers.get(name, []):
                    for output in self.t.used_outputs(consumer):
                        value = self.corr(output)
                        found |= {value} if value is not None else self._walk(output, True)
            elif name in self.t.producer:
                for read in self.t.reads[self.t.producer[name]]:
                    value = self.corr(read)
                    found |= {value} if value is not None else self._walk(read, False)
            self._walks[key] = found
        return self._walks[key]

    def anchors(self, t_index):
        """(original values the node reads, original values it makes)."""
        ins, outs = set(), set()
        kept = self._dropped_before(t_index)
        for name in self.t.reads[t_index]:
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
            if value is None or not read or value == read or read not in self.o.producer or read in self.o.weights:
                continue
            if self._descends_from(self.o.producer[read], value) and \
                    self.o_types.get(value) == self.o_types.get(read) and self.o_types.get(value) is not None and \
                    self.o_shapes.get(value) == self.o_shapes.get(read) and self.o_shapes.get(value) is not None:
                kept[name] = read
        return kept

    def region(self, ins, outs):
        """The original nodes computing `outs` from `ins`: back from outs
        through values the transformed model no longer has, kept to those
        computed from ins when the node reads anything."""
        makers = {self.o.producer[u] for u in outs if u in self.o.producer and u not in ins}
        found, stack = set(), list(makers)
        while stack:
            index = stack.pop()
            if index in found:
                continue
            found.add(index)
            for name in self.o.reads[index]:
                if name in ins or name not in self.o.producer or name in self.t.values:
                    continue
                stack.append(self.o.producer[name])
        if ins:
            # What the node makes it stands for; what lies before that only when
            # computed from what it reads (not a computation the tool merged
            # into another node's, which reads other values).
            found = makers | self.reach.descending(found, ins)
        return found


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


def _inferred_values(model, names):
    """{value: ValueInfoProto} from ONNX shape inference, then ONNX Runtime's
    symbolic one, which knows its own contrib ops (a tool's fused nodes);
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
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        sources.append(inference.out_mp_.graph)
    except Exception:  # ops it does not know (a layout's blocked kernels), another ONNX Runtime: ONNX's types
        pass
    return _merged_values(sources, names)


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


def _value_shapes(values):
    """({value: shape (None for a symbolic dim)}, {value: element type})."""
    shapes, types = {}, {}
    for name, info in values.items():
        tensor = info.type.tensor_type
        if tensor.HasField("shape"):
            shapes[name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim)
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
