"""hiertag carry's proof: which module calls of a carried file keep, on values,
the boundary they had in the tagged original.

carry (hiertag.verbs.carry) places every node of a transformed model by
correspondence with the tagged original; a placement is an inference, and a
wrong one would move a module call's boundary (README "Module boundaries") to
values the call never received or handed out. Here both files run once in
ONNX Runtime, optimizations off, on the same generated inputs, side by side
a segment at a time, every value the check needs exposed as an output (what
crosses a boundary held, the rest measured as it comes and let go of), and
each module call's boundary in the carried file is held against the same
call's boundary in the original:

  verified   every value crossing the carried boundary is a specific value
             crossing the original boundary on the same side (the original
             value carry says it stands for, or else the one of that side it
             equals) and is that value on values (below); a call that had
             results hands some out;
  declared   otherwise, with a cause. The tool's when a value crossing the
             original boundary has no counterpart left in the transformed
             model (the tool fused it away, removed it or converted it into
             another form), when the call reads or hands out a value no
             original value is, or when the nodes reading a value across the
             boundary stand for none that read it in the original (the tool
             rewired them: a transpose pushed across the boundary). Carry's
             otherwise: the values exist, its placement misses them.

Whether a transformed value is an original one is decided on values, and the
pair's precision is measured, not assumed per tool: the values the
transformed model still has under their original names and shapes are
compared with the original's, element by element (checks.disagreement:
each difference relative to the element's magnitude plus the typical one of
what differs). When the median is within float32 rounding
(checks.FLOAT32_TOLERANCE), the tool kept values, and a value is an original
one when it agrees with it within that bound ("by value"). The median, not a
high quantile: a few values a tool keeps under their names in another layout
(a square tensor transposed) or clamps (fp16's -inf masks) would otherwise
make a tool that keeps values pass for one that does not. Otherwise the tool
computes in another precision (fp16, int8), drift grows through the network
and no fixed bound tells neighbouring values apart (a LayerNorm's last Mul
from its result differs by the bias, less than int8 drift); a value is then
the original value carry says it stands for only when it is nearer to that
value than to any other value of the original of its shape, and within half
its magnitude, and at least MARGIN times nearer to it than to any other
value (two values closer to each other than the drift, a residual sum and
the one before it when a branch added little, cannot be told apart: which
is nearest flips with the inputs) ("by correspondence"); the fallback by
value alone is off. The margin must hold on every one of INPUT_SETS input
sets (the given or generated one and seeded draws, drawn_inputs), not on one:
on one set a value can sit 2 times nearer to its original than to its
neighbour and on the next 1.5 times (an RMS norm's result and the normalized
value before its near-one weight, in int8, on all-ones token ids and on
drawn ones), so the margin of one set establishes nothing. Nor does the
worst of a few: margins spread widely from draw to draw (T5's encoder
residual sums in int8 on an AVX2 CPU: 2.84 to 9.46 on carry's four sets, 2.4
on a ninth draw, 1.77 on the eager inputs of bench/carry_judge.py), so the
value must also keep PROMISED, the 2 a call's values are promised on any
inputs, on new inputs as the spread of its margins over the sets predicts
(predicted_margin). A call failing either is declared, the tool's cause. A
graph output is the model's output by name.

A pair whose graphs do not correspond is refused (CarryError): an input or
output of the transformed model that the original does not have, or outputs
that on the same inputs do not agree with the original's within half their
magnitude (another model)."""

from collections import Counter, defaultdict

import numpy as np
import onnx

from hiertag import checks, core

VERIFIED, DECLARED, EXPORT, NEVER_RAN, NO_NODES = "verified", "declared", "export", "never ran", "no nodes"
TOOL, CARRY = "tool", "carry"
ORIGINAL, TRANSFORMED = "original", "transformed"  # the models of the pair
BY_VALUE, BY_CORRESPONDENCE = "by value", "by correspondence"
# Outputs further apart than this share of their magnitude, for most of their
# elements (checks.median_disagreement), are another model's; also the bound,
# by correspondence, within which a value can stand for one of the original's.
UNRELATED = 0.5
# By correspondence, a value is an original one only when it is at least this
# many times nearer to it than to any other value of the original. Not 2, the
# margin an independent judge holds values to on other inputs (bench/carry_judge.py):
# a margin measured on a few draws does not carry over to new inputs unchanged
# (SigLIP's int8 text MLP: at worst 2.46 on carry's four sets, 1.91 on the eager
# inputs), so carry keeps headroom over what it promises.
MARGIN = 2.5
# By correspondence, on this many input sets: the given or generated one and
# seeded draws (drawn_inputs); the margin must hold on each.
INPUT_SETS = 4
# By correspondence, the margin a value must keep on new inputs as its margins
# over the input sets predict it (predicted_margin): what a call's values are
# promised, the judge's (bench/carry_judge.py).
PROMISED = 2.0
# Margins past this count as this in the prediction: how far past safety a set
# lies (a value equal to its original on it: infinitely far) says nothing of
# how low a new set can go, and would spread the margins as much as a low one.
MARGIN_CAP = 10 * PROMISED
# Student's t, one-sided 95 %, by degrees of freedom (the input sets less one):
# the prediction a new input set falls below one time in twenty.
_T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860, 9: 1.833, 10: 1.812}


