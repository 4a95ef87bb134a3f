"""The carry matrix's judge: whether each module call a carried file presents
has, in eager PyTorch, the boundary the file gives it.

bench/carry_matrix.py asks it of every cell; it shares no code with what it
judges (hiertag carry and its check, the package hiertag/verbs/carry/)
beyond the file format, the module-boundary rule the
file is cut by (README "Module boundaries": what a call's boundary *is*, the
one rule `extract` cuts by, with its weights), the eager recording of every module call
(checks.record_module_io) and the one value comparison (checks.disagreement).
Its matching, its runner and its rules are its own:

  evidence   what every module call received and returned in eager PyTorch,
             for every tool alike (fp16 and int8 too), and the values of the
             tagged and the carried file run in ONNX Runtime (one session
             each, optimizations off) on the eager inputs;
  reference  a call's *boundary tensors* on a side: the eager tensors it
             received (returned) that crossed its boundary in the tagged
             file, each original boundary value matched to the tensor it
             equals within float32 rounding (the tagged file's own boundary
             check);
  identity   a value crossing the carried boundary is a boundary tensor of
             its side when it is within the tool's measured precision of it
             and at least MARGIN times nearer to it than to any other
             candidate of its shape: every tensor any call received or
             returned in eager PyTorch and every value of the tagged file on
             the eager inputs (tensors equal to it within float32 rounding
             count as it: a Reshape's input and output, the same tensor
             handed from call to call). A value at least MARGIN times nearer
             to another candidate is another value: the call is *wrong*;
             in between, values cannot tell which it is: *undecided*. A
             graph output crossing as it did in the tagged file is the
             model's output by name (the tools keep the model's interface),
             within the measured precision;
  coverage   every boundary tensor of the tagged file still crosses the
             carried boundary on its side (a value identified as it), or the
             call is wrong (lost), or undecided when only an undecided value
             could be it;
  precision  measured per cell against eager PyTorch, never assumed per
             tool: the largest disagreement among the transformed file's
             graph outputs (by name, as identity takes them) and the values
             it keeps under a name and shape of the tagged file's
             boundaries, these counted where the margin still identifies
             them as their tensors (another layout under the old name, an
             fp16 mask clamped to -inf measure no precision); at least
             float32 rounding.

A call the file declares (`hiertag.rewrites`: at export, by the tool or by
carry) is not judged; `extract` must refuse it. Every other call that ran
is judged (one nothing crosses in either file is right): right, wrong or
undecided; an undecided call fails its
cell like a wrong one (carry declares what values cannot tell). `extract` on
each right call must write a model that, run on the values the call's inputs
have in the whole carried file, returns the values its outputs have there
within float32 rounding (in a file holding fp16 values, within MARGIN times
the measured precision: _replay_bound): the identity above ties those values
to eager PyTorch, and the extracted model computes them (a bound against
eager instead would hold the tool's rounding to a guess: int8's dynamic
scales on exact inputs drift otherwise than on drifted ones)."""

import hashlib
import json
import tempfile
from pathlib import Path

import numpy as np
import onnx

from hiertag import checks, core

RIGHT, WRONG, UNDECIDED = "right", "wrong", "undecided"

# How much nearer a carried value must be to a boundary tensor than to any
# other candidate to count as it, and how much nearer to another for the call
# to be wrong. With a gap g between the boundary tensor e and its nearest
# other candidate c, and the tool's drift d on the eager inputs, a value
# counts as e only while d <= g / (MARGIN + 1), and a value that is really c
# passes for e only once d >= MARGIN * g / (MARGIN + 1): at 2, only with twice
# the drift at which a right value already stops counting (and is undecided,
# which fails the cell as well), so no drift makes a misplaced value pass
# unless it also leaves right values undecided. 2 is also the factor carry
# claims to verify with (on its own input sets: the generated one and three
# seeded draws, hiertag.verbs.carry.check.INPUT_SETS): the judge holds carry to that claim
# on independent inputs, the eager ones, no stricter than carry claims.
# Measured on the cells of bench/carry_matrix.py run with it (bert, t5,
# llama, gpt_style, poolformer, data2vec_audio, mobilenet_v3_style in int8
# and fp16): right values at 2.0 (data2vec_audio's int8 pad layer) to 90
# times nearer in int8 and fp16, 10^4 and more for the tools that keep values;
# the undecided ones, all int8 (an RMS norm's result against the normalized
# value before its weight near one in T5 and LLaMA, a GELU's input against
# that input over sqrt 2 in data2vec-audio's positional convolution), at 1.2
# to 1.95.
MARGIN = 2.0


