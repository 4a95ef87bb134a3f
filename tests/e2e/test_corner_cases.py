"""End-to-end checks of the corner cases no library model shows, by name."""

import gc
import json

import onnx
import pytest
import torch

from hiertag import checks, core, zoo
from hiertag.zoo import corner_cases
from tests.e2e.exportable import zoo_model
from tests.e2e.test_export import export, run_tool


def tagged(name):
    model, args = zoo_model(name)
    return onnx.load_from_string(export(model, args, "1"))


def tags_of(model, op_type):
    return [checks.node_props(n)[core.TAG_KEY] for n in checks.walk_nodes(model.graph) if n.op_type == op_type]


def test_containers_disambiguate_same_class_siblings_behind_filtered_containers():
    table = checks.module_table(tagged("containers"))
    experts = {tag: entry["path"] for tag, entry in table.items() if entry["class"].endswith(".Expert")}
    assert experts == {
        "/Containers/Expert[stages.0.0]": "stages.0.0", "/Containers/Expert[stages.0.1]": "stages.0.1",
        "/Containers/Expert[stages.1.0]": "stages.1.0", "/Containers/Expert[stages.1.1]": "stages.1.1",
        "/Containers/Expert[heads.left]": "heads.left", "/Containers/Expert[heads.right]": "heads.right",
    }


def calls_of(model, op_type):
    return [int(checks.node_props(n).get(core.CALL_KEY, "0"))
            for n in checks.walk_nodes(model.graph) if n.op_type == op_type]


class OwnNamedParameters(corner_cases.DuplicatedMembers):
    """The same model, with named_parameters of its own: hiertag then asks it."""

    def named_parameters(self, *args, **kwargs):
        yield from super().named_parameters(*args, **kwargs)


@pytest.mark.parametrize("make", [corner_cases.DuplicatedMembers, OwnNamedParameters], ids=["torch", "overridden"])
def test_a_deduplicated_member_read_through_an_identity_belongs_to_the_module_holding_it(make):
    # The exporter keeps one initializer of equal weights (and of equal buffers)
    # and gives the second an Identity named after it. The root reads that
    # Identity too, so only knowing it is `second`'s weight (or buffer) places it.
    model = onnx.load_from_string(export(make(), (torch.randn(4, 8),), "1"))
    identities = {n.output[0]: checks.node_props(n)[core.TAG_KEY]
                  for n in model.graph.node if n.op_type == "Identity"}
    root = "/" + make.__name__
    assert identities == {"second.weight": root + "/Scale[second]", "second.shift": root + "/Scale[second]"}


def test_module_called_twice_keeps_one_tag_and_numbers_its_calls():
    model = tagged("called_twice")
    assert tags_of(model, "Gemm") == ["/CalledTwice/Expert", "/CalledTwice/Expert"]
    assert calls_of(model, "Gemm") == [0, 1]
    assert checks.module_table(model)["/CalledTwice/Expert"]["calls"] == [0, 1]
    assert tags_of(model, "Softmax") == ["/CalledTwice"]
    assert core.CALL_KEY not in checks.node_props(next(n for n in model.graph.node if n.op_type == "Softmax"))


def test_layer_applied_three_times_has_three_calls_down_its_subtree():
    model = tagged("shared_layer_stack")
    table = checks.module_table(model)
    assert table["/SharedLayerStack/Block"]["calls"] == [0, 1, 2]
    assert table["/SharedLayerStack/Block/Norm"]["calls"] == [0, 1, 2]
    assert "parent_calls" not in table["/SharedLayerStack/Block"]
    assert table["/SharedLayerStack/Block/Norm"]["parent_calls"] == [0, 1, 2]
    assert calls_of(model, "LayerNormalization") == [0, 1, 2]


def test_directly_called_forward_owns_its_own_ops():
    model = tagged("direct_forward")
    assert tags_of(model, "LayerNormalization") == ["/DirectForward/Block.0/Norm", "/DirectForward/Block.1/Norm"]
    # The residual Add is written in Block.forward, called as block.forward(x):
    # torch records no call for it, hiertag does.
    assert tags_of(model, "Add") == ["/DirectForward/Block.0", "/DirectForward/Block.1"]


def test_attention_entered_through_forward_owns_its_ops():
    # Its node names stay torch's (test_export compares the files byte for byte).
    model = tagged("direct_attention_call")
    attention = {n.op_type for n in model.graph.node
                 if checks.node_props(n)[core.TAG_KEY] == "/DirectAttentionCall/Attention"}
    assert {"MatMul", "Softmax", "Div", "Add"} <= attention


