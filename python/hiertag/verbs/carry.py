"""hiertag carry: tag a transformed copy (optimized, simplified, quantized) from the tagged original.

The tools that come after the export (ONNX Runtime's optimizers, quantization,
fp16 conversion, onnxsim, onnxslim, the version converter) keep the model's
metadata but drop most node tags. carry gives every node of TRANSFORMED the
tag of the module call whose computation it is, by correspondence with
TAGGED, and writes the module table (format 3). Nothing in the
correspondence depends on which tool ran or on op types:

  values     a value whose name TAGGED has, with a shape TAGGED's does not
             contradict, is that value (a value the tool kept the name of but
             reshaped, 3-D computed as 2-D, is not);
  nodes      a node making such a value is matched to the original node making
             it; else to the original node of its name and op type; else to
             the one original node computing with an initializer it reads (a
             Gemm the tool split into MatMul and Add); else to the original
             node of its op type reading what its inputs stand for, through
             nodes the tool absorbed;
  renamed    a renamed value stands for what its matched readers read (the
             value after what its maker absorbed) or what its matched maker
             made; between the two, the original value of its shape;
  region     a node stands for the original nodes computing the values it makes
             from the values it reads, and those computing with its own
             initializers. A node that is its original (same op, same
             attributes) reading an earlier value of the same type and shape
             than its original read stands for no dropped node in between (a
             no-op Cast). All of one module call: that call's entries, "exact".
             Several calls: their common ancestor (call-aware), hiertag.spans
             listing them, hiertag.rewrite naming the transformation and a
             "fused" record in hiertag.rewrites, so `extract` refuses the calls
             the fusion crosses, "span". A node making only renamed values
             that several calls read separately (one quantization for three
             projections) is kept for each of them (hiertag.shared_with, as
             torch's CSE keeps a node), "shared"; so is a node the tool kept
             for a computation it merged away elsewhere;
  rules      a node standing for no original node: a conversion (what it reads
             and what it makes stand for the same original value) goes to the
             side whose boundary keeps the original name: the call making the
             value when it writes that name, the calls reading it when it reads
             it; a node in a nested graph to the node holding the graph;
             anything else by hiertag's own rules, the plugin's
             (core.place_by_rules, over the file's calls): a node computing
             from weights alone to its readers' common call (also where the
             tool gave a placed one readers of other calls: constants it
             merged), any other to its neighbours', once they are placed; the
             root only when nothing applies, listed as unplaced.

Placement is inference; what carry claims it checks (hiertag/carry_check.py).
Both models run once in ONNX Runtime, optimizations off, on the same
generated inputs (seeded), and every module call's boundary in OUT (README
"Module boundaries") is held against the same call's boundary in TAGGED:
verified when each value crossing it is a value that crossed the original
boundary on the same side and is that value on values: within float32
rounding when the tool kept values (the median drift of the values it kept
by name says), and when it changed precision (fp16, int8) the value carry
says it stands for and nearer to it than to any other value of TAGGED.
Every other call is declared with a "rewired" record naming its
cause, the tool's (it fused, removed or converted the boundary) or carry's
(the values exist, carry's placement misses them), which `extract` prints
when it refuses the call. TAGGED's own rewrite records are kept. A pair that
does not correspond is refused before anything is written: an input or output
of TRANSFORMED that TAGGED does not have, or outputs that on the same inputs
differ from TAGGED's by more than half their magnitude.

OUT also gets the value types shape inference finds (ONNX's and ONNX
Runtime's, which knows its fused ops), and for a module boundary value
neither types (a layout node's) the element type and rank it had when the
check ran it, so `extract` can type module boundaries between fused nodes,
and metadata_props["hiertag.carry"]: the
counts and --by. Prints the counts (nodes: exact, shared, span, rule; module
calls: verified, declared by the tool and by carry, and how they were
verified) and the spans and declarations; --json prints them as one JSON
object. OUT is written beside itself, then renamed: nothing half-written is
left. Exit status 0, or 2 with one line on
stderr."""

import functools
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx

from hiertag import carry_check, checks, core, verbs