class Verdict:
    """One module call: RIGHT, WRONG or UNDECIDED, the lines saying why, and
    the eager tensor each boundary value was identified as (name -> tensor)
    on each side."""

    def __init__(self, key):
        self.key, self.lines, self.undecided_lines = key, [], []
        self.inputs, self.outputs, self.drift = {}, {}, 0.0

    @property
    def status(self):
        return WRONG if self.lines else UNDECIDED if self.undecided_lines else RIGHT


class Judgement:
    """The judge's findings on one carried file (module docstring).

    `verdicts`: {key: Verdict} of every judged call; `declared`: {key: why}
    of the calls the file declares; `problems`: where the tagged file's own
    boundaries are not eager PyTorch's (then nothing is established);
    `precision`: the measured precision."""

    def __init__(self, original, carried, recorded, feeds):
        recorded = {path: [tuple([t.numpy() for t in side] for side in call) for call in calls]
                    for path, calls in recorded.items()}
        self.table = checks.module_table(carried)
        self.declared = checks.rewritten_boundaries(carried)
        self.at_export = checks.rewritten_boundaries(original)
        o_members, t_members = {}, {}
        o_bounds = checks.module_boundaries(original, o_members)
        t_bounds = checks.module_boundaries(carried, t_members)
        # Every value but weights, and the boundary values (the results of a
        # module computing from buffers alone are weights too).
        o_boundary = {n for ins, outs in o_bounds.values() for n in ins + outs}
        o_weights = core.weight_values(original) - o_boundary
        o_names = [i.name for i in original.graph.input if i.name not in o_weights]
        o_names += [n for node in original.graph.node for n in node.output if n and n not in o_weights]
        self.o_values = run(original, feeds, o_names)
        t_names = {n for ins, outs in t_bounds.values() for n in ins + outs}
        kept = set(_made(carried)) & o_boundary  # under the tagged file's boundary names, for the precision
        self.t_values = run(carried, feeds, sorted(t_names | kept))
        self.outputs = {o.name for o in carried.graph.output} & {o.name for o in original.graph.output}
        self.problems = []
        self.boundary_tensors = {}  # (key, side) -> {original name: eager tensor}
        self.calls = {}  # key -> (tag, call)
        for (tag, call), (inputs, outputs) in o_bounds.items():
            key = checks.boundary_key(self.table, tag, call)
            self.calls[key] = (tag, call)
            if key in self.at_export or self.table[tag].get("ran", True) is False:
                continue
            received, returned = self._recorded(recorded, tag, call)
            self.boundary_tensors[(key, 0)] = self._match_original(key, inputs, received, "received")
            self.boundary_tensors[(key, 1)] = self._match_original(key, outputs, returned, "returned")
        self.candidates = _Candidates(
            [(f"the tagged file's '{name}'", value) for name, value in self.o_values.items()] +
            [(f"{'received' if side == 0 else 'returned'} #{index} of '{path or '(root)'}' call {k}", tensor)
             for path, calls in recorded.items() for k, call in enumerate(calls) for side in (0, 1)
             for index, tensor in enumerate(call[side])])
        self.precision = self._measure_precision(kept)
        self.holds_fp16 = any(np.asarray(v).dtype == np.float16 for v in self.t_values.values())
        self.verdicts, self.extracted = {}, {}
        for (tag, call), (inputs, outputs) in t_bounds.items():
            key = checks.boundary_key(self.table, tag, call)
            if key not in self.declared and (key, 0) in self.boundary_tensors:
                self.verdicts[key] = self._judge(key, inputs, outputs)
        # Calls with nodes in either file: `extract` writes or refuses each.
        self.with_nodes = {checks.boundary_key(self.table, *ref) for ref, nodes in [*o_members.items(),
                                                                                   *t_members.items()] if nodes}

    def _recorded(self, recorded, tag, call):
        entry = self.table[tag]
        calls = recorded.get(entry["path"], [])
        instance = entry.get("calls", [0])[call]
        if instance >= len(calls):
            return [], []
        return calls[instance]

    def _match_original(self, key, names, tensors, what):
        """{original boundary value: the eager tensor it equals within float32
        rounding}, one to one, nearest first; a value equal to none is a
        problem of the tagged file (its own boundary check fails there)."""
        pairs = sorted((checks.disagreement(self.o_values[name], tensor), name, index)
                       for name in names for index, tensor in enumerate(tensors)
                       if np.shape(tensor) == np.shape(self.o_values[name]))
        found, used = {}, set()
        for distance, name, index in pairs:
            if distance <= checks.FLOAT32_TOLERANCE and name not in found and index not in used:
                found[name] = tensors[index]
                used.add(index)
        for name in names:
            if name not in found:
                self.problems.append(f"{key}: the tagged file's '{name}' is no tensor the call {what} in eager "
                                     "PyTorch")
        return found

    def _measure_precision(self, kept):
        """The largest disagreement with eager PyTorch among the transformed
        file's graph outputs (the model's output by name) and the values it
        keeps under a boundary name of the tagged file, each of these counted
        only where it is still its tensor by the margin (a tensor kept under
        its old name in another layout, or an fp16 mask clamped to -inf,
        measures no precision); at least float32 rounding. A pooler's tanh
        near its linear range leaves its output within the margin of its
        input, and int8 drift grows to the last layer: the output is still
        the output."""
        eager = {}
        for tensors in self.boundary_tensors.values():
            eager.update(tensors)
        found = [checks.FLOAT32_TOLERANCE]
        for name in sorted((kept | self.outputs) & eager.keys()):
            value, tensor = self.t_values[name], eager[name]
            if np.shape(value) != np.shape(tensor):
                continue
            distance = checks.disagreement(value, tensor)
            if not np.isfinite(distance):
                continue
            # A graph output is the model's output by name, as identity takes it.
            if name in self.outputs or self.candidates.nearest_other(value, tensor)[0] >= MARGIN * distance:
                found.append(distance)
        return max(found)

    def _identify(self, name, references):
        """(status, eager tensor, distance, line) of carried value `name` among
        the boundary tensors `references` ({original name: tensor})."""
        value = self.t_values[name]
        same_shape = {o: t for o, t in references.items() if np.shape(t) == np.shape(value)}
        if not same_shape:
            return WRONG, None, float("inf"), f"'{name}' {np.shape(value)}: no boundary tensor has its shape"
        if name in self.outputs and name in same_shape:  # the model's output, crossing as it did
            tensor = same_shape[name]
            distance = checks.disagreement(value, tensor)
            if distance > self.precision:
                return WRONG, tensor, distance, (f"the model's output '{name}': off by {distance:.1e} of its "
                                                 f"magnitude, beyond the tool's measured {self.precision:.1e}")
            return RIGHT, tensor, distance, ""
        distances = sorted(((checks.disagreement(value, t), o) for o, t in same_shape.items()), key=lambda p: p[0])
        distance, original = distances[0]
        tensor = same_shape[original]
        other, which = self.candidates.nearest_other(value, tensor)
        if distance > self.precision:
            return WRONG, tensor, distance, (f"'{name}': off by {distance:.1e} of its magnitude from the nearest "
                                             f"boundary tensor (as '{original}' crossed), beyond the tool's "
                                             f"measured {self.precision:.1e}")
        if other >= MARGIN * distance:
            return RIGHT, tensor, distance, ""
        line = (f"'{name}': {distance:.1e} from the boundary tensor that crossed as '{original}', "
                f"{other:.1e} from another value ({which})")
        return (WRONG if other * MARGIN <= distance else UNDECIDED), tensor, distance, line

    def _judge(self, key, inputs, outputs):
        verdict = Verdict(key)
        for side, names, verb, what in ((0, inputs, "consumes", "received"), (1, outputs, "produces", "returned")):
            references = self.boundary_tensors[(key, side)]
            identified = verdict.inputs if side == 0 else verdict.outputs
            covered, maybe = set(), set()
            for name in names:
                status, tensor, distance, line = self._identify(name, references)
                if status == RIGHT:
                    identified[name] = tensor
                    covered |= self._equal_to(tensor, references)
                    if side == 1:
                        verdict.drift = max(verdict.drift, distance)
                elif status == UNDECIDED:
                    maybe |= self._equal_to(tensor, references)
                    verdict.undecided_lines.append(f"{key}: {verb} {line}")
                else:
                    verdict.lines.append(f"{key}: {verb} {line}")
            for original in sorted(references.keys() - covered):
                if original in maybe:
                    continue  # its undecided line says it
                verdict.lines.append(f"{key}: no longer {'receives' if side == 0 else 'hands out'} the tensor it "
                                     f"{what} as '{original}' in the tagged file: no value crossing its boundary is it")
        return verdict

    def _equal_to(self, tensor, references):
        """The original boundary names whose tensor equals `tensor` within float32 rounding."""
        return {o for o, t in references.items() if np.shape(t) == np.shape(tensor) and
                checks.disagreement(t, tensor) <= checks.FLOAT32_TOLERANCE}

    def counts(self):
        statuses = [v.status for v in self.verdicts.values()]
        return {"judged": len(statuses), "right": statuses.count(RIGHT), "wrong": statuses.count(WRONG),
                "undecided": statuses.count(UNDECIDED)}

    def wrong_lines(self):
        return [line for v in self.verdicts.values() for line in v.lines]

    def undecided_lines(self):
        return [line for v in self.verdicts.values() if v.status == UNDECIDED for line in v.undecided_lines]