def test_module_called_inside_a_siblings_forward_is_tagged_by_the_call_tree():
    model = tagged("annotated_transformer")
    table = checks.module_table(model)
    attention = "/AnnotatedTransformer/EncoderLayer.0/SublayerConnection.0/Attention"
    assert table[attention]["path"] == "layers.0.self_attn"
    assert table["/AnnotatedTransformer/EncoderLayer.0/SublayerConnection.1/Expert"]["path"] == "layers.0.feed_forward"
    assert "Softmax" in {n.op_type for n in model.graph.node if checks.node_props(n)[core.TAG_KEY] == attention}


def test_export_pass_rewrites_across_modules_are_recorded():
    model = tagged("cross_module_rewrites")
    conv = next(n for n in model.graph.node if n.op_type == "Conv")
    props = checks.node_props(conv)
    assert props[core.TAG_KEY] == "/CrossModuleRewrites/ConvBatchNorm"
    assert json.loads(props[core.SPANS_KEY]) == ["/CrossModuleRewrites/ConvBatchNorm",
                                               "/CrossModuleRewrites/ConvBatchNorm/CustomConv"]
    assert props[core.REWRITE_KEY] == "_jit_pass_onnx_eval_peephole"
    records = json.loads(checks.model_props(model)[core.REWRITES_KEY])
    removed = [r for r in records if r["kind"] == "removed"]
    assert removed == [{"pass": "_jit_pass_onnx_peephole", "kind": "removed", "node": "",
                        "modules": ["/CrossModuleRewrites/ChannelsFirst", "/CrossModuleRewrites/ChannelsLast"]}]
    assert set(checks.rewritten_boundaries(model)) == {
        "/CrossModuleRewrites/ChannelsFirst", "/CrossModuleRewrites/ChannelsLast",
        "/CrossModuleRewrites/ConvBatchNorm/CustomConv"}
    # Both modules ran: the table lists them although no node carries their tags.
    assert {"/CrossModuleRewrites/ChannelsLast",
            "/CrossModuleRewrites/ConvBatchNorm/CustomConv"} <= set(checks.module_table(model))


def test_tracer_alias_is_shared_with_the_caller_whose_variable_it_became():
    model = tagged("tracer_alias")
    casts = [n for n in model.graph.node if n.op_type == "Cast" and core.SHARED_KEY in checks.node_props(n)]
    assert [checks.node_props(n)[core.TAG_KEY] for n in casts] == ["/TracerAlias/AliasingBlock.0/CastingNorm",
                                                             "/TracerAlias/AliasingBlock.1/CastingNorm"]
    assert "/TracerAlias/AliasingBlock.0" in json.loads(checks.node_props(casts[0])[core.SHARED_KEY])


def test_container_a_caller_reached_past_keeps_its_level_and_says_it_never_ran():
    table = checks.module_table(tagged("reached_past"))
    assert table["/ReachedPast/Stack"] == {"path": "stack", "class": "hiertag.zoo.corner_cases.Stack", "ran": False}
    assert table["/ReachedPast/Stack/Expert.0"]["path"] == "stack.blocks.0"
    assert "ran" not in table["/ReachedPast/Stack/Expert.0"]


def test_module_folded_away_is_listed_with_what_it_became():
    model = tagged("folded_module")
    entry = checks.module_table(model)["/FoldedModule/SinusoidalPositions"]
    assert entry["path"] == "positions"
    assert not [n for n in model.graph.node
                if checks.node_props(n)[core.TAG_KEY] == "/FoldedModule/SinusoidalPositions"]
    produced = {o for n in model.graph.node for o in n.output} | {i.name for i in model.graph.initializer}
    assert entry["folded_into"] and set(entry["folded_into"]) <= produced