def predicted_margin(margins):
    """The margin a value keeps on a new input set, as its margins over the
    input sets predict it: one new set in twenty falls below (their logarithms
    taken as normally spread, a one-sided 95 % prediction bound: their mean
    less Student's t times their standard deviation times √(1 + 1/n) for n
    sets). Margins past MARGIN_CAP count as MARGIN_CAP; a margin that is not a
    number (no value to measure) as none. Under two margins, the least."""
    capped = [0.0 if np.isnan(m) else min(m, MARGIN_CAP) for m in margins]
    if len(capped) < 2 or min(capped) <= 0:
        return min(capped, default=MARGIN_CAP)
    logs = np.log(capped)
    t = _T95.get(len(logs) - 1, 1.645)
    return float(np.exp(np.mean(logs) - t * np.std(logs, ddof=1) * np.sqrt(1 + 1 / len(logs))))


class Unrelated(ValueError):
    """The transformed model is not made from the tagged one (one line)."""


class CannotRun(ValueError):
    """ONNX Runtime cannot run the tagged model (one line)."""


def generated_inputs(model, given=None):
    """({graph input: array}, [symbolic dimensions set to 1]): the arrays in
    `given` as they are, the others generated, seeded: floats standard
    normal, integers ones (a valid token id and an all-ones mask), booleans
    true; a dimension the model leaves symbolic is 1."""
    given = given or {}
    initializers = {i.name for i in model.graph.initializer}
    generator = np.random.default_rng(0)
    feeds, notes = {}, []
    for graph_input in model.graph.input:
        if graph_input.name in initializers:
            continue
        tensor = graph_input.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if graph_input.name in given:
            feeds[graph_input.name] = np.asarray(given[graph_input.name]).astype(dtype)
            continue
        shape = []
        for index, dim in enumerate(tensor.shape.dim):
            if dim.HasField("dim_value"):
                shape.append(dim.dim_value)
            else:
                shape.append(1)
                notes.append(f"{graph_input.name}[{dim.dim_param or index}=1]")
        feeds[graph_input.name] = (generator.standard_normal(shape).astype(dtype) if np.issubdtype(dtype, np.floating)
                                   else np.ones(shape, dtype=dtype))
    return feeds, notes


# Ops that only move, copy or re-type an integer tensor's elements (at their
# first input): ids read through one are still the same ids.
_VIEWS = {"Reshape", "Unsqueeze", "Squeeze", "Flatten", "Identity", "Expand", "Transpose", "Cast"}


def index_ranges(model):
    """{graph input: n} for each integer input the graph reads as the indices
    of a Gather from a constant table with n rows along its axis (token ids
    into an embedding; n the smallest such table), directly or through ops
    that only move its elements (_VIEWS: a text tower's
    `input_ids.view(-1, n)` before its embedding). Any id in [0, n) is then
    one the model's tables are made for, whatever else reads the ids (as
    numbers: MPNet's position ids count the ids that are not padding, so ids
    kept all ones gave it no positions and carry four equal input sets). A
    set of ids the rest of the graph cannot run on, ONNX Runtime says so,
    and the check leaves that set out and says so (Proof.unrun_input_sets).
    An input no such Gather reads (a mask, a flag) has no range."""
    tables = {i.name: tuple(i.dims) for i in model.graph.initializer}
    tables.update({node.output[0]: tuple(attribute.t.dims) for node in model.graph.node if node.op_type == "Constant"
                   for attribute in node.attribute if attribute.name == "value"})
    readers = defaultdict(list)
    for node in model.graph.node:
        for position, name in enumerate(node.input):
            readers[name].append((node, position))
    ranges = {}
    for graph_input in model.graph.input:
        rows, work, seen = [], [graph_input.name], {graph_input.name}
        while work:
            for node, position in readers.get(work.pop(), []):
                if node.op_type in _VIEWS and position == 0 and _keeps_integers(node):
                    work.extend(o for o in node.output if o and o not in seen)
                    seen.update(node.output)
                    continue
                table = tables.get(node.input[0]) if node.op_type == "Gather" and position == 1 else None
                axis = next((attribute.i for attribute in node.attribute if attribute.name == "axis"), 0)
                if table and -len(table) <= axis < len(table):
                    rows.append(table[axis])
        if rows:
            ranges[graph_input.name] = min(rows)
    return ranges


def _keeps_integers(node):
    """A Cast only to another integer type keeps the ids; every other view does."""
    if node.op_type != "Cast":
        return True
    to = next((attribute.i for attribute in node.attribute if attribute.name == "to"), None)
    return to is not None and np.issubdtype(onnx.helper.tensor_dtype_to_np_dtype(to), np.integer)