EXACT, SHARED, SPAN, RULE = "exact", "shared", "span", "rule"
CONVERSION, WEIGHTS, ENCLOSING, NEIGHBOURS, ROOT = "conversion", "weights", "enclosing", "neighbours", "root"


class CarryError(ValueError):
    """The two models cannot be carried between (the command: one line, exit status 2)."""


class Placement:
    """Where a node of the transformed model goes: its tag and call, the calls
    it is shared with, the calls a fusion spans, and how it was decided."""

    def __init__(self, tag, call=None, shared=(), spans=(), rewrite=None, category=EXACT, rule=None):
        self.tag, self.call = tag, call
        self.shared, self.spans = tuple(shared), tuple(spans)
        self.rewrite, self.category, self.rule = rewrite, category, rule

    def key(self):
        return self.tag, self.call, self.shared, self.spans

    def own(self):
        return self.tag, self.call or 0

    def props(self, table):
        props = {core.TAG_KEY: self.tag}
        if self.call is not None and checks.call_count(table, self.tag) > 1:
            props[core.CALL_KEY] = str(self.call)
        if self.shared:
            props[core.SHARED_KEY] = core.write_tag_list(list(self.shared))
        if self.spans:
            props[core.SPANS_KEY] = core.write_tag_list(list(self.spans))
            props[core.REWRITE_KEY] = self.rewrite
        return props


def ref_text(table, ref):
    tag, call = ref
    return tag if call is None or checks.call_count(table, tag) == 1 else f"{tag}#{call}"


def common_call(calls_in_file, refs):
    """The innermost module call holding every reference: the common ancestor
    of their tags, raised while the references ran in different calls of it.
    `calls_in_file`: the tagged model's core.CallTable."""
    parts = [tag.split("/") for tag, _ in refs]
    shared = 0
    while all(len(p) > shared for p in parts) and len({p[shared] for p in parts}) == 1:
        shared += 1
    tag = "/".join(parts[0][:shared])
    while True:
        calls = set()
        for ref in refs:
            calls |= calls_in_file.calls_at(ref, tag)
        parent = checks.parent_tag(tag)
        if len(calls) <= 1 or parent == "":
            return tag, (min(calls) if calls else 0)
        tag = parent


def placement_of_original(props):
    """A placement copying an original node's entries."""
    return Placement(props[core.TAG_KEY], int(props[core.CALL_KEY]) if core.CALL_KEY in props else None,
                     json.loads(props.get(core.SHARED_KEY, "[]")), json.loads(props.get(core.SPANS_KEY, "[]")),
                     props.get(core.REWRITE_KEY))


class _Graph:
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


class _Reachability:
    """Which values of one graph (a _Graph) each node is computed from, weights
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


class _Correspondence:
    """The transformed model's nodes against the original's (module docstring)."""

    def __init__(self, original, transformed):
        self.table = checks.module_table(original)
        self.calls = core.CallTable(original)
        names = {}  # one string per name and node entry (_Graph)
        self.o = _Graph(original, names)
        self.t = _Graph(transformed, names)
        self.o_inferred = _inferred_values(original, names)
        self.o_shapes, self.o_types = _value_shapes(self.o_inferred)
        self.t_inferred = _inferred_values(transformed, names)
        self.t_shapes, _ = _value_shapes(self.t_inferred)
        self.reshaped = {name for name, shape in self.t_shapes.items()
                         if name in self.o_shapes and not _same_shape(self.o_shapes[name], shape)}
        self.o_props = [checks.node_props(node, names) for node in self.o.nodes]
        self.reach = _Reachability(self.o)
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
    that types it has it; each name the string `names` has for it (_Graph)."""
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


