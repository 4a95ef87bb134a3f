"""End-to-end: export real models with HIERTAG=1 and read the files back."""

import copy
import functools
import inspect
import io
import json
import os
import re
import urllib.parse

import numpy as np
import onnx
import onnx.numpy_helper
import onnxruntime
import pytest
import torch

import hiertag
from hiertag import OPSET, checks, core, zoo
from tests.e2e.exportable import skip_unless_torch_exports
from tests.e2e.native_tool import run_tool


def export(model, args, flag):
    os.environ["HIERTAG"] = flag
    try:
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
        return buffer.getvalue()
    finally:
        os.environ.pop("HIERTAG", None)


def run(model_bytes, feeds):
    return onnxruntime.InferenceSession(model_bytes).run(None, feeds)


@pytest.fixture(scope="module", params=sorted(zoo.ALL), ids=lambda name: f"model={name}")
def exported(request):
    """(name, model, args, tagged bytes, plain bytes); each export gets a model
    of its own, as torch's exporter mutates some (scripted) models. The ids
    (`model=NAME`) make each model's tests a unit of work of their own under
    `-n 2` (tests/conftest.py): they share no fixture with this module's others."""
    skip_unless_torch_exports(request.param)
    factory = zoo.ALL[request.param]
    # torch names a scripted class's nodes differently from its second export
    # in a process on (README, Limitations): export once first, so the two
    # exports compared below are alike whichever test ran before.
    export(*factory(), "0")
    torch_model, args = factory()
    tagged = export(torch_model, args, "1")
    plain_model, plain_args = factory()
    plain = export(plain_model, plain_args, "0")
    return request.param, torch_model, args, tagged, plain


def test_every_node_has_a_tag_listed_in_the_module_table(exported):
    name, _, _, tagged, _ = exported
    model = onnx.load_from_string(tagged)
    table = checks.module_table(model)
    nodes = list(checks.walk_nodes(model.graph))
    assert nodes
    for node in nodes:
        props = checks.node_props(node)
        assert core.TAG_KEY in props, f"{name}: node {node.name} ({node.op_type}) has no tag"
        assert props[core.TAG_KEY] in table, f"{name}: {props[core.TAG_KEY]} not in the module table"
        for shared in json.loads(props.get(core.SHARED_KEY, "[]")):
            tag, call = checks.parse_ref(shared)
            assert tag in table and (call is None or call < checks.call_count(table, tag)), shared
    for tag in table:
        parent = tag.rsplit("/", 1)[0]
        assert parent == "" or parent in table, f"{name}: ancestor {parent} of {tag} missing"


def test_module_table_names_the_real_module_instances(exported):
    name, torch_model, _, tagged, _ = exported
    table = checks.module_table(onnx.load_from_string(tagged))
    modules = dict(torch_model.named_modules())
    paths = [entry["path"] for entry in table.values()]
    assert len(paths) == len(set(paths)), f"{name}: two tags name one module"
    for tag, entry in table.items():
        assert entry["path"] in modules, f"{name}: {tag} -> unknown path {entry['path']!r}"
        module = modules[entry["path"]]
        if isinstance(module, torch.jit.ScriptModule):
            assert entry["class"].endswith("." + module.original_name) or entry["class"] == module.original_name
            short = module.original_name
        else:
            assert entry["class"] == torch.typename(type(module))
            short = type(module).__name__
        assert urllib.parse.unquote(tag.rsplit("/", 1)[1].split(".")[0].split("[")[0]) == short
    root_tag = [t for t, e in table.items() if e["path"] == ""]
    assert len(root_tag) == 1 and root_tag[0].count("/") == 1


def test_checker_accepts_and_runtime_gives_identical_outputs(exported):
    _, torch_model, args, tagged, plain = exported
    onnx.checker.check_model(onnx.load_from_string(tagged), full_check=True)
    feeds = checks.feeds_for(plain, torch_model, args)
    for ours, theirs in zip(run(tagged, feeds), run(plain, feeds), strict=True):
        np.testing.assert_array_equal(ours, theirs)


def test_tags_survive_a_load_save_round_trip(exported, tmp_path):
    _, _, _, tagged, _ = exported
    path = tmp_path / "round_trip.onnx"
    onnx.save(onnx.load_from_string(tagged), path)
    again = onnx.load(path)
    assert [checks.node_props(n) for n in checks.walk_nodes(again.graph)] == \
        [checks.node_props(n) for n in checks.walk_nodes(onnx.load_from_string(tagged).graph)]