def drawn_inputs(model, feeds, seed):
    """Another input set of the shapes and types of `feeds`, seeded: floats
    standard normal, integer inputs a constant table's Gather reads
    (index_ranges) uniform over its rows, the others (a mask, a flag: nothing
    says which values are valid) as in `feeds`."""
    generator = np.random.default_rng(seed)
    ranges = index_ranges(model)
    drawn = {}
    for name, array in feeds.items():
        array = np.asarray(array)
        if np.issubdtype(array.dtype, np.floating):
            drawn[name] = generator.standard_normal(array.shape).astype(array.dtype)
        elif np.issubdtype(array.dtype, np.integer) and ranges.get(name, 0) > 0:
            drawn[name] = generator.integers(0, ranges[name], array.shape).astype(array.dtype)
        else:
            drawn[name] = array
    return drawn


def check_io(original, transformed):
    """Refuses a transformed model with a graph input or output the original
    does not have (Unrelated)."""
    def names(graph, values):
        initializers = {i.name for i in graph.initializer}
        return [v.name for v in values if v.name not in initializers]
    o_inputs, o_outputs = set(names(original.graph, original.graph.input)), {o.name for o in original.graph.output}
    for name in names(transformed.graph, transformed.graph.input):
        if name not in o_inputs:
            raise Unrelated(f"the transformed model's input '{name}' matches no input of the tagged model "
                            f"({', '.join(sorted(o_inputs))}): not made from it")
    for output in transformed.graph.output:
        if output.name not in o_outputs:
            raise Unrelated(f"the transformed model's output '{output.name}' matches no output of the tagged model: "
                            "not made from it")


def _fed(model, feeds):
    """The feeds cast to the model's input types."""
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in model.graph.input}
    return {name: feeds[name].astype(types[name]) for name in types if name in feeds}


def _model_error(error):
    """ONNX Runtime's Fail, InvalidArgument, InvalidGraph, ...: the model's
    error, its last line as a RuntimeError."""
    lines = str(error).strip().splitlines()
    return RuntimeError(lines[-1] if lines else type(error).__name__)


def _run(model, feeds, names, data_folder=None, known=None):
    """ONNX Runtime values of `names`, the feeds cast to the model's input types
    (`known`: as for checks.intermediate_values); its error's last line as a
    RuntimeError when it cannot run the model."""
    try:
        return checks.intermediate_values(model, _fed(model, feeds), sorted(names), data_folder, known=known)
    except Exception as error:
        raise _model_error(error) from None


class _OriginalFailed(RuntimeError):
    """ONNX Runtime cannot run the tagged model (its error's last line)."""


class _AsComputed:
    """One model's values of `names` as its segments compute them
    (checks.values_as_computed), the feeds cast to its input types; its
    error's last line as a RuntimeError."""

    def __init__(self, model, feeds, names, data_folder):
        self._values = checks.values_as_computed(model, _fed(model, feeds), sorted(names), data_folder)
        self.done = False

    def take(self):
        """The next {name: value}; {} once every one came (`done`)."""
        if self.done:
            return {}
        try:
            return next(self._values)
        except StopIteration:
            self.done = True
            return {}
        except Exception as error:
            self.done = True
            raise _model_error(error) from None

    def values(self):
        while True:
            values = self.take()
            if self.done:
                return
            yield values


class _Measure:
    """The first run of both models (Proof._run_both), side by side: the
    values named in `o_held` and `t_held` are kept; each value named in
    `kept`, which both models make, is measured against its counterpart once
    both came (checks.disagreement, into `drifts`) and let go of unless held;
    `shapes`, the shape of every value that came. The model the other waits
    on runs its next segment, so few values wait. The tagged model's error
    raises _OriginalFailed; the transformed model's is `unrunnable`, the
    tagged one running on."""

    def __init__(self, o_held, t_held, kept):
        self.o_held, self.t_held, self.kept = o_held, t_held, kept
        self.o_values, self.t_values, self.drifts, self.shapes = {}, {}, [], set()
        self.unrunnable = None
        self._o_waiting, self._t_waiting = {}, {}

    def run(self, original, transformed):
        while not original.done or not (transformed.done or self.unrunnable is not None):
            t_running = not transformed.done and self.unrunnable is None
            if not original.done and (len(self._t_waiting) >= len(self._o_waiting) or not t_running):
                try:
                    values = original.take()
                except RuntimeError as error:
                    raise _OriginalFailed(str(error)) from None
                self._came(values, self.o_held, self.o_values, self._o_waiting, self._t_waiting, True)
            if t_running and (len(self._o_waiting) >= len(self._t_waiting) or original.done):
                try:
                    values = transformed.take()
                except RuntimeError as error:
                    self.unrunnable, self._o_waiting, self.kept = str(error), {}, set()
                    continue
                self._came(values, self.t_held, self.t_values, self._t_waiting, self._o_waiting, False)
        # A value the tool left as it was is held once for both models.
        checks.held_once(self.t_values, self.o_values)

    def _came(self, values, held, into, waiting, other, original):
        for name, value in values.items():
            self.shapes.add(np.shape(value))
            if name in held:
                into[name] = value
            if name not in self.kept:
                continue
            if name not in other:
                waiting[name] = value
                continue
            o_value, t_value = (value, other.pop(name)) if original else (other.pop(name), value)
            if _is_float(o_value):
                self.drifts.append(checks.disagreement(t_value, o_value))