class Carrier:
    """Places every node of `transformed` by correspondence with `original`."""

    def __init__(self, original, transformed, by):
        self.pass_name = f"carry: {by}"
        self.c = _Correspondence(original, transformed)
        self.table = self.c.table
        self.calls = self.c.calls
        self.root = next(tag for tag in self.table if checks.parent_tag(tag) == "")
        self.placements = {}
        self.regions = {}

    def from_region(self, region, outs):
        """The placement of a node standing for the original nodes `region`,
        making the original values `outs`: one node, or nodes of one call
        alike, give their entries ("exact"); nodes of several calls, their
        common ancestor with hiertag.spans ("span"). A region node kept for a
        caller too (a tracer alias: the caller reads it as its own variable)
        stays the caller's only where the node still makes that value; inside
        the fusion it is the fused call's. Kept for another call (CSE), it
        spans that call: the fused node does work of both."""
        nodes = sorted(region)
        props = [self.c.o_props[i] for i in nodes]
        if any(core.TAG_KEY not in p for p in props):
            raise CarryError(f"node '{self.c.o.nodes[nodes[0]].name}' of the tagged model has no "
                             f"{core.TAG_KEY}: carry from a file hiertag validate accepts")
        entries = {tuple(p.get(k) for k in (core.TAG_KEY, core.CALL_KEY, core.SHARED_KEY, core.SPANS_KEY))
                   for p in props}
        if len(entries) == 1:
            placement = placement_of_original(props[0])
            placement.category = EXACT
            return placement
        spanned, callers = [], []
        for index, entries in zip(nodes, props, strict=True):
            own, *others = checks.node_refs(self.c.o.nodes[index])
            makes = any(name in outs for name in self.c.o.nodes[index].output)
            listed = [own] + [checks.parse_ref(text) for text in json.loads(entries.get(core.SPANS_KEY, "[]"))]
            for ref in others:
                if self.calls.belongs(own, ref):
                    if makes:
                        callers.append(ref)
                else:
                    listed.append(ref)
            spanned += [ref for ref in listed if ref not in spanned]
        texts = sorted({ref_text(self.table, ref) for ref in spanned})
        tag, call = common_call(self.calls, spanned)
        shared = sorted({ref_text(self.table, ref) for ref in callers} - {ref_text(self.table, (tag, call))})
        if len(texts) == 1:
            return Placement(tag, call, shared=shared, category=SHARED if shared else EXACT)
        return Placement(tag, call, shared=shared, spans=texts, rewrite=self.pass_name, category=SPAN)

    def shared_by(self, placements, category, rule=None):
        """A node that is work of each of its readers' calls, kept once: the
        first reader's call, shared with the others' (hiertag.shared_with),
        as torch's CSE keeps it; so each reader's boundary stays at the
        values the node reads."""
        first = placements[0]
        own = ref_text(self.table, first.own())
        shared = []
        for placement in placements:
            for text in [ref_text(self.table, placement.own()), *placement.shared]:
                if text != own and text not in shared:
                    shared.append(text)
        return Placement(first.tag, first.call, shared=shared, category=category, rule=rule)

    def run(self):
        c, t = self.c, self.c.t
        c.freeze()
        pending = []
        for index in range(len(t.nodes)):
            ins, outs = c.anchors(index)
            # What it computes with its own weights it also stands for, even
            # where another node was matched to that computation (a bias the
            # tool moved into a later fused node).
            region = c.region(ins, outs) | c.weight_anchors(index)
            self.regions[index] = region
            if region:
                self.placements[index] = self.from_region(region, outs)
            else:
                pending.append((index, ins, outs))
        self._share_prefixes()
        self._place_by_rules(pending)
        self._share_merged()
        self._follow_weight_readers()

    def _consumer_placements(self, index):
        t = self.c.t
        found = []
        for name in t.nodes[index].output:
            for consumer, _ in t.consumers.get(name, []):
                if consumer in self.placements and consumer != index:
                    found.append(self.placements[consumer])
        return found

    def _share_prefixes(self):
        """A node making only renamed values that several consumers read, each
        for another module call, and doing no work beyond theirs (a
        quantization of one value for three projections): work of each."""
        c, t = self.c, self.c.t
        for index in reversed(range(len(t.nodes))):
            if index not in self.placements or any(c.corr(n) is not None for n in t.used_outputs(index)):
                continue
            consumers = sorted({consumer for name in t.nodes[index].output
                                for consumer, _ in t.consumers.get(name, [])})
            placements = [self.placements[i] for i in consumers if i in self.placements]
            if len(placements) < 2 or len({p.key() for p in placements}) == 1:
                continue
            covered = set().union(*(self.regions.get(i, set()) for i in consumers))
            if self.regions[index] <= covered:
                self.placements[index] = self.shared_by(placements, SHARED)

    def _place_by_rules(self, pending):
        c, t = self.c, self.c.t
        waiting = []
        for index, ins, outs in reversed(pending):
            converted = ins & outs
            writes_original = [name for name in t.used_outputs(index) if name in converted and name in c.o.producer]
            if writes_original:
                # The value leaves its maker under its original name: the maker's boundary stays exact.
                placement = placement_of_original(c.o_props[c.o.producer[writes_original[0]]])
                placement.spans, placement.rewrite = (), None
                placement.category, placement.rule = RULE, CONVERSION
                self.placements[index] = placement
                continue
            consumers = self._consumer_placements(index)
            if converted and consumers:
                # The value enters its readers under its original name: their boundaries stay exact.
                self.placements[index] = self.shared_by(consumers, RULE, CONVERSION)
            else:
                waiting.append(index)
        self._settle_by_rules(waiting)

    def _settle_by_rules(self, waiting):
        """The nodes left waiting, by hiertag's own rules (_by_rules): their
        neighbours are the nodes reading what they make and making what they
        read. Graph inputs and outputs and weights are no neighbours: the calls
        around the node decide."""
        t = self.c.t
        left = set(waiting)
        nodes = []
        for index in waiting:
            readers = [reader for name in t.nodes[index].output for reader, _ in t.consumers.get(name, [])
                       if reader != index]
            producers = [t.producer[name] for name in t.reads[index] if name in t.producer]
            neighbours = [i if i in left else self.placements.get(i) for i in readers + producers]
            nodes.append((index, bool(t.reads[index]), [n for n in neighbours if n is not None]))
        self._by_rules(nodes)

    def _follow_weight_readers(self):
        """A node computing from weights alone is data of no call: where the
        tool gave it readers of calls that never read it in the original
        (constants it merged), it goes to its readers' common call, by
        hiertag's own rule for constants (_by_rules: consumers)."""
        c, t = self.c, self.c.t
        moved = []
        for index in reversed(range(len(t.nodes))):
            if t.reads[index]:
                continue
            placement = self.placements[index]
            before = {checks.node_refs(c.o.nodes[reader])[0] for name in t.nodes[index].output
                      for reader, _ in c.o.consumers.get(name, []) if checks.node_refs(c.o.nodes[reader])}
            readers = [self.placements[reader] for name in t.nodes[index].output
                       for reader, _ in t.consumers.get(name, []) if reader != index]
            if any(reader.own() not in before and not self.calls.belongs(reader.own(), placement.own())
                   for reader in readers):
                moved.append((index, False, readers))
        self._by_rules(moved)

    def _by_rules(self, nodes):
        """Places `nodes`, each (index, has_inputs, neighbours) in sweep order,
        by hiertag's own rules, the plugin's (core.place_by_rules), over this
        file's calls: a neighbour is a Placement, or the index of another of
        `nodes`. A node with inputs goes to its neighbours' common call
        ("neighbours"), one without to its readers' ("weights": it computes
        from weights alone, their data), once all of them are placed; where
        some never are, the first node with a placed neighbour goes first; the
        root when none of them ever is."""
        row = {index: k for k, (index, _, _) in enumerate(nodes)}
        refs, ids, met = [], {}, {}

        def intern(ref):
            if ref not in ids:
                ids[ref] = len(refs)
                refs.append(ref)
            return ids[ref]

        def common(a, b):
            # Each sweep meets the placed neighbours of every waiting node again: once per pair.
            if (a, b) not in met:
                met[a, b] = intern(common_call(self.calls, [refs[a], refs[b]]))
            return met[a, b]

        def ref_of(neighbour):
            return intern(neighbour.own()) if isinstance(neighbour, Placement) else core.unplaced(row[neighbour])

        root = intern((self.root, None))
        rows = [(None, has_inputs, [ref_of(n) for n in neighbours]) for _, has_inputs, neighbours in nodes]
        names = {"consumers": WEIGHTS, "neighbours": NEIGHBOURS, "root": ROOT}
        # Computed in full before any is set: a neighbour that is a Placement stays as it was given.
        placed = core.place_by_rules(rows, root, common)
        for (index, _, _), (ident, rule) in zip(nodes, placed, strict=True):
            tag, call = refs[ident]
            self.placements[index] = Placement(tag, call, category=RULE, rule=names[rule])

    def _share_merged(self):
        """The tool merged a computation of one module call into an identical
        one of another (common subexpression elimination): a node now reads,
        where its original read value Y, a value X the original also has. The
        nodes making X, paired op for op with those that made Y, are kept for
        Y's calls too (hiertag.shared_with), as after torch's own CSE."""
        for t_index, o_index in self.c.matched.items():
            self._pair_inputs(t_index, o_index, set())

    def _pair_inputs(self, t_index, o_index, seen):
        c, t = self.c, self.c.t
        t_node, o_node = t.nodes[t_index], c.o.nodes[o_index]
        # Optional trailing inputs may be listed on one side only: the inputs both list.
        for x, y in zip(t_node.input, o_node.input, strict=False):
            if not x or not y or x == y or y in t.values or not c.known(x) or x in t.weights:
                continue
            maker, original_maker = t.producer.get(x), c.o.producer.get(y)
            # Nodes of one input the tool dropped on the way (a no-op Cast) pair with nothing.
            while original_maker is not None and maker is not None and \
                    t.nodes[maker].op_type != c.o.nodes[original_maker].op_type and \
                    len(c.o.reads[original_maker]) == 1 and c.o.reads[original_maker][0] not in t.values:
                original_maker = c.o.producer.get(c.o.reads[original_maker][0])
            if maker is None or original_maker is None or (maker, original_maker) in seen or \
                    t.nodes[maker].op_type != c.o.nodes[original_maker].op_type:
                continue
            seen.add((maker, original_maker))
            placement = self.placements[maker]
            own = ref_text(self.table, placement.own())
            merged = [ref_text(self.table, ref) for ref in checks.node_refs(c.o.nodes[original_maker])]
            added = [text for text in merged if text != own and text not in placement.shared]
            if added:
                placement.shared = placement.shared + tuple(added)
                if placement.category == EXACT:
                    placement.category = SHARED
            self._pair_inputs(maker, original_maker, seen)