def test_rest_of_the_file_equals_the_untagged_export(exported):
    _, _, _, tagged, plain = exported
    stripped = checks.strip_tags(onnx.load_from_string(tagged))
    assert stripped.SerializeToString() == onnx.load_from_string(plain).SerializeToString()


@pytest.mark.parametrize("name", sorted(zoo.ALL))
def test_flag_off_is_byte_identical_to_a_process_without_hiertag(name, flag_off_exports, never_loaded_exports):
    (flag_off, flag_off_errors), (plain, plain_errors) = flag_off_exports, never_loaded_exports
    # A model torch cannot export fails alike with the flag off: hiertag changes nothing there either.
    assert flag_off_errors.get(name) == plain_errors.get(name)
    assert flag_off.get(name) == plain.get(name)


@pytest.mark.parametrize("flag", ["", None])
def test_empty_or_unset_flag_equals_flag_zero(flag, monkeypatch):
    model, args = zoo.bert()
    zero = export(model, args, "0")
    model, args = zoo.bert()
    if flag is None:
        monkeypatch.delenv("HIERTAG", raising=False)
        buffer = io.BytesIO()
        torch.onnx.export(model, args, buffer, dynamo=False, opset_version=OPSET)
        assert buffer.getvalue() == zero
    else:
        assert export(model, args, flag) == zero


def test_the_report_counts_ending_the_export_as_own_work(capsys):
    # Check that HIERTAG_REPORT's own work has a part for ending the export (release), last,
    # and that the export gave every module its own forward back.
    model, args = zoo.bert()
    forwards = {name: "forward" in vars(module) for name, module in model.named_modules()}
    with hiertag.tagging(report=True):
        torch.onnx.export(model, args, io.BytesIO(), dynamo=False, opset_version=OPSET)
    lines = [line for line in capsys.readouterr().err.splitlines() if "hiertag work" in line]
    assert len(lines) == 1, lines
    found = re.search(r"hiertag work ([0-9.]+) ms \(([^)]*)\)", lines[0])
    parts = {name: float(ms) for name, ms in re.findall(r"(?:^|, )([a-z-]+) ([0-9.]+)", found.group(2))}
    assert list(parts) == ["set-up", "inlining", "passes", "cse", "tagging", "entries", "plan", "release"]
    assert {name: "forward" in vars(module) for name, module in model.named_modules()} == forwards


def test_a_wrapped_forward_shows_its_own_signature_during_the_export():
    # Check that while hiertag records a module's calls (its forward wrapped),
    # code reading the forward's signature, as models do to pick arguments,
    # sees the module's own parameters, and calling .forward() directly works.
    class Child(torch.nn.Module):
        def forward(self, x, scale=2.0):
            return x * scale

    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.child = Child()
            self.seen = []

        def forward(self, x):
            self.seen.append(list(inspect.signature(self.child.forward).parameters))
            return self.child(x) + self.child.forward(x, scale=3.0)

    model = Parent()
    tagged = export(model, (torch.randn(2, 3),), "1")
    assert model.seen == [["x", "scale"]]
    assert "forward" not in vars(model.child)
    calls = {node.name: checks.node_props(node).get("hierarchy_tag")
             for node in onnx.load_from_string(tagged).graph.node if node.op_type == "Mul"}
    assert sorted(calls.values()) == ["/Parent/Child", "/Parent/Child"], calls