def test_a_table_computed_from_a_buffer_and_called_twice_extracts_each_call_alone(tmp_path):
    # Check that each call of a module computing from its buffer and constants alone
    # (ModernBERT's rotary embedding, called per layer) is cut as its own table: one
    # output, the one its layer reads, equal to the table eager PyTorch returned. The
    # first call takes no input. torch 2.4 exports the second call's x.shape[-2] as a
    # Shape of its argument (torch's own graph, HIERTAG unset too) and still reads the
    # buffer's Constant of the first call: that call then takes its argument, and the
    # buffer stays weight data it copies in, no result of the first call.
    import onnxruntime
    model = tagged("rotary_table_twice")
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    torch_model, (x,) = zoo_model("rotary_table_twice")
    with torch.no_grad():
        table = torch_model.table(x).numpy()
        arguments = [x.numpy(), (torch_model.first(x) * torch_model.table(x)).numpy()]
    tag = "/RotaryTableTwice/CosTable"
    boundaries = checks.module_boundaries(model)
    assert boundaries[(tag, 0)][0] == []
    results = []
    for call in (0, 1):
        out = tmp_path / f"table{call}.onnx"
        result = run_tool("extract", source, "--module", tag, "--call", str(call), "-o", out)
        assert result.returncode == 0, result.stderr
        extracted = onnx.load(out)
        inputs = [i.name for i in extracted.graph.input]
        assert inputs == boundaries[(tag, call)][0] and len(inputs) <= 1  # none, or the call's argument
        assert [o.name for o in extracted.graph.output] == boundaries[(tag, call)][1]
        feeds = {name: arguments[call] for name in inputs}
        (value,) = onnxruntime.InferenceSession(str(out)).run(None, feeds)
        assert checks.disagreement(value, table) <= checks.FLOAT32_TOLERANCE
        results += boundaries[(tag, call)][1]
    assert len(set(results)) == 2  # one result each, not both calls' in each
    checked, _ = boundaries_checked(model, zoo.ALL["rotary_table_twice"])
    assert {f"{tag}#0", f"{tag}#1"} <= set(checked)


class SplitTable(torch.nn.Module):
    """GPT-J's rotary embedding in miniature: sin and cos gathered from a buffer by
    position and split apart; called once per layer on the same positions."""

    def __init__(self):
        super().__init__()
        self.register_buffer("table", torch.arange(16.0).reshape(2, 8), persistent=False)

    def forward(self, x, ids):
        sincos = torch.gather(self.table.repeat(ids.shape[0], 1, 1), 1, ids.unsqueeze(-1).repeat(1, 1, 8))
        sin, cos = torch.split(sincos, 4, dim=-1)
        return x * cos + x * sin