class _Candidates:
    """Every value a carried one could be: the tagged file's on the eager
    inputs and every tensor a call received or returned, by shape, each
    distinct array once."""

    def __init__(self, labelled):
        """`labelled`: (what it is, array) pairs; of equal arrays the first one's label is kept."""
        self.by_shape, seen = {}, set()
        for label, array in labelled:
            array = np.asarray(array)
            digest = (array.shape, array.dtype.str, hashlib.blake2b(np.ascontiguousarray(array).tobytes(),
                                                                   digest_size=16).digest())
            if digest not in seen:
                seen.add(digest)
                self.by_shape.setdefault(array.shape, []).append((label, array))

    def nearest_other(self, value, tensor):
        """(distance, description) of the candidate nearest to `value` that is
        not `tensor` (nor equal to it within float32 rounding)."""
        best = (float("inf"), "none of its shape")
        for label, candidate in self.by_shape.get(np.shape(value), []):
            if checks.disagreement(candidate, tensor) <= checks.FLOAT32_TOLERANCE:
                continue
            distance = checks.disagreement(value, candidate)
            if distance < best[0]:
                best = (distance, label)
        return best


def _made(model):
    return [n for node in model.graph.node for n in node.output if n]


def run(model, feeds, names):
    """{name: value} of one ONNX Runtime session on `model`, optimizations
    off, every name in `names` exposed as an output, the feeds cast to the
    model's input types."""
    import onnxruntime
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.ValueInfoProto(name=n) for n in dict.fromkeys(names) if n not in outputs)
    types = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type) for i in probe.graph.input}
    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    session = onnxruntime.InferenceSession(probe.SerializeToString(), options, providers=["CPUExecutionProvider"])
    wanted = [o.name for o in session.get_outputs()]
    fed = {name: np.asarray(value).astype(types[name]) for name, value in feeds.items() if name in types}
    return dict(zip(wanted, session.run(wanted, fed), strict=True))


