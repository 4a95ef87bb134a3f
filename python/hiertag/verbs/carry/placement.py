"""Where carry puts each node of the transformed model: the placement rules
of the verb's docstring (hiertag.verbs.carry) over the correspondence
(correspondence.py), and the module table's entries they give."""

import json

from hiertag import checks, core
from hiertag.verbs.carry.correspondence import Correspondence

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


class Carrier:
    """Places every node of `transformed` by correspondence with `original`
    (`tagged`: its entries, tagged.Tagged, handed over; `data_folders`: where
    the weights of models read without them lie)."""

    def __init__(self, original, transformed, by, tagged, data_folders=(None, None)):
        self.pass_name = f"carry: {by}"
        self.c = Correspondence(original, transformed, tagged, data_folders)
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
            own, *others = checks.refs(entries)
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

    def release_placing(self):
        """Lets go of what only placing needs, once the placements are
        written into the model: the placements, the original's entries per
        node and types, the walks, and the matching's tables (the check after
        it holds values of both models)."""
        self.placements = None
        self.c.release_matching()
        # Each node's region as a tuple: a set of one index is four times its size.
        self.regions = {index: tuple(region) for index, region in self.regions.items() if region}

    def _consumer_placements(self, index):
        t = self.c.t
        found = []
        for name in t.nodes[index].output:
            for consumer, _ in t.consumers(name):
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
                                for consumer, _ in t.consumers(name)})
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
            writes_original = [name for name in t.used_outputs(index)
                               if name in converted and c.o.producer(name) is not None]
            if writes_original:
                # The value leaves its maker under its original name: the maker's boundary stays exact.
                placement = placement_of_original(c.o_props[c.o.producer(writes_original[0])])
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
            readers = [reader for name in t.nodes[index].output for reader, _ in t.consumers(name)
                       if reader != index]
            producers = [maker for maker in map(t.producer, t.reads(index)) if maker is not None]
            neighbours = [i if i in left else self.placements.get(i) for i in readers + producers]
            nodes.append((index, bool(t.reads(index)), [n for n in neighbours if n is not None]))
        self._by_rules(nodes)

    def _follow_weight_readers(self):
        """A node computing from weights alone is data of no call: where the
        tool gave it readers of calls that never read it in the original
        (constants it merged), it goes to its readers' common call, by
        hiertag's own rule for constants (_by_rules: consumers)."""
        c, t = self.c, self.c.t
        moved = []
        for index in reversed(range(len(t.nodes))):
            if t.reads(index):
                continue
            placement = self.placements[index]
            before = {checks.refs(c.o_props[reader])[0] for name in t.nodes[index].output
                      for reader, _ in c.o.consumers(name) if checks.refs(c.o_props[reader])}
            readers = [self.placements[reader] for name in t.nodes[index].output
                       for reader, _ in t.consumers(name) if reader != index]
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
            if not x or not y or x == y or t.has_value(y) or not c.known(x) or x in t.weights:
                continue
            maker, original_maker = t.producer(x), c.o.producer(y)
            # Nodes of one input the tool dropped on the way (a no-op Cast) pair with nothing.
            while original_maker is not None and maker is not None and \
                    t.nodes[maker].op_type != c.o.nodes[original_maker].op_type and \
                    len(c.o.reads(original_maker)) == 1 and not t.has_value(c.o.reads(original_maker)[0]):
                original_maker = c.o.producer(c.o.reads(original_maker)[0])
            if maker is None or original_maker is None or (maker, original_maker) in seen or \
                    t.nodes[maker].op_type != c.o.nodes[original_maker].op_type:
                continue
            seen.add((maker, original_maker))
            placement = self.placements[maker]
            own = ref_text(self.table, placement.own())
            merged = [ref_text(self.table, ref) for ref in checks.refs(c.o_props[original_maker])]
            added = [text for text in merged if text != own and text not in placement.shared]
            if added:
                placement.shared = placement.shared + tuple(added)
                if placement.category == EXACT:
                    placement.category = SHARED
            self._pair_inputs(maker, original_maker, seen)