class _Unanswered(Exception):
    """A call's cause asks of values not held (Proof._ask)."""


class _Answers:
    """Answers to questions of one model's values (Proof._ask), found as its
    values come (`compare`), by value: for TRANSFORMED, whether any of them
    agrees with the held original value asked of (of its shape, within the
    tolerance); for ORIGINAL, the first by name of those agreeing with the
    held transformed value asked of. `found`: {question: answer}."""

    def __init__(self, proof, side, asked):
        self.proof, self.side = proof, side
        self.found = {question: False if side == TRANSFORMED else None for question in asked}
        # The held value each question is about, by shape.
        about = proof.o_values if side == TRANSFORMED else proof.t_values
        self._by_shape = defaultdict(list)
        for question in asked:
            if question in about:
                self._by_shape[np.shape(about[question])].append((question, about[question]))

    def copy(self):
        other = _Answers.__new__(_Answers)
        other.proof, other.side, other.found, other._by_shape = self.proof, self.side, dict(self.found), self._by_shape
        return other

    def compare(self, values):
        tolerance = self.proof.tolerance
        for name, value in values.items():
            for question, asked in self._by_shape.get(np.shape(value), ()):
                if self.side == TRANSFORMED:
                    if not self.found[question] and checks.disagreement(value, asked) <= tolerance:
                        self.found[question] = True
                elif (self.found[question] is None or name < self.found[question]) and \
                        checks.disagreement(asked, value) <= tolerance:
                    self.found[question] = name


class CallResult:
    """One module call of the carried file: its status, and for a declared
    call the cause (TOOL or CARRY), the reason and a node it concerns."""

    def __init__(self, key, status, cause=None, reason="", node="", recorded=False):
        self.key, self.status, self.cause, self.reason, self.node = key, status, cause, reason, node
        self.recorded = recorded  # declared by a record carry already wrote (a fused node's span)


class Boundaries:
    """A tagged model's module calls as the check reads them, from one
    serialization of it: `table`, its module table (checks.module_table);
    `bounds`, {(tag, call): (inputs, outputs)}
    (checks.module_boundaries); `members`, the main-graph nodes the file gives
    each call; `rewritten`, {(tag, call): why} for the calls whose boundary a
    recorded rewrite removed (checks.rewritten_boundaries). `table`: the
    model's module table, when already read."""

    def __init__(self, model, table=None):
        data = core.serialized(model)
        self.table = checks.module_table(model) if table is None else table
        self.members = {}
        self.bounds = checks.module_boundaries(data, self.members)
        self.rewritten = checks.rewritten_boundaries(data, self.table)