def extraction(judgement, path, pass_name, run_tool):
    """(calls `hiertag extract` handled as the file says, calls tried,
    problems): a call the file declares is refused naming the export pass
    (declared at export) or `pass_name`; every judged call is written, and a
    right one (its boundary values identified as what it received and
    returned in eager PyTorch), run on the values its inputs have in the
    whole carried file, returns the values its outputs have there within
    the bound _replay_bound gives (float32 rounding or twice the call's
    drift, but for files holding fp16 values): extract cut the call's own nodes, no others."""
    right, tried, problems = 0, 0, []
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "module.onnx"
        for key, (tag, call) in judgement.calls.items():
            verdict = judgement.verdicts.get(key)
            if key not in judgement.with_nodes or (verdict is None and key not in judgement.declared):
                continue  # left no node, or never ran
            arguments = [path, "--module", tag, "-o", out, "--json"]
            if key != tag:
                arguments += ["--call", call]
            done = run_tool("extract", *arguments)
            tried += 1
            if key in judgement.at_export:
                ok = done.returncode == 2 and "cannot be extracted" in done.stderr
                problem = f"{key}: not refused as its export record says ({done.stderr.strip() or 'written'})"
            elif key in judgement.declared:
                ok = done.returncode == 2 and pass_name in done.stderr
                problem = f"{key}: not refused naming {pass_name} ({done.stderr.strip() or 'written'})"
            elif done.returncode != 0:
                ok, problem = False, f"{key}: {done.stderr.strip()}"
            elif verdict.status != RIGHT:
                ok, problem = True, ""  # written; its wrong or undecided lines say the rest
            else:
                info = json.loads(done.stdout)
                missing = [n for n in info["inputs"] if n not in verdict.inputs] + \
                          [n for n in info["outputs"] if n not in verdict.outputs]
                bound = _replay_bound(judgement, verdict)
                worst = float("inf") if missing else _run_extracted(out, info, judgement.t_values)
                judgement.extracted[key] = (worst, bound)
                ok = worst <= bound
                problem = (f"{key}: the extracted model's {missing[0]} is no value the judge identified" if missing
                           else f"{key}: the extracted model, on what the call reads in the carried file, is off "
                                f"by {worst:.1e} of its results' magnitude from what it hands out there")
            right += ok
            if not ok:
                problems.append(problem)
    return right, tried, problems