class SplitTableTwice(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = SplitTable(), SplitTable()

    def forward(self, x, ids):
        return self.b(self.a(x, ids), ids)


def split_table_twice():
    return SplitTableTwice().eval(), (torch.randn(1, 2, 4), torch.tensor([[0, 1]]))


def test_a_split_cse_shared_between_two_calls_and_fused_with_its_unpacks_stays_shared():
    # CSE keeps the first call's gather and split for both calls (shared with the
    # second); the ONNX preprocess then fuses the split with its ListUnpacks into
    # one Split. That Split is still one computation both calls made: shared with
    # the second call, not a fusion spanning both (which would refuse both calls, as
    # GPT-J's and CodeGen's blocks were).
    model = onnx.load_from_string(export(*split_table_twice(), "1"))
    (split,) = [n for n in model.graph.node if n.op_type == "Split"]
    props = checks.node_props(split)
    assert props[core.TAG_KEY] == "/SplitTableTwice/SplitTable[a]"
    assert json.loads(props[core.SHARED_KEY]) == ["/SplitTableTwice/SplitTable[b]"]
    assert not [n.name for n in model.graph.node if core.SPANS_KEY in checks.node_props(n)]
    assert not checks.rewritten_boundaries(model)
    checked, skipped = boundaries_checked(model, split_table_twice)
    assert {"/SplitTableTwice/SplitTable[a]", "/SplitTableTwice/SplitTable[b]"} <= set(checked), skipped


def test_scripted_function_loop_belongs_to_the_layer_that_called_it():
    model = tagged("scripted_loop")
    assert tags_of(model, "Loop") == ["/ScriptedLoop/LoopLayer.0", "/ScriptedLoop/LoopLayer.1"]
    assert tags_of(model, "Mul") == ["/ScriptedLoop/LoopLayer.0", "/ScriptedLoop/LoopLayer.1"]


def test_autograd_function_symbolic_nodes_belong_to_their_module():
    model = tagged("autograd_symbolic")
    assert tags_of(model, "Clip") == ["/AutogradSymbolic/Clamped.0", "/AutogradSymbolic/Clamped.1"]


def test_node_merged_by_cse_lists_the_other_layer():
    model = tagged("shared_subexpression")
    shared = [(checks.node_props(n)[core.TAG_KEY], json.loads(checks.node_props(n)[core.SHARED_KEY]))
              for n in model.graph.node if core.SHARED_KEY in checks.node_props(n)]
    assert shared
    assert all(tag == "/SharedSubexpression/PositionalLayer.0" and others == ["/SharedSubexpression/PositionalLayer.1"]
               for tag, others in shared)


def test_scripted_model_table_names_the_real_classes_and_paths():
    table = checks.module_table(tagged("scripted_model"))
    assert {tag: (e["path"], e["class"]) for tag, e in table.items()} == {
        "/Scripted": ("", "hiertag.zoo.corner_cases.Scripted"),
        "/Scripted/ScriptedChild.0": ("layers.0", "hiertag.zoo.corner_cases.ScriptedChild"),
        "/Scripted/ScriptedChild.1": ("layers.1", "hiertag.zoo.corner_cases.ScriptedChild"),
        "/Scripted/ScriptedChild.0/Expert": ("layers.0.inner", "hiertag.zoo.corner_cases.Expert"),
        "/Scripted/ScriptedChild.1/Expert": ("layers.1.inner", "hiertag.zoo.corner_cases.Expert"),
    }


def test_a_scripted_models_eager_twin_goes_with_it():
    # The boundary check runs a scripted model's eager twin. An entry kept past
    # its scripted model is handed to whatever model Python puts at the freed
    # address (the same id()): CI once checked tracer_alias against one. Which
    # address is reused is the allocator's choice, so what is checked is that
    # nothing is kept.
    registered = len(checks._EAGER_TWINS)
    scripted, _ = zoo_model("scripted_model")
    assert checks.eager_reference(scripted) is not scripted
    assert len(checks._EAGER_TWINS) == registered + 1
    del scripted
    gc.collect()
    assert len(checks._EAGER_TWINS) == registered


def test_a_module_without_a_hash_is_its_own_reference():
    # A user's module may define __eq__ and so lose __hash__ (hiertag verify
    # FILE.py:FUNCTION checks such a model): the twins' map cannot hold it,
    # and it needs no twin.
    class Unhashable(torch.nn.Linear):
        def __eq__(self, other):
            return self is other

    model = Unhashable(2, 2)
    with pytest.raises(TypeError):
        hash(model)
    assert checks.eager_reference(model) is model


@pytest.mark.parametrize("setting, expected", [
    ("1", "/Containers/ModuleList/Sequential.0/Expert.0"),
    ("Sequential", "/Containers/Sequential.0/Expert.0"),
    ("LayerNorm", "/Containers/Expert[stages.0.0]"),
])
def test_torch_modules_setting_gives_torch_nn_modules_segments(monkeypatch, setting, expected):
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", setting)
    table = checks.module_table(tagged("containers"))
    assert expected in table
    assert [e["path"] for t, e in table.items() if t == expected] == ["stages.0.0"]


def test_invalid_flag_is_an_error_before_anything_is_written(tmp_path, monkeypatch):
    model, args = zoo_model("containers")
    monkeypatch.setenv("HIERTAG", "yes")
    path = tmp_path / "model.onnx"
    with pytest.raises(ValueError, match="HIERTAG='yes' is not valid"):
        import torch
        torch.onnx.export(model, args, str(path), dynamo=False)
    assert not path.exists()


def test_invalid_torch_modules_setting_is_an_error(monkeypatch):
    monkeypatch.setenv("HIERTAG_TORCH_MODULES", "Layer Norm;x")
    with pytest.raises(ValueError, match="HIERTAG_TORCH_MODULES"):
        tagged("containers")


def shared_of(node):
    return json.loads(checks.node_props(node).get(core.SHARED_KEY, "[]"))


def test_every_link_of_an_alias_chain_is_shared_with_the_caller():
    # features.flatten(1) on 2-D features and an eval Dropout both return their
    # input: the Flatten that survives carries the caller's sharing.
    model = tagged("alias_chains")
    (flatten,) = [n for n in model.graph.node if n.op_type == "Flatten"]
    assert checks.node_props(flatten)[core.TAG_KEY] == "/AliasChains/Head"
    assert shared_of(flatten) == ["/AliasChains"]


def test_a_module_returning_an_alias_of_its_input_keeps_it_as_its_result():
    model = tagged("alias_chains")
    (cast,) = [n for n in model.graph.node if checks.node_props(n)[core.TAG_KEY] == "/AliasChains/ToFloat"]
    assert cast.op_type == "Cast"
    assert shared_of(cast) == []
    boundaries = checks.module_boundaries(model)
    assert boundaries[("/AliasChains/ToFloat", 0)][1] == [cast.output[0]]


def test_an_alias_returned_by_a_script_function_is_shared_through_the_inlining():
    model = tagged("alias_chains")
    (branch,) = [n for n in model.graph.node if n.op_type == "If"]
    assert checks.node_props(branch)[core.TAG_KEY] == "/AliasChains/ScriptedClamp"
    assert shared_of(branch) == ["/AliasChains"]


def test_work_cse_merged_across_two_calls_is_shared_with_the_other_call():
    model = tagged("calls_sharing_work")
    merged = [n for n in model.graph.node if shared_of(n)]
    assert merged and all(shared_of(n) == ["/CallsSharingWork/MaskedLayer#1"] for n in merged)
    assert all(checks.node_props(n)[core.CALL_KEY] == "0" for n in merged)
    assert checks.module_boundaries(model)[("/CallsSharingWork/MaskedLayer", 1)][0] == \
        sorted({model.graph.input[1].name, next(n for n in model.graph.node if n.op_type == "Add").output[0]})


def test_export_pass_rewrites_across_calls_of_one_module_name_the_calls():
    model = tagged("rewrites_across_calls")
    records = json.loads(checks.model_props(model)[core.REWRITES_KEY])
    assert {(r["kind"], tuple(r["modules"])) for r in records} == {
        ("fused", ("/RewritesAcrossCalls/BatchNormConv#0", "/RewritesAcrossCalls/BatchNormConv#1")),
        ("removed", ("/RewritesAcrossCalls/NHWCScale#0", "/RewritesAcrossCalls/NHWCScale#1")),
    }
    assert set(checks.rewritten_boundaries(model)) == {
        "/RewritesAcrossCalls/BatchNormConv#0", "/RewritesAcrossCalls/BatchNormConv#1",
        "/RewritesAcrossCalls/NHWCScale#0", "/RewritesAcrossCalls/NHWCScale#1"}


def test_a_module_rewired_to_read_what_it_never_received_is_recorded():
    # PermuteBack's permute cancels PermuteOut's, which stays for the caller:
    # PermuteBack's Add now reads PermuteOut's input.
    model = tagged("cancelled_pair_kept")
    records = json.loads(checks.model_props(model)[core.REWRITES_KEY])
    assert records == [{"pass": "_jit_pass_onnx_peephole", "kind": "rewired",
                        "modules": ["/CancelledPairKept/PermuteBack"], "node": ""}]
    assert set(checks.rewritten_boundaries(model)) == {"/CancelledPairKept/PermuteBack"}


def test_class_names_the_tag_grammar_reserves_are_escaped():
    table = checks.module_table(tagged("odd_class_names"))
    assert {tag: entry["path"] for tag, entry in table.items() if entry["path"]} == {
        "/OddClassNames/Blk%5Bx%5D": "bracket", "/OddClassNames/Block%2E1": "dotted",
        "/OddClassNames/A%2FB": "slash", "/OddClassNames/H%231": "hash"}


def refusals(model, tmp_path):
    """{tag: the tool's one-line refusal} for every module `hiertag extract` refuses."""
    source = tmp_path / "model.onnx"
    onnx.save(model, source)
    refused = {}
    for tag in checks.module_table(model):
        result = run_tool("extract", source, "--module", tag, "-o", tmp_path / "module.onnx")
        if result.returncode != 0:
            refused[tag] = result.stderr.strip()
    return refused


def boundaries_checked(model, factory):
    """(calls whose boundary the check confirmed, {call: why not checked}) against
    eager PyTorch; fails on any call whose boundary differs."""
    torch_model, args = factory()
    plain = export(*factory(), "0")
    results, skipped = checks.module_boundary_results(model, checks.eager_reference(torch_model), args,
                                                      checks.feeds_for(plain, torch_model, args))
    failures = [failure for lines in results.values() for failure in lines]
    assert not failures, "\n".join(failures)
    return list(results), skipped


@pytest.mark.parametrize("layer", ["SplitHeads.0", "SplitHeads.1"])
def test_callers_transpose_fused_into_the_attentions_spans_both(layer, tmp_path):
    # The ONNX peephole composes the caller's k.view(...).transpose(1, 2) with the
    # attention's k.transpose(-2, -1): the Transpose left reads the caller's value
    # from before its transpose (SplitHeads.1 keeps its own for the keys it hands out).
    model = tagged("transposes_fused_across_calls")
    caller = f"/TransposesFusedAcrossCalls/{layer}"
    (fused,) = [n for n in model.graph.node if n.op_type == "Transpose" and core.SPANS_KEY in checks.node_props(n)
                and checks.node_props(n)[core.TAG_KEY] == caller]
    props = checks.node_props(fused)
    assert json.loads(props[core.SPANS_KEY]) == [caller, f"{caller}/KeyScores"]
    assert props[core.REWRITE_KEY] == "_jit_pass_onnx_peephole"
    assert [n.name for n in model.graph.node if fused.input[0] in n.output][0].endswith("/Reshape_1")
    why = checks.rewritten_boundaries(model)[f"{caller}/KeyScores"]
    assert why.startswith("_jit_pass_onnx_peephole fused its computation with")
    # The verifier's reason is extract's: one rule (tool/module_boundaries.h).
    assert refusals(model, tmp_path)[f"{caller}/KeyScores"].endswith(f"cannot be extracted: {why}")


def test_only_the_attentions_a_fused_transpose_cuts_are_refused(tmp_path):
    model = tagged("transposes_fused_across_calls")
    cut = {"/TransposesFusedAcrossCalls/SplitHeads.0/KeyScores", "/TransposesFusedAcrossCalls/SplitHeads.1/KeyScores"}
    assert set(refusals(model, tmp_path)) == cut
    checked, skipped = boundaries_checked(model, zoo.ALL["transposes_fused_across_calls"])
    assert set(skipped) == cut
    assert set(checked) == set(checks.module_table(model)) - cut


ENCODER = "/PermutedEncoder/ChannelsFirstEncoder"
LAST_LAYER_CHAIN = [f"{ENCODER}/ConvLayer.1", f"{ENCODER}/ConvLayer.1/ConvOutput",
                    f"{ENCODER}/ConvLayer.1/ConvOutput/ChannelsFirstNorm"]


def test_pair_cancelled_between_a_nested_norm_and_the_encoder_names_every_call_between(tmp_path):
    # The last layer's norm permutes back to channels-last, the encoder permutes
    # its result to channels-first again: both go, and the norm, its output block
    # and the layer all hand out the value from before the norm's permute.
    model = tagged("permuted_encoder")
    records = json.loads(checks.model_props(model)[core.REWRITES_KEY])
    assert records == [{"pass": "_jit_pass_onnx_peephole", "kind": "removed", "node": "",
                        "modules": [ENCODER] + LAST_LAYER_CHAIN}]
    refused = refusals(model, tmp_path)
    assert set(refused) == set(LAST_LAYER_CHAIN)
    assert all("_jit_pass_onnx_peephole removed its boundary with" in line for line in refused.values())
    checked, skipped = boundaries_checked(model, zoo.ALL["permuted_encoder"])
    assert set(skipped) == set(LAST_LAYER_CHAIN)
    assert set(checked) == set(checks.module_table(model)) - set(LAST_LAYER_CHAIN)


def test_squeezebert_records_every_call_its_cancelled_permutes_cut(tmp_path):
    # The real model the pattern comes from: SqueezeBertLayerNorm's trailing
    # permute in the last layer and SqueezeBertEncoder's final permute.
    from hiertag.zoo import sweep_models
    _, build = sweep_models.MODELS["squeezebert"]
    torch.manual_seed(0)
    torch_model, args = build()
    model = onnx.load_from_string(export(torch_model.eval(), args, "1"))
    encoder = "/SqueezeBertModel/SqueezeBertEncoder"
    layers = [tag for tag in checks.module_table(model) if tag.rpartition("/")[0] == encoder]
    last = max(layers, key=lambda tag: int(tag.rpartition(".")[2]))
    chain = [last, f"{last}/ConvDropoutLayerNorm[output]", f"{last}/ConvDropoutLayerNorm[output]/SqueezeBertLayerNorm"]
    records = json.loads(checks.model_props(model)[core.REWRITES_KEY])
    assert {"pass": "_jit_pass_onnx_peephole", "kind": "removed", "node": "", "modules": [encoder] + chain} in records
    assert set(refusals(model, tmp_path)) == set(chain)
    checked, skipped = boundaries_checked(model, lambda: (torch_model, args))
    assert set(skipped) == set(chain)
    assert set(checked) == set(checks.module_table(model)) - set(chain)