class Proof:
    """The check of every module call of a carried file (module docstring)."""

    def __init__(self, original, carried, correspondence, feeds, by, regions=None, data_folders=(None, None),
                 original_boundaries=None):
        """`carried`: the transformed model with carry's tags and its fused
        records; `correspondence`: carry's (correspondence.Correspondence);
        `original_boundaries`: Boundaries(original), when read before (the
        core's parse of a model is a moment as large as the values the check
        holds); `feeds`:
        arrays for the original's graph inputs (generated_inputs); `regions`:
        {transformed node index: the original nodes it stands for}, carry's;
        `data_folders`: where the external data of the original and of the
        transformed model lie when they were read without it."""
        self.original, self.carried, self.c, self.by, self.feeds = original, carried, correspondence, by, feeds
        self.regions = regions or {}
        self.o_data, self.t_data = data_folders
        o, t = original_boundaries or Boundaries(original), Boundaries(carried)
        self.table = t.table
        self.at_export = o.rewritten
        self.fused = {key: reason for key, reason in t.rewritten.items() if key not in self.at_export}
        self.o_members, self.o_bounds = o.members, o.bounds
        self.t_members, self.t_bounds = t.members, t.bounds
        self.outputs = {o.name for o in carried.graph.output}
        self.unrunnable = None
        # Questions about values not held (a check by value), by the model
        # whose values answer them (_ask).
        self._answers = {ORIGINAL: {}, TRANSFORMED: {}}  # {question: answer}
        self._asked = {ORIGINAL: set(), TRANSFORMED: set()}  # questions no run answered yet
        self._nearest = {}
        self.unrun_input_sets = []
        self._run_both()
        # (original values, transformed values) on each input set, the first the given one.
        self._input_sets = [(self.o_values, self.t_values)]
        if self.method == BY_CORRESPONDENCE:
            self._search_all_values()
            self._run_drawn_input_sets()
        self.results = self._check_all()

    def _check_all(self):
        """Every call's result (_check). A check by value holds only what
        crosses a boundary: a declared call's cause that asks of other values
        (_ask) is answered by one run of the model asked of, for every call
        asking, and those calls are checked again."""
        keys = [(tag, call) for tag in self.table for call in range(checks.call_count(self.table, tag))]
        results, pending = {}, keys
        while pending:
            asked = []
            for key in pending:
                try:
                    results[key] = self._check(*key)
                except _Unanswered:
                    asked.append(key)
            if asked and not self._answer():  # _Unanswered always asks: a run answers it
                raise AssertionError("a call waits on no question")
            pending = asked
        return [results[key] for key in keys]

    def _ask(self, side, question):
        """By value: whether a value of the transformed model is the original
        value `question` (TRANSFORMED), or which value of the original the
        transformed value `question` is (ORIGINAL: the first by name, or
        None), over every value of that model a search runs (_search_names)
        and those held; _Unanswered until a run answered it."""
        self._ask_all(side, [question])
        return self._answers[side][question]

    def _ask_all(self, side, questions):
        """Asks every one of `questions` at once (_ask); _Unanswered unless all are answered."""
        unanswered = [question for question in questions if question not in self._answers[side]]
        if unanswered:
            self._asked[side].update(unanswered)
            raise _Unanswered

    def _answer(self):
        """Runs each model asked of (its values of _search_names as they come,
        let go of once compared: _Answers) and answers what was asked of it;
        over the values held alone when ONNX Runtime cannot run it so. Whether
        anything was asked."""
        asked_any = False
        for side in (TRANSFORMED, ORIGINAL):
            asked, self._asked[side] = self._asked[side], set()
            if not asked:
                continue
            asked_any = True
            model, held, data = ((self.carried, self.t_values, self.t_data) if side == TRANSFORMED else
                                 (self.original, self.o_values, self.o_data))
            answers = _Answers(self, side, asked)
            answers.compare(held)
            # A value ONNX Runtime cannot expose: the first run's values, then the
            # causes rest on the values at hand.
            for names in (self._search_names(side), self._dropped[side] - held.keys()):
                try:
                    run = answers.copy()
                    for values in _AsComputed(model, self.feeds, names, data).values():
                        run.compare(values)
                    answers = run
                    break
                except RuntimeError:
                    pass
            self._answers[side].update(answers.found)
        return asked_any

    def _run_both(self):
        """Both files on the same inputs, side by side as their segments
        compute (_Measure): the values crossing every boundary, what carry
        says they stand for, and the graph's inputs, held; the values kept
        under their original names, which measure the pair's precision, let
        go of once measured (every value of both models, nearly: holding them
        all was the largest thing carry held). A check by correspondence,
        which compares with every value, has them run again with the others
        (_search_all_values); a check by value asks of them as they run again
        (_check_all)."""
        c = self.c
        kept = {n for n in [*c.t.made(), *c.t.inputs] if c.known(n)}
        t_held = {n for ins, outs in self.t_bounds.values() for n in ins + outs}
        t_held |= {o.name for o in self.carried.graph.output}
        t_wanted = t_held | kept
        t_held |= {n for n in kept if c.t.producer(n) is None}
        o_held = {n for ins, outs in self.o_bounds.values() for n in ins + outs}
        o_held |= {o.name for o in self.original.graph.output} | {c.corr(n) for n in t_held} - {None}
        o_wanted = set(filter(c.o.has_value, o_held | kept | {c.corr(n) for n in kept} - {None}))
        o_held = {n for n in o_wanted if n in o_held or c.o.producer(n) is None}
        measure = _Measure(o_held, t_held, kept)
        try:
            measure.run(_AsComputed(self.original, self.feeds, o_wanted, self.o_data),
                        _AsComputed(self.carried, self.feeds, t_wanted, self.t_data))
        except _OriginalFailed as error:
            raise CannotRun(f"ONNX Runtime cannot run the tagged model: {error}") from None
        self.o_values, self.t_values = measure.o_values, measure.t_values
        # What a search for a declared call's cause runs again: every value
        # the first run let go of, and the shapes of every value it made.
        self._dropped = {ORIGINAL: o_wanted - o_held, TRANSFORMED: t_wanted - t_held}
        self._search_shapes = measure.shapes
        if measure.unrunnable is not None:  # no value of it to establish anything with
            self.unrunnable, self.t_values = measure.unrunnable, {}
            self.method, self.tolerance, self.drift = BY_VALUE, checks.FLOAT32_TOLERANCE, 0.0
            return
        # Most of an output's elements, not its worst: a lower-precision copy of
        # the tagged model rounds a few far off (int8), another model is off everywhere.
        for output in self.carried.graph.output:
            distance = checks.median_disagreement(self.t_values[output.name], self.o_values[output.name])
            if distance > UNRELATED:
                raise Unrelated(f"on the same inputs its output '{output.name}' differs from the tagged model's by "
                                f"{distance:.2g} of its magnitude in most of its elements: not made from it")
        # The median: a few values a tool keeps under their names in another
        # layout (a square tensor transposed) or clamps (fp16's -inf masks) do
        # not make a tool that keeps values look like one that does not.
        self.drift = float(np.median([d for d in measure.drifts if np.isfinite(d)] or [0.0]))
        if self.drift <= checks.FLOAT32_TOLERANCE:
            self.method, self.tolerance = BY_VALUE, checks.FLOAT32_TOLERANCE
        else:
            self.method, self.tolerance = BY_CORRESPONDENCE, UNRELATED

    def _search_all_values(self):
        """For a check by correspondence: every value of both main graphs
        whose shape is one a value of the first run has (or unknown), and those
        the first run let go of, run once more and held."""
        for names in (self._search_names, self._dropped.get):
            try:
                self.o_values.update(_run(self.original, self.feeds, names(ORIGINAL), self.o_data))
                self.t_values.update(_run(self.carried, self.feeds, names(TRANSFORMED) - self.t_values.keys(),
                                          self.t_data, known=self.o_values))
                return
            except RuntimeError:  # a value ONNX Runtime cannot expose: the first run's values, then the causes
                pass              # rest on the values at hand

    def _search_names(self, side):
        """The values of one model a search runs: of a shape a value of the
        first run has (or unknown), or let go of by it; not those held."""
        graph, shapes, held = ((self.c.o, self.c.o_shapes, self.o_values) if side == ORIGINAL else
                               (self.c.t, self.c.t_shapes, self.t_values))
        names = {n for n in set(graph.made()) - graph.weights
                 if shapes.get(n) is None or None in shapes[n] or shapes[n] in self._search_shapes}
        return (names | self._dropped[side]) - held.keys()

    def _run_drawn_input_sets(self):
        """Both files on INPUT_SETS - 1 more input sets (drawn_inputs), every
        value held on the first one held on each. A set ONNX Runtime cannot
        run is counted (unrun_input_sets), and the margin rests on the others."""
        for seed in range(1, INPUT_SETS):
            feeds = drawn_inputs(self.original, self.feeds, seed)
            try:
                o_values = _run(self.original, feeds, set(self.o_values), self.o_data)
                t_values = _run(self.carried, feeds, set(self.t_values), self.t_data, known=o_values)
            except RuntimeError as error:
                self.unrun_input_sets.append(f"input set {seed + 1}: {error}")
                continue
            self._input_sets.append((o_values, t_values))

    def _agreement(self, name, original, input_set=0):
        o_values, t_values = self._input_sets[input_set]
        if original not in o_values or name not in t_values:
            return float("inf")
        return checks.disagreement(t_values[name], o_values[original])

    def _nearest_originals(self, name, input_set=0):
        """On input set `input_set`: (distance, the original values of its
        shape nearest to it with the ones equal to that within float32
        rounding, the distance to the nearest value of its shape that is
        another value)."""
        if (name, input_set) not in self._nearest:
            o_values, t_values = self._input_sets[input_set]
            shape = np.shape(t_values.get(name))
            found = sorted((self._agreement(name, original, input_set), original)
                           for original, value in o_values.items() if np.shape(value) == shape)
            best, nearest = found[0] if found else (float("inf"), None)
            # An equal value is at most float32 rounding further away.
            ties = {original for distance, original in found if distance <= best + 2 * checks.FLOAT32_TOLERANCE and
                    checks.disagreement(o_values[original], o_values[nearest]) <= checks.FLOAT32_TOLERANCE}
            other = next((distance for distance, original in found if original not in ties), float("inf"))
            self._nearest[(name, input_set)] = best, ties, other
        return self._nearest[(name, input_set)]

    def _separates(self, name, original, input_set):
        """By correspondence, on one input set: within UNRELATED of
        `original`, nearest to it and at least MARGIN times nearer to it than
        to any value of the original that is another value."""
        distance = self._agreement(name, original, input_set)
        _, ties, other = self._nearest_originals(name, input_set)
        return distance <= self.tolerance and original in ties and other >= MARGIN * distance

    def _margins(self, name, original):
        """How many times nearer `name` is to `original` than to any other
        value of the original, on each input set: under 1 when another value
        is nearer."""
        margins = []
        for input_set in range(len(self._input_sets)):
            distance = self._agreement(name, original, input_set)
            best, ties, other = self._nearest_originals(name, input_set)
            nearest_other = other if original in ties else best
            margins.append(nearest_other / distance if distance > 0 else float("inf"))
        return margins

    def _identifies(self, name, original):
        """Whether transformed value `name` is original value `original` on
        values: within float32 rounding for a tool that keeps values; for one
        that changes precision, within UNRELATED, nearer to it than to any
        other value of the original of its shape, and at least MARGIN times
        nearer to it than to any value of the original that is another value,
        on every input set (so drift, however large, never makes a
        neighbouring value pass for it, and two values nearer to each other
        than the drift, a residual sum and the sum before it when the branch
        added little, are told apart on no inputs: which one is nearest flips
        with the inputs, and so does the margin), and PROMISED times on new
        inputs as its margins over the sets predict. A graph output is what it
        was by name: the tool's contract keeps the model's outputs
        (check_io), whatever its precision."""
        distance = self._agreement(name, original)
        if self.method == BY_VALUE:
            return distance <= self.tolerance
        if name == original and name in self.outputs:
            return distance <= self.tolerance
        return all(self._separates(name, original, input_set) for input_set in range(len(self._input_sets))) and \
            predicted_margin(self._margins(name, original)) >= PROMISED

    def _original_of(self, name, side):
        """The value of the call's original boundary side that `name` is, or None."""
        stands_for = self.c.corr(name)
        if stands_for in side:
            return stands_for if self._identifies(name, stands_for) else None
        if self.method != BY_VALUE:
            return None
        fits = sorted((self._agreement(name, value), value) for value in side)
        fits = [(distance, value) for distance, value in fits if distance <= self.tolerance]
        # Not closer to what carry says it stands for: an earlier value the
        # tool read past a no-op, equal to the boundary value.
        if fits and fits[0][0] <= self._agreement(name, stands_for):
            return fits[0][1]
        return None

    def _check(self, tag, call):
        key = checks.boundary_key(self.table, tag, call)
        if key in self.at_export:
            return CallResult(key, EXPORT, reason=self.at_export[key])
        if key in self.fused:
            return CallResult(key, DECLARED, TOOL, self.fused[key], recorded=True)
        if self.table[tag].get("ran", True) is False:
            return CallResult(key, NEVER_RAN)
        if self.unrunnable is not None:
            return CallResult(key, DECLARED, CARRY, "carry could not establish its boundary: ONNX Runtime cannot "
                                                    f"run the transformed model ({self.unrunnable})")
        t_inputs, t_outputs = self.t_bounds[(tag, call)]
        o_inputs, o_outputs = self.o_bounds.get((tag, call), ([], []))
        if not self.t_members.get((tag, call)):
            if not self.o_members.get((tag, call)):
                return CallResult(key, NO_NODES)
            return self._declared(key, (tag, call), o_inputs, o_outputs, (None, False))
        problems, covered = [], set()
        for names, side, reads in ((t_inputs, o_inputs, True), (t_outputs, o_outputs, False)):
            for name in names:
                original = self._original_of(name, side)
                if original is None:
                    problems.append((name, reads))
                else:
                    covered |= self._equal_on_side(original, side)
        if o_outputs and not t_outputs:
            problems.append((None, False))
        if problems:
            return self._declared(key, (tag, call), o_inputs, o_outputs, problems[0])
        # Both ways: every value that crossed the tagged boundary still crosses
        # (a call keeping all but one of what it received is not the call it was).
        lost = [value for value in o_inputs + o_outputs if value not in covered]
        if lost:
            return self._lost(key, o_inputs, lost[0])
        return CallResult(key, VERIFIED)

    def _equal_on_side(self, original, side):
        """`original` and the values of `side` equal to it within float32
        rounding (one value crossing stands for the equal ones: a Reshape's
        input and output, the same tensor handed on)."""
        value = self.o_values.get(original)
        return {original} | {other for other in side if other in self.o_values and
                             np.shape(self.o_values[other]) == np.shape(value) and
                             checks.disagreement(self.o_values[other], value) <= checks.FLOAT32_TOLERANCE}

    def _lost(self, key, o_inputs, lost):
        """A call whose carried boundary keeps all but `lost`, a value that
        crossed it in the tagged model: the tool's cause when no value of the
        transformed model is it any more (folded into weights, removed);
        carry's when one is and crosses elsewhere."""
        side = "received" if lost in o_inputs else "handed out"
        if not self._has_counterpart(lost):
            return CallResult(key, DECLARED, TOOL, f"{self.by} removed or converted its boundary: '{lost}', a value "
                                                   f"it {side} in the tagged model, is no value of the transformed "
                                                   "model (folded into its weights, or gone)", self._node_of(lost))
        return CallResult(key, DECLARED, CARRY, f"carry could not establish its boundary: '{lost}', a value it "
                                                f"{side} in the tagged model, no longer crosses it",
                          self._node_of(lost))

    def _declared(self, key, ref, o_inputs, o_outputs, problem):
        """The cause: the tool's when a value of the original boundary has no
        counterpart left (no value of the transformed model agrees with it),
        when the call reads or hands out a value in a form the original does
        not have, or when the nodes reading an original value across the
        boundary stand for none that read it in the original (the tool
        rewired them: a transpose pushed across the boundary); carry's when
        they do (carry placed the call's own computation outside it, or
        another's inside)."""
        name, reads = problem
        node = self._node_of(name) if name else ""
        if self.method == BY_VALUE:  # the questions of every value at once: one run answers them
            self._ask_all(TRANSFORMED, o_inputs + o_outputs)
        gone = [value for value in o_inputs + o_outputs if not self._has_counterpart(value)]
        if gone:
            side = "received" if gone[0] in o_inputs else "handed out"
            standing = next((name for name in self.t_values if self.c.corr(name) == gone[0] and
                             self._agreement(name, gone[0]) <= self.tolerance), None)
            if self.method == BY_CORRESPONDENCE and standing is not None:
                margins = self._margins(standing, gone[0])
                margin, input_set = min((margin, input_set) for input_set, margin in enumerate(margins))
                predicted = predicted_margin(margins)
                return CallResult(key, DECLARED, TOOL, f"{self.by} changed its values past telling its boundary "
                                                       f"apart: what stands for '{gone[0]}', which it {side} in the "
                                                       "tagged model, is not at least "
                                                       f"{MARGIN:g} times nearer to it than to another value of the "
                                                       f"tagged model on each of {len(self._input_sets)} input sets "
                                                       f"and {PROMISED:g} times on new ones as their spread predicts "
                                                       f"({margin:.2f} times on set {input_set + 1}, {predicted:.2f} "
                                                       f"predicted; median drift {self.drift:.0e})", node)
            return CallResult(key, DECLARED, TOOL, f"{self.by} removed or converted its boundary: '{gone[0]}', a "
                                                   f"value it {side} in the tagged model, is no value of the "
                                                   "transformed model", node)
        verb = "reads" if reads else "hands out"
        equal = self._original_equal(name) if name is not None else None
        if name is not None and equal is None:
            return CallResult(key, DECLARED, TOOL, f"{self.by} changed its boundary: it {verb} '{name}', which "
                                                   f"equals no value of the tagged model (another form)", node)
        if name is not None and not self._read_as_before(name, equal, ref, reads):
            return CallResult(key, DECLARED, TOOL, f"{self.by} rewired its boundary: it {verb} '{name}' (the tagged "
                                                   f"model's '{equal}'), which nodes now read across it that did not "
                                                   "in the tagged model", node)
        return CallResult(key, DECLARED, CARRY, "carry could not establish its boundary: " +
                          self._describe(problem, o_inputs, o_outputs), node)

    def _read_as_before(self, name, original, ref, reads):
        """Whether a node reading `name` across the call's boundary (a member,
        for a value it reads; a node outside, for one it hands out) stands for
        an original node that read `original`."""
        members = set(self.t_members.get(ref, []))
        readers = {index for index, _ in self.c.t.consumers(name) if (index in members) == reads}
        original_readers = {index for index, _ in self.c.o.consumers(original)}
        return any(original_readers.intersection(self.regions.get(index, ())) or
                   self.c.matched.get(index) in original_readers
                   for index in readers)

    def _has_counterpart(self, original):
        """Whether a value of the transformed model is `original`."""
        if self.method == BY_VALUE:
            return self._ask(TRANSFORMED, original)
        shape = np.shape(self.o_values.get(original))
        return any(np.shape(value) == shape and self._identifies(name, original)
                   for name, value in self.t_values.items())

    def _original_equal(self, name):
        """An original value `name` is: what carry says it stands for, or any of its shape."""
        stands_for = self.c.corr(name)
        if self._identifies(name, stands_for):
            return stands_for
        if self.method == BY_VALUE:
            return self._ask(ORIGINAL, name)
        shape = np.shape(self.t_values.get(name))
        return next((original for original, value in sorted(self.o_values.items())
                     if np.shape(value) == shape and self._identifies(name, original)), None)

    def _describe(self, problem, o_inputs, o_outputs):
        name, reads = problem
        if name is None:
            if not o_outputs:
                return "it places none of the transformed model's nodes in it"
            return "it hands out nothing, but handed out " + ", ".join(f"'{n}'" for n in o_outputs[:2])
        verb, what = ("reads", "received") if reads else ("hands out", "handed out")
        equal = self._original_equal(name)
        side = o_inputs if reads else o_outputs
        if equal in side:
            return f"it {verb} '{name}', placed as another value than '{equal}', which it equals"
        return (f"it {verb} '{name}'" + (f" (the tagged model's '{equal}')" if equal and equal != name else "")
                + f", which is no value it {what} in the tagged model")

    def _node_of(self, name):
        """A node of the carried model reading or making `name`."""
        for node in self.carried.graph.node:
            if name in node.output or name in node.input:
                return node.name
        return ""

    def records(self, pass_name):
        """A "rewired" record for each call declared here, naming its cause."""
        return [{"pass": pass_name, "kind": "rewired", "modules": [r.key], "node": r.node, "cause": r.cause,
                 "reason": r.reason} for r in self.results if r.status == DECLARED and not r.recorded]

    def counts(self):
        counts = Counter(r.status for r in self.results)
        causes = Counter(r.cause for r in self.results if r.status == DECLARED)
        return {"calls": len(self.results), "verified": counts[VERIFIED], "declared_by_tool": causes[TOOL],
                "declared_by_carry": causes[CARRY], "declared_at_export": counts[EXPORT],
                "never_ran": counts[NEVER_RAN], "no_nodes": counts[NO_NODES], "method": self.method,
                "tolerance": self.tolerance, "drift": self.drift, "input_sets": len(self._input_sets),
                "unrun_input_sets": self.unrun_input_sets}


def _is_float(array):
    return np.issubdtype(np.asarray(array).dtype, np.floating)