def _replay_bound(judgement, verdict):
    """How near a replay of the carried file's own values must come: float32
    rounding, or MARGIN times the call's drift from eager PyTorch (another
    graph, other kernels' summation order); in a file holding fp16 values,
    MARGIN times the tool's measured precision: ONNX Runtime runs fp16 ops
    that have no fp16 kernel in float32 and casts back only where a value
    leaves such a run, so a value exposed to be read (the judge's run of the
    whole file, the extracted model's inputs and outputs) is rounded to fp16
    where the other graph kept it in float32 (MobileViT's SiLU, T5's decoder
    attention, the whole RoBERTa: 6e-4 to 3e-3)."""
    bound = max(MARGIN * verdict.drift, checks.FLOAT32_TOLERANCE)
    if judgement.holds_fp16:
        bound = max(bound, MARGIN * judgement.precision)
    return bound


def _run_extracted(path, info, values):
    """How far the extracted model, run on the carried file's `values` at its
    inputs, is from the carried file's values at its outputs
    (checks.disagreement; inf when ONNX Runtime cannot run it)."""
    try:
        produced = run(onnx.load(str(path)), {n: values[n] for n in info["inputs"]}, info["outputs"])
    except Exception:  # ONNX Runtime refuses the extracted file: a problem of the cell
        return float("inf")
    return max((checks.disagreement(produced[n], values[n]) for n in info["outputs"]), default=0.0)