class _Leaf(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


class _SharedLeaf(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = _Leaf()
        self.register_module("gap", None)
        self.again = self.first  # one module at two paths
        self.other = _Leaf()

    def forward(self, x):
        return self.other(self.again(x))


class _OwnNamedModules(_SharedLeaf):
    def named_modules(self, *args, **kwargs):
        yield from super().named_modules(*args, **kwargs)


class _HidingOuter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        object.__setattr__(self, "helper", _Leaf())  # no child in _modules

    def forward(self, x):
        return self.helper(x) + 1.0


def _instance_naming_a_hidden_module():
    # named_modules set on an instance: only it names the hidden child.
    model = _SharedLeaf()
    model.other = outer = _HidingOuter()
    outer.named_modules = lambda memo=None, prefix="", remove_duplicate=True: iter(
        [(prefix, outer), (prefix + ".helper", outer.helper)])
    return model


@pytest.mark.parametrize("make, paths", [
    (_SharedLeaf, ["", "first", "other"]),
    (_OwnNamedModules, ["", "first", "other"]),
    (_instance_naming_a_hidden_module, ["", "first", "other", "other.helper"]),
])
def test_the_module_table_names_each_module_at_the_path_named_modules_gives_it(make, paths):
    # Check that the modules are read as named_modules() yields them (a module
    # reachable at two paths once, at its first; None entries skipped; a module
    # only an instance's own method names), whether hiertag walks the modules
    # itself or, for a model overriding the method (on its class or an
    # instance), calls it.
    model = make()
    assert [name for name, _ in model.named_modules()] == paths
    table = checks.module_table(onnx.load_from_string(export(model, (torch.randn(2, 3),), "1")))
    assert sorted(entry["path"] for entry in table.values()) == sorted(paths)  # the table is in tag order


def test_a_module_copied_during_the_export_is_no_wrapped_module():
    # Check that a deep copy of a module made inside a forward during the export
    # (its forward wrapped then) gets the module's own forward, not hiertag's
    # wrapper: its calls are not taken for the original's, and nothing of the
    # export stays in it.
    class Parent(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.child = _Leaf()
            self.copies = []

        def forward(self, x):
            twin = copy.deepcopy(self.child)
            self.copies.append(twin)
            return self.child(x) + twin(x + 1.0)

    model = Parent()
    tagged = export(model, (torch.randn(2, 3),), "1")
    tags = [checks.node_props(node).get("hierarchy_tag")
            for node in onnx.load_from_string(tagged).graph.node if node.op_type == "Mul"]
    assert sorted(tags) == ["/Parent", "/Parent/_Leaf"]  # the copy's call is its caller's work
    twin, = model.copies
    own = vars(twin).get("forward")
    assert own is None or own.__self__ is twin
    assert torch.equal(twin(torch.ones(2)), torch.full((2,), 2.0))
    assert "forward" not in vars(model.child)


def test_a_forward_kept_from_an_earlier_export_records_a_call_of_this_one():
    # Check that a module's forward the model keeps from one export (hiertag's
    # wrapper then) records, when called in a later export, a call of that
    # module as the later export numbers it, and is no module's call in an
    # export of a model the module is not part of.
    class Keeper(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.child = _Leaf()
            self.kept = None

        def forward(self, x):
            if self.kept is None:
                self.kept = self.child.forward
            return self.kept(x) + 1.0

    class Outer(torch.nn.Module):
        def __init__(self, keeper):
            super().__init__()
            self.first = _Leaf()
            self.keeper = keeper

        def forward(self, x):
            return self.keeper(self.first(x))

    class Borrower(torch.nn.Module):
        def __init__(self, kept):
            super().__init__()
            self.own = _Leaf()
            self.kept = [kept]

        def forward(self, x):
            return self.kept[0](self.own(x))

    def mul_tags(tagged):
        return sorted(checks.node_props(node).get("hierarchy_tag")
                      for node in onnx.load_from_string(tagged).graph.node if node.op_type == "Mul")

    keeper = Keeper()
    x = torch.randn(2, 3)
    assert mul_tags(export(keeper, (x,), "1")) == ["/Keeper/_Leaf"]
    assert "forward" not in vars(keeper.child)
    assert mul_tags(export(Outer(keeper), (x,), "1")) == ["/Outer/Keeper/_Leaf", "/Outer/_Leaf"]
    # The kept forward's module is not in this model: its Mul is the caller's work.
    assert mul_tags(export(Borrower(keeper.kept), (x,), "1")) == ["/Borrower", "/Borrower/_Leaf"]
    # The model sets the kept forward back as the module's own: no wrapper calls another.
    keeper.child.forward = keeper.kept
    assert mul_tags(export(Outer(keeper), (x,), "1")) == ["/Outer/Keeper/_Leaf", "/Outer/_Leaf"]
    assert vars(keeper.child)["forward"] is keeper.kept
    # A forward that is no bound method (a partial holding the module) is its module's too.
    other = Keeper()
    other.child.forward = functools.partial(_Leaf.forward, other.child)
    export(other, (x,), "1")
    assert mul_tags(export(Outer(other), (x,), "1")) == ["/Outer/Keeper/_Leaf", "/Outer/_Leaf"]


def test_every_module_passes_the_boundary_check(exported):
    name, torch_model, args, tagged, plain = exported
    model = onnx.load_from_string(tagged)
    reference = checks.eager_reference(torch_model)
    results, skipped = checks.module_boundary_results(model, reference, args,
                                                      checks.feeds_for(plain, torch_model, args))
    checked = list(results)
    assert checked
    failures = [failure for lines in results.values() for failure in lines]
    assert not failures, f"{name}: " + "\n".join(failures)
    # Every call is checked, .forward() calls included; only modules whose
    # boundary an export pass removed, and containers that never ran (both
    # recorded in the file), are not.
    not_checked = {"cross_module_rewrites": {"/CrossModuleRewrites/ChannelsFirst",
                                             "/CrossModuleRewrites/ChannelsLast",
                                             "/CrossModuleRewrites/ConvBatchNorm/CustomConv"},
                   "reached_past": {"/ReachedPast/Stack"},
                   "rewrites_across_calls": {"/RewritesAcrossCalls/BatchNormConv#0",
                                             "/RewritesAcrossCalls/BatchNormConv#1",
                                             "/RewritesAcrossCalls/NHWCScale#0", "/RewritesAcrossCalls/NHWCScale#1"},
                   "cancelled_pair_kept": {"/CancelledPairKept/PermuteBack"},
                   "transposes_fused_across_calls": {"/TransposesFusedAcrossCalls/SplitHeads.0/KeyScores",
                                                     "/TransposesFusedAcrossCalls/SplitHeads.1/KeyScores"},
                   "permuted_encoder": {"/PermutedEncoder/ChannelsFirstEncoder/ConvLayer.1",
                                        "/PermutedEncoder/ChannelsFirstEncoder/ConvLayer.1/ConvOutput",
                                        "/PermutedEncoder/ChannelsFirstEncoder/ConvLayer.1/ConvOutput/ChannelsFirstNorm"},
                   "interleaved_container": {"/InterleavedContainer/Blocks"}}
    # The same for the HuggingFace models with each transformers release CI runs (5.23;
    # 4.57, with torch 2.4): none has a call an export pass cut through.
    assert set(skipped) == not_checked.get(name, set())


# What `hiertag extract` refuses to cut, each a reason the file itself gives.
EXTRACT_REFUSALS = ("cannot be extracted: ", "is not a convex region of the graph", "never ran (its caller reached",
                    "has no nodes in the main graph", "produces nothing used outside it")


def test_extract_cuts_each_call_where_the_boundary_check_draws_its_boundary(exported, tmp_path):
    """Check that the boundary the verifier checks is the one `hiertag extract`
    cuts: for every call of every module, the extracted model's inputs and
    outputs are the values checks.module_boundaries gives (one rule,
    tool/module_boundaries.h, reached by two paths), or extract refuses the
    call for a reason the file records."""
    name, _, _, tagged, _ = exported
    path = tmp_path / "model.onnx"
    path.write_bytes(tagged)
    model = onnx.load_from_string(tagged)
    table = checks.module_table(model)
    cut = []
    for (tag, call), (inputs, outputs) in sorted(checks.module_boundaries(model).items()):
        command = ["extract", path, "--module", tag, "-o", tmp_path / "call.onnx", "--json"]
        if checks.call_count(table, tag) > 1:
            command += ["--call", str(call)]
        done = run_tool(*command)
        if done.returncode != 0:
            assert done.returncode == 2 and any(reason in done.stderr for reason in EXTRACT_REFUSALS), \
                f"{name}: {tag}#{call}: {done.stderr}"
            continue
        result = json.loads(done.stdout)
        assert (sorted(result["inputs"]), sorted(result["outputs"])) == (inputs, outputs), f"{name}: {tag}#{call}"
        cut.append((tag, call))
    assert cut, f"{name}: extract cut no call"


def _same_type_up_to_symbols(whole, pieces, symbols):
    """True when two TypeProtos are equal once the dim_params of `pieces` are
    renamed by the one-to-one map `symbols` (whole's symbol -> pieces'), which
    this extends."""
    if whole.WhichOneof("value") != "tensor_type" or pieces.WhichOneof("value") != "tensor_type":
        return whole == pieces
    a, b = whole.tensor_type, pieces.tensor_type
    if a.elem_type != b.elem_type or a.HasField("shape") != b.HasField("shape") or len(a.shape.dim) != len(b.shape.dim):
        return False
    for x, y in zip(a.shape.dim, b.shape.dim, strict=True):
        if x.WhichOneof("value") != y.WhichOneof("value") or x.dim_value != y.dim_value:
            return False
        if x.HasField("dim_param") and (symbols.setdefault(x.dim_param, y.dim_param) != y.dim_param
                                        or list(symbols.values()).count(y.dim_param) > 1):
            return False
    return True


# Bytes of nodes in a piece of a few nodes (infer_in_pieces.cpp): a node of
# the bundled models is 100 to 400 bytes, tags included.
PIECE_OF_A_FEW_NODES = 1024


def test_types_inferred_a_node_at_a_time_are_those_of_whole_model_inference(exported, tmp_path):
    """Check that shape inference a piece at a time (core/file/infer_in_pieces.cpp,
    what extract runs) types every value as ONNX's inference of the whole model
    does, data propagation included, with every node a piece of its own: the
    most cuts, each a place where a value's type or data must cross. Made-up
    symbols may be named otherwise, never shared."""
    name, _, _, tagged, _ = exported
    path = tmp_path / "model.onnx"
    path.write_bytes(tagged)
    model = onnx.load_from_string(tagged)
    recorded = {value.name for value in [*model.graph.input, *model.graph.output, *model.graph.value_info]}
    whole = onnx.shape_inference.infer_shapes(model, data_prop=True).graph
    expected = {value.name: value.type for value in [*whole.value_info, *whole.output]
                if value.name not in recorded and value.type.WhichOneof("value")}
    pieces = {name: onnx.ValueInfoProto.FromString(value).type
              for name, value in core.TaggedFile(str(path)).value_types(core.value_types(), piece_bytes=1).items()}
    assert sorted(pieces) == sorted(expected), name
    symbols = {}
    differ = [value for value in expected if not _same_type_up_to_symbols(expected[value], pieces[value], symbols)]
    assert not differ, f"{name}: {differ[0]}: whole {expected[differ[0]]} pieces {pieces[differ[0]]}"
    # Asked for some values, as extract asks, inference drops the types no
    # later piece needs, also within a piece: in pieces of a few nodes, every
    # other value in graph order must come out as whole-model inference types
    # it all the same.
    made = [output for node in model.graph.node for output in node.output if output in expected]
    wanted = made[::2]
    asked = {name: onnx.ValueInfoProto.FromString(value).type for name, value in
             core.TaggedFile(str(path)).value_types(core.value_types(), piece_bytes=PIECE_OF_A_FEW_NODES,
                                                    names=wanted).items()}
    assert sorted(asked) == sorted(wanted), name
    symbols = {}
    differ = [value for value in wanted if not _same_type_up_to_symbols(expected[value], asked[value], symbols)]
    assert not differ, f"{name}: {differ[0]}: whole {expected[differ[0]]} asked alone {asked[differ[0]]}"


def test_hiertag_validate_accepts_the_tagged_file_and_rejects_the_plain_one(exported, tmp_path):
    _, _, _, tagged, plain = exported
    (tmp_path / "tagged.onnx").write_bytes(tagged)
    (tmp_path / "plain.onnx").write_bytes(plain)
    result = run_tool("validate", tmp_path / "tagged.onnx")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.endswith(f"valid: {len(list(checks.walk_nodes(onnx.load_from_string(tagged).graph)))} "
                                  f"nodes tagged, {len(checks.module_table(onnx.load_from_string(tagged)))} modules\n")
    result = run_tool("validate", tmp_path / "plain.onnx")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "not tagged by hiertag" in result.stderr


def test_hiertag_tree_accounts_for_every_node(exported, tmp_path):
    _, _, _, tagged, _ = exported
    (tmp_path / "tagged.onnx").write_bytes(tagged)
    result = run_tool("tree", tmp_path / "tagged.onnx", "--json")
    assert result.returncode == 0, result.stderr
    modules = json.loads(result.stdout)["modules"]
    model = onnx.load_from_string(tagged)
    assert {m["tag"] for m in modules} == set(checks.module_table(model))
    assert modules[0]["depth"] == 0
    assert modules[0]["nodes_total"] == len(list(checks.walk_nodes(model.graph)))
    assert sum(m["nodes_own"] for m in modules) == modules[0]["nodes_total"]
    assert modules[0]["bytes_total"] == sum(onnx.numpy_helper.to_array(i).nbytes for i in model.graph.initializer
                                            if any(i.name in n.input for n in checks.walk_nodes(model.graph)))