def _set_props(message, props):
    for key, value in props.items():
        entry = message.metadata_props.add()
        entry.key, entry.value = key, value


def _nested_nodes(node):
    for attribute in node.attribute:
        graphs = ([attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else []) + list(attribute.graphs)
        for graph in graphs:
            yield from checks.walk_nodes(graph)


def _shares_a_value(model, original):
    """Whether a node of `model`'s main graph makes a value some node of `original` makes."""
    made = {name for node in model.graph.node for name in node.output if name}
    return any(name in made for node in checks.walk_nodes(original.graph) for name in node.output)


def carry(original, transformed, by=None, feeds=None, data_folders=(None, None), in_place=False):
    """Returns (the transformed model tagged, a summary dict). `original` is the
    tagged model (ModelProto), `transformed` a model a tool made from it (left
    unchanged unless `in_place`); `by` names the transformation in
    hiertag.rewrite and the rewrite records (default: its producer, when it
    differs from the original's); `feeds`, arrays for the original's graph
    inputs, are what both run on to check every module call's boundary
    (hiertag.carry_check; default: generated); `data_folders`: where the
    external data of models read without it lie (the check's ONNX Runtime maps
    it from there); `in_place`: `transformed` is the caller's to give up (also
    when carry fails), and becomes the model returned (its entries stripped and
    carry's written) rather than being copied (a copy is as large as the model
    again, alive until the check is done; `original` itself given as
    `transformed` is copied all the same).
    Raises CarryError for models that do not correspond."""
    props = checks.model_props(original)
    if core.TABLE_KEY not in props:
        raise CarryError("the tagged model is not tagged by hiertag (no hiertag.modules in its metadata_props)")
    by = by or describe_producer(original, transformed) or "the transformation"
    tagged_before = sum(1 for node in checks.walk_nodes(transformed.graph)
                        if any(p.key == core.TAG_KEY for p in node.metadata_props))
    model = checks.strip_tags(transformed, in_place=in_place and transformed is not original)
    del transformed  # when stripped in place, `model` is it
    try:
        carry_check.check_io(original, model)
    except carry_check.Unrelated as error:
        raise CarryError(str(error)) from None
    if model.graph.node and not _shares_a_value(model, original):
        raise CarryError("the transformed model has no value the tagged model has: not made from it")
    carrier = Carrier(original, model, by)
    carrier.run()
    table = carrier.table
    _record_types(model, carrier.c)
    carrier.c.release_inferred()

    @functools.cache  # made when a nested node first asks
    def original_makers():
        """{value: its maker's entries in the original}."""
        makers = {}
        for node in checks.walk_nodes(original.graph):
            props = None
            for output in node.output:
                if output:
                    props = props if props is not None else checks.node_props(node)
                    makers[output] = props
        return makers
    counts = defaultdict(int)
    rules = defaultdict(int)
    unplaced = []
    spans = []
    records = []

    def count(node, placement):
        counts[placement.category] += 1
        if placement.category == RULE:
            rules[placement.rule] += 1
            if placement.rule == ROOT:
                unplaced.append(node.name)
        if placement.category == SPAN:  # an exact copy of an export pass's fusion keeps that pass's record
            spans.append((node, placement))
            records.append({"pass": placement.rewrite, "kind": "fused", "modules": list(placement.spans),
                            "node": node.name})

    for index, node in enumerate(model.graph.node):
        placement = carrier.placements[index]
        _set_props(node, placement.props(table))
        count(node, placement)
        for inner in _nested_nodes(node):
            made = [props for props in map(original_makers().get, inner.output) if props is not None]
            inner_placement = placement_of_original(made[0]) if made else \
                Placement(placement.tag, placement.call, category=RULE, rule=ENCLOSING)
            if made:
                inner_placement.category = EXACT
            _set_props(inner, inner_placement.props(table))
            count(inner, inner_placement)

    records = _kept_records(original, carrier, model) + records
    _set_props(model, {core.TABLE_KEY: _table_for(model, props[core.TABLE_KEY]),
                       core.FORMAT_VERSION_KEY: core.FORMAT_VERSION})
    # The check reads each call's boundary from the file with its fusions recorded.
    _set_props(model, {core.REWRITES_KEY: core.write_rewrites(records)} if records else {})
    if feeds is None:
        feeds, _ = carry_check.generated_inputs(original)
    try:
        proof = carry_check.Proof(original, model, carrier.c, feeds, by, carrier.regions, data_folders)
    except (carry_check.Unrelated, carry_check.CannotRun) as error:
        raise CarryError(str(error)) from None
    _record_run_types(model, proof)
    declared = proof.records(carrier.pass_name)
    if declared:
        records += declared
        kept = [p for p in model.metadata_props if p.key != core.REWRITES_KEY]
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        _set_props(model, {core.REWRITES_KEY: core.write_rewrites(records)})

    nodes = sum(counts.values())
    summary = {
        "nodes": nodes,
        "tagged_before": tagged_before,
        "exact": counts[EXACT], "shared": counts[SHARED], "span": counts[SPAN], "rule": counts[RULE],
        "rules": {rule: rules[rule] for rule in (CONVERSION, WEIGHTS, ENCLOSING, NEIGHBOURS, ROOT)},
        "unplaced": unplaced,
        "by": by,
        "spans": [{"node": node.name, "op_type": node.op_type, "tag": placement.tag, "spans": list(placement.spans)}
                  for node, placement in spans],
        "calls": proof.counts(),
        "declared": [{"call": r.key, "cause": r.cause, "reason": r.reason} for r in proof.results
                     if r.status == carry_check.DECLARED],
        "results": [{"call": r.key, "status": r.status, "cause": r.cause, "reason": r.reason} for r in proof.results],
    }
    _set_props(model, {core.CARRY_KEY: json.dumps({key: summary[key] for key in
                                              ("by", "nodes", "exact", "shared", "span", "rule", "rules", "calls")},
                                             separators=(",", ":"))})
    return model, summary


def _table_for(model, text):
    """The tagged model's module table for the transformed one. A module whose
    computation the export folded into constants ("folded_into") keeps the ones
    the transformed model still has (an initializer or a Constant of its main
    graph by that name); one the tool renamed, merged or folded further is
    dropped, and the field with the last one: the table never names a value the
    file does not hold (ONNX Runtime turns Constants into initializers, and
    merges equal ones under names of its own)."""
    table = json.loads(text)
    kept = {i.name for i in model.graph.initializer}
    kept |= {name for node in model.graph.node if node.op_type == "Constant" for name in node.output}
    changed = False
    for entry in table.values():
        folded = entry.get("folded_into")
        if folded is None:
            continue
        still = [name for name in folded if name in kept]
        if still != folded:
            changed = True
            if still:
                entry["folded_into"] = still
            else:
                del entry["folded_into"]
    return core.write_module_table(table) if changed else text


def _record_types(model, correspondence):
    """`extract` types a module's boundary values from the file or ONNX's own
    inference, which knows no contrib op: record the types inference found
    here, and for a value the original has, unchanged, the original's type,
    unless the tool changed element types (fp16) where both models say."""
    typed = {info.name for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    made = correspondence.t.producer
    found = {name: info for name, info in correspondence.t_inferred.items() if name not in typed and name in made}
    original = correspondence.o_inferred
    retyped = any(original[name].type.tensor_type.elem_type != info.type.tensor_type.elem_type
                  for name, info in correspondence.t_inferred.items() if name in original)
    if not retyped:
        found.update({name: original[name] for name in made
                      if name not in typed and name not in found and name in original and correspondence.known(name)})
    model.graph.value_info.extend(found[name] for name in sorted(found))


def _record_run_types(model, proof):
    """A module boundary value no inference typed (ONNX Runtime's layout
    nodes, NCHWc Reorder, have no shape inference) gets the element type and
    rank it had when the check ran it, its dimensions left unknown (the run
    set symbolic ones to 1), so `extract` can cut there."""
    typed = {info.name for info in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    made = {name for node in model.graph.node for name in node.output}
    boundary = {name for inputs, outputs in proof.t_bounds.values() for name in inputs + outputs}
    found = []
    for name in sorted(boundary & made - typed):
        value = proof.t_values.get(name)
        if value is None:
            continue
        value = np.asarray(value)
        info = onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(value.dtype),
                                                  [None] * value.ndim)
        found.append(info)
    model.graph.value_info.extend(found)


def describe_producer(original, transformed):
    """The transformation's name: the transformed file's producer when it
    differs from the original's (a tool that writes its own), else None."""
    mine = (transformed.producer_name, transformed.producer_version)
    if mine != (original.producer_name, original.producer_version) and transformed.producer_name:
        return " ".join(part for part in mine if part)
    return None


def _kept_records(original, carrier, model):
    """The original's rewrite records: a boundary an export pass removed stays
    removed. Each names the node now standing for the one it named, or none."""
    records = json.loads(checks.model_props(original).get(core.REWRITES_KEY, "[]"))
    names = {node.name for node in model.graph.node}
    o_index = {node.name: index for index, node in enumerate(carrier.c.o.nodes)}
    for record in records:
        name = record.get("node", "")
        if not name or name in names:
            continue
        original_node = o_index.get(name)
        holders = [model.graph.node[i].name for i, region in carrier.regions.items()
                   if original_node in region and model.graph.node[i].name]
        record["node"] = holders[0] if holders else ""
    return records


def report_lines(out, summary, tagged):
    rules = ", ".join(f"{rule} {count}" for rule, count in summary["rules"].items() if count)
    nodes = summary["nodes"]
    lines = [f"{out}: {nodes} nodes tagged from {tagged} (by {summary['by']}): "
             f"{summary['exact']} exact, {summary['shared']} shared, {summary['span']} span, "
             f"{summary['rule']} by rule{f' ({rules})' if rules else ''}",
             f"  the transformation had left a tag on {summary['tagged_before']} of them "
             f"({100 * summary['tagged_before'] / max(nodes, 1):.0f} %)"]
    for span in summary["spans"][:5]:
        lines.append(f"  span: node '{span['node']}' ({span['op_type']}) -> {span['tag']}, "
                     f"spans {', '.join(span['spans'])}")
    if len(summary["spans"]) > 5:
        lines.append(f"  ... {len(summary['spans']) - 5} more spans (--json lists them)")
    calls = summary["calls"]
    how = (f"{calls['method']}, within {calls['tolerance']:.0e} of each value's magnitude"
           if calls["method"] == carry_check.BY_VALUE else
           f"{calls['method']}: each value the one carry says it stands for and at least "
           f"{carry_check.MARGIN:g} times nearer to it than to any other of the tagged model's values on each of "
           f"{calls['input_sets']} input sets, the tool's median drift being {calls['drift']:.0e}")
    others = [f"{calls[key]} {text}" for key, text in (("declared_at_export", "declared at export"),
                                                        ("never_ran", "never ran"), ("no_nodes", "left no node"))
              if calls[key]]
    lines.append(f"  module calls: {calls['verified']} verified ({how}); declared {calls['declared_by_tool']} "
                 f"by the tool, {calls['declared_by_carry']} by carry{'; ' if others else ''}{', '.join(others)}")
    for unrun in calls["unrun_input_sets"]:
        lines.append(f"  ONNX Runtime cannot run {unrun}; the margin rests on the other input sets")
    for declared in summary["declared"][:5]:
        lines.append(f"  declared: {declared['call']}: {declared['reason']}")
    if len(summary["declared"]) > 5:
        lines.append(f"  ... {len(summary['declared']) - 5} more declared calls (--json lists them)")
    if summary["unplaced"]:
        lines.append(f"  unplaced (tagged with the root): {', '.join(summary['unplaced'])}")
    return lines


def arguments(parser):
    parser.add_argument("tagged", metavar="TAGGED.onnx", help="the model as hiertag tagged it")
    parser.add_argument("transformed", metavar="TRANSFORMED.onnx", help="a model a tool made from it")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx", help="the transformed model, tagged")
    parser.add_argument("--by", metavar="NAME",
                        help="the transformation's name for hiertag.rewrite and the rewrite records "
                             "(default: TRANSFORMED's producer when it differs from TAGGED's, else its file name)")
    parser.add_argument("--json", action="store_true", help="print the counts as one JSON object")


def run(options):
    verbs.refuse_overwriting([options.output], models=[options.tagged, options.transformed])
    # Both are read without their large external data, whose values carry never
    # reads: the check's ONNX Runtime maps it from the models' folders, and the
    # result's is written by verbs.save_model (read in when OUT holds it, else
    # copied file to file into OUT.data). Small tensors (shape inputs) are read
    # in: shape inference and ONNX Runtime read their values.
    original, _ = verbs.load_tagged(options.tagged, read_data=False)
    transformed = verbs.load_model(options.transformed, read_data=False)
    verbs.read_small_external_data(original, options.tagged)
    verbs.read_small_external_data(transformed, options.transformed)
    by = options.by or describe_producer(original, transformed) or Path(options.transformed).name
    folders = (Path(options.tagged).parent, Path(options.transformed).parent)
    try:
        model, summary = carry(original, transformed, by, data_folders=folders, in_place=True)
    except CarryError as error:
        verbs.fail(f"{options.tagged} -> {options.transformed}: {error}")
    del original, transformed
    verbs.save_model(model, options.output, sources=[options.tagged, options.transformed],
                     data_from=options.transformed)
    if options.json:
        print(json.dumps({"out": options.output, "tagged": options.tagged, "transformed": options.transformed,
                          **summary}))
    else:
        print("\n".join(report_lines(options.output, summary, options.tagged)))
    return 0


VERB = verbs.Verb(__doc__, arguments, run)
main = VERB.main


if __name__ == "__main__":
    sys.exit(main())
