// Tests of AssignHierarchyTags: each tagging rule on small ONNX-level graphs.
#include "hiertag/passes/assign_hierarchy_tags.h"

#include <algorithm>
#include <memory>
#include <memory_resource>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "graph_test_support.h"
#include "hiertag/core/export/scope_names.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/passes/scope_resolution.h"
#include "hiertag/passes/tagged_model_entries.h"

namespace hiertag {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;
using torch::jit::Value;

// Module indices of the table built by the fixture.
constexpr int kNet = 0;
constexpr int kLayers = 1;
constexpr int kLayer0 = 2;
constexpr int kAttn0 = 3;
constexpr int kLn0 = 4;
constexpr int kLayer1 = 5;
constexpr int kAttn1 = 6;
constexpr int kLn1 = 7;

class AssignHierarchyTagsTest : public testing::GraphTest {
 protected:
  void SetUp() override {
    EXPECT_EQ(modules_.Add("", "pkg.Net", "Net", true), kNet);
    EXPECT_EQ(modules_.Add("layers", "torch.nn.modules.container.ModuleList", "ModuleList", false), kLayers);
    EXPECT_EQ(modules_.Add("layers.0", "pkg.Layer", "Layer", true), kLayer0);
    EXPECT_EQ(modules_.Add("layers.0.attn", "pkg.Attn", "Attn", true), kAttn0);
    EXPECT_EQ(modules_.Add("layers.0.attn.ln", kLayerNorm, "LayerNorm", false), kLn0);
    EXPECT_EQ(modules_.Add("layers.1", "pkg.Layer", "Layer", true), kLayer1);
    EXPECT_EQ(modules_.Add("layers.1.attn", "pkg.Attn", "Attn", true), kAttn1);
    EXPECT_EQ(modules_.Add("layers.1.attn.ln", kLayerNorm, "LayerNorm", false), kLn1);
    modules_.Finalize();
    ASSERT_EQ(modules_.at(kAttn1).tag, "/Net/Layer.1/Attn");

    net_ = testing::InstanceScope(root_, kNet, "pkg.Net::");
    layer0_ = testing::InstanceScope(net_, kLayer0, "pkg.Layer::layers.0");
    attn0_ = testing::InstanceScope(layer0_, kAttn0, "pkg.Attn::attn");
    ln0_ = testing::InstanceScope(attn0_, kLn0, std::string(kLayerNorm) + "::ln");
    layer1_ = testing::InstanceScope(net_, kLayer1, "pkg.Layer::layers.1");
    attn1_ = testing::InstanceScope(layer1_, kAttn1, "pkg.Attn::attn");
    ln1_ = testing::InstanceScope(attn1_, kLn1, std::string(kLayerNorm) + "::ln");
  }

  // Tags the graph with fresh call tags (a CallTags settles on its first Tag()).
  HierarchyTagging Tag() {
    call_tags_ = std::make_unique<CallTags>(modules_);
    return AssignHierarchyTags(*graph_, modules_, *call_tags_, borrowed_, members_);
  }

  const TaggedNode& Tagged(const HierarchyTagging& tagging, const std::string& value_name) {
    Node* node = NodeOf(value_name);
    for (const TaggedNode& tagged : tagging.nodes) {
      if (tagged.node == node) return tagged;
    }
    ADD_FAILURE() << "node of %" << value_name << " not tagged";
    static const TaggedNode kMissing;
    return kMissing;
  }

  // "<tag> (<rule>)" of the node producing `value_name`, for one-line comparisons.
  std::string TagAndRule(const HierarchyTagging& tagging, const std::string& value_name) {
    const TaggedNode& tagged = Tagged(tagging, value_name);
    if (tagged.tag < 0 || tagged.tag >= call_tags_->size()) return "<no tag>";
    EXPECT_EQ(tagged.tag_module, call_tags_->Module(tagged.tag)) << value_name;
    return call_tags_->Tag(tagged.tag) + " (" + TagRuleName(tagged.rule) + ")";
  }

  // The tag strings of call tag ids, sorted.
  std::vector<std::string> TagsOf(const std::vector<int>& ids) {
    std::vector<std::string> tags;
    for (int id : ids) tags.push_back(call_tags_->Tag(id));
    std::sort(tags.begin(), tags.end());
    return tags;
  }

  // The tag strings of call references, with "#K" for a known call, sorted.
  std::vector<std::string> TagsOf(const std::vector<TagRef>& refs) {
    std::vector<std::string> tags;
    for (const TagRef& ref : refs) {
      tags.push_back(call_tags_->Tag(ref.tag) + (ref.call == TagRef::kEveryCall ? "" : "#" + std::to_string(ref.call)));
    }
    std::sort(tags.begin(), tags.end());
    return tags;
  }

  TaggedModelEntries Describe(const HierarchyTagging& tagging) {
    return DescribeTaggedModel(tagging, *call_tags_, modules_, *graph_);
  }

  static constexpr const char* kLayerNorm = "torch.nn.modules.normalization.LayerNorm";

  ModuleTable modules_;
  std::unique_ptr<CallTags> call_tags_;
  std::unordered_set<std::string> members_ = {"layers.0.attn.ln.weight", "layers.0.attn.ln.bias",
                                              "layers.1.attn.ln.weight", "layers.1.attn.ln.bias"};
  ScopePtr root_ = c10::make_intrusive<Scope>();
  ScopePtr net_, layer0_, attn0_, ln0_, layer1_, attn1_, ln1_;
};

// The value of model entry `key`, or "" when there is none.
std::string ModelEntry(const TaggedModelEntries& entries, std::string_view key) {
  for (const ModelMetadataEntry& entry : entries.model) {
    if (entry.key == key) return entry.value;
  }
  return "";
}

TEST_F(AssignHierarchyTagsTest, RecordedScopeGivesItsModuleTag) {
  // Check that a node recorded in a module call gets that module's tag by the recorded rule.
  Parse(R"IR(
graph(%input : Tensor):
  %r0 : Tensor = onnx::Relu(%input)
  %a0 : Tensor = onnx::Sigmoid(%r0)
  %r1 : Tensor = onnx::Tanh(%a0)
  %n : Tensor = onnx::Neg(%r1)
  return (%n)
)IR");
  SetScope("r0", layer0_);
  SetScope("a0", attn0_);
  SetScope("r1", layer1_);
  SetScope("n", net_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "r0"), "/Net/Layer.0 (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "a0"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "r1"), "/Net/Layer.1 (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "n"), "/Net (recorded)");
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kRecorded)], 4);
  EXPECT_EQ(tagging.unresolved_scope_levels, 0);
}

TEST_F(AssignHierarchyTagsTest, ParameterIdentityBeforeOwnersOnlyCallGoesToThatCall) {
  // Check that the same Identity placed before the owner's only call still gets that call's tag (no order dependence).
  Parse(R"IR(
graph(%input : Tensor, %layers.0.attn.ln.bias : Tensor):
  %layers.1.attn.ln.bias : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %y : Tensor = onnx::Add(%input, %input)
  %z : Tensor = onnx::Add(%y, %layers.1.attn.ln.bias)
  return (%z)
)IR");
  SetScope("y", testing::InstanceScope(layer0_, kAttn1, "pkg.Attn::attn"));
  SetScope("z", layer0_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "layers.1.attn.ln.bias"), "/Net/Layer.0/Attn[~layers.1.attn] (parameter-owner)");
  EXPECT_EQ(TagsOf(tagging.UsedTags()),
            (std::vector<std::string>{"/Net/Layer.0", "/Net/Layer.0/Attn[~layers.1.attn]"}));
}

TEST_F(AssignHierarchyTagsTest, LoopBodyNodeTakesEnclosingTag) {
  // Check that unscoped nodes in a Loop body take the Loop's tag, listed right after the Loop.
  Parse(R"IR(
graph(%input : Tensor, %n : Tensor, %cond : Tensor):
  %y : Tensor = onnx::Loop(%n, %cond, %input)
    block0(%i : Tensor, %c : Tensor, %v : Tensor):
      %b : Tensor = onnx::Relu(%v)
      %b2 : Tensor = onnx::Sigmoid(%b)
      -> (%c, %b2)
  %z : Tensor = onnx::Neg(%y)
  return (%z)
)IR");
  SetScope("y", layer1_);
  SetScope("z", layer0_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "b"), "/Net/Layer.1 (enclosing)");
  EXPECT_EQ(TagAndRule(tagging, "b2"), "/Net/Layer.1 (enclosing)");
  ASSERT_EQ(tagging.nodes.size(), 4u);
  EXPECT_EQ(tagging.nodes[0].node, NodeOf("y"));
  EXPECT_EQ(tagging.nodes[1].node, NodeOf("b"));
  EXPECT_EQ(tagging.nodes[2].node, NodeOf("b2"));
  EXPECT_EQ(tagging.nodes[3].node, NodeOf("z"));
}

TEST_F(AssignHierarchyTagsTest, GraphAttributeNodesTakeEnclosingTag) {
  // Check that unscoped nodes of a graph-valued attribute take the holder's tag, listed right after it.
  Parse(R"IR(
graph(%input : Tensor, %cond : Tensor):
  %y : Tensor = onnx::If(%cond)
  %z : Tensor = onnx::Neg(%y)
  return (%z)
)IR");
  auto branch = std::make_shared<Graph>();
  std::unordered_map<std::string, Value*> branch_values;
  torch::jit::parseIR(R"IR(
graph():
  %k : Long(requires_grad=0, device=cpu) = onnx::Constant[value={7}]()
  %r : Tensor = onnx::Relu(%k)
  return (%r)
)IR",
                      branch.get(), branch_values, /*parse_tensor_constants=*/true);
  NodeOf("y")->g_(c10::Symbol::attr("then_branch"), branch);
  SetScope("y", attn1_);
  SetScope("z", layer0_);
  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.nodes.size(), 4u);
  EXPECT_EQ(tagging.nodes[0].node, NodeOf("y"));
  EXPECT_EQ(tagging.nodes[1].node, branch_values.at("k")->node());
  EXPECT_EQ(tagging.nodes[2].node, branch_values.at("r")->node());
  EXPECT_EQ(tagging.nodes[3].node, NodeOf("z"));
  for (int i : {1, 2}) {
    EXPECT_EQ(tagging.nodes[i].tag_module, kAttn1) << i;
    EXPECT_EQ(tagging.nodes[i].rule, TagRule::kEnclosing) << i;
  }
}

// Graphs on which one rule places one or more nodes: each case names the
// nodes' recorded scopes (keys of Scopes()) and the "tag (rule)" each node
// gets. TagAndRule also checks each node's tag_module against its tag.
struct RuleCase {
  const char* name;
  const char* ir;
  std::vector<std::pair<std::string, std::string>> scopes;    // value -> scope key
  std::vector<std::pair<std::string, std::string>> expected;  // value -> "tag (rule)"
};

const RuleCase kRuleCases[] = {
    // Check that a node recorded in a filtered LayerNorm gets the tag of its tagged ancestor Attn.
    {"FilteredModuleScopeGoesToTaggedAncestor",
     R"IR(
graph(%input : Tensor):
  %m0 : Tensor = onnx::Mul(%input, %input)
  %m1 : Tensor = onnx::Mul(%m0, %m0)
  return (%m1)
)IR",
     {{"m0", "ln0"}, {"m1", "ln1"}},
     {{"m0", "/Net/Layer.0/Attn (recorded)"}, {"m1", "/Net/Layer.1/Attn (recorded)"}}},
    // Check that layers.0's LayerNorm called directly from Layer.0 (Attn's forward bypassed) goes to its caller
    // Layer.0.
    {"FilteredModuleCalledByItsOwnersCallerGoesToThatCaller",
     R"IR(
graph(%input : Tensor):
  %m0 : Tensor = onnx::Mul(%input, %input)
  return (%m0)
)IR",
     {{"m0", "layer0>ln0"}},
     {{"m0", "/Net/Layer.0 (recorded)"}}},
    // Check that layers.1's LayerNorm called from Layer.0 is tagged with the caller Layer.0, not Layer.1.
    {"FilteredModuleOwnedElsewhereGoesToCaller",
     R"IR(
graph(%input : Tensor):
  %m0 : Tensor = onnx::Mul(%input, %input)
  return (%m0)
)IR",
     {{"m0", "layer0>ln1"}},
     {{"m0", "/Net/Layer.0 (recorded)"}}},
    // Check that an unscoped Identity from a graph input to a parameter name is tagged with the parameter's owner.
    {"DeduplicatedParameterIdentityGoesToOwner",
     R"IR(
graph(%input : Tensor, %layers.0.attn.ln.bias : Tensor):
  %layers.1.attn.ln.bias : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %y : Tensor = onnx::Add(%input, %layers.1.attn.ln.bias)
  return (%y)
)IR",
     {{"y", "layer1"}},
     {{"layers.1.attn.ln.bias", "/Net/Layer.1/Attn (parameter-owner)"}}},
    // Check that a parameter Identity whose owner Attn of layers.1 was only called from Layer.0 gets that call's tag.
    {"ParameterIdentityAfterOwnersOnlyCallGoesToThatCall",
     R"IR(
graph(%input : Tensor, %layers.0.attn.ln.bias : Tensor):
  %y : Tensor = onnx::Add(%input, %input)
  %layers.1.attn.ln.bias : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %z : Tensor = onnx::Add(%y, %layers.1.attn.ln.bias)
  return (%z)
)IR",
     {{"y", "layer0>attn1"}, {"z", "layer0"}},
     {{"layers.1.attn.ln.bias", "/Net/Layer.0/Attn[~layers.1.attn] (parameter-owner)"}}},
    // Check that an Identity whose output is not a parameter name falls through to its neighbours. The initializer
    // input does not count, so the only neighbour is the Layer.1 consumer.
    {"IdentityOfNonParameterIsNotParameterOwner",
     R"IR(
graph(%input : Tensor, %layers.0.attn.ln.bias : Tensor):
  %bias_copy : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %y : Tensor = onnx::Add(%input, %bias_copy)
  return (%y)
)IR",
     {{"y", "layer1"}},
     {{"bias_copy", "/Net/Layer.1 (neighbours)"}}},
    // Check that a parameter Identity with a recorded scope keeps the recorded module.
    {"RecordedScopeWinsOverParameterOwner",
     R"IR(
graph(%input : Tensor, %layers.0.attn.ln.bias : Tensor):
  %layers.1.attn.ln.bias : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %y : Tensor = onnx::Add(%input, %layers.1.attn.ln.bias)
  return (%y)
)IR",
     {{"layers.1.attn.ln.bias", "layer0"}, {"y", "layer1"}},
     {{"layers.1.attn.ln.bias", "/Net/Layer.0 (recorded)"}}},
    // Check that a body node with its own recorded scope is not moved to the enclosing Loop's tag.
    {"ScopedLoopBodyNodeKeepsItsRecord",
     R"IR(
graph(%input : Tensor, %n : Tensor, %cond : Tensor):
  %y : Tensor = onnx::Loop(%n, %cond, %input)
    block0(%i : Tensor, %c : Tensor, %v : Tensor):
      %b : Tensor = onnx::Relu(%v)
      %b2 : Tensor = onnx::Sigmoid(%b)
      -> (%c, %b2)
  return (%y)
)IR",
     {{"y", "layer1"}, {"b2", "attn1"}},
     {{"b", "/Net/Layer.1 (enclosing)"}, {"b2", "/Net/Layer.1/Attn (recorded)"}}},
    // Check that a body output counts as the node holding the body for the consumers rule.
    {"ConstantUsedAsBodyOutputGoesToHolder",
     R"IR(
graph(%input : Tensor, %n : Tensor, %cond : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={5}]()
  %y : Tensor = onnx::Loop(%n, %cond, %input)
    block0(%i : Tensor, %cc : Tensor, %v : Tensor):
      -> (%cc, %c)
  %z : Tensor = onnx::Neg(%y)
  return (%z)
)IR",
     {{"y", "attn1"}, {"z", "layer1"}},
     {{"c", "/Net/Layer.1/Attn (consumers)"}}},
    // Check that an unscoped Constant used in Layer.0 and Layer.1 is tagged with their common ancestor Net.
    {"ConstantUsedByTwoLayersGoesToCommonAncestor",
     R"IR(
graph(%input : Tensor):
  %c_shared : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r0 : Tensor = onnx::Add(%input, %c_shared)
  %r1 : Tensor = onnx::Add(%r0, %c_shared)
  return (%r1)
)IR",
     {{"r0", "layer0"}, {"r1", "layer1"}},
     {{"c_shared", "/Net (consumers)"}}},
    // Check that a Constant used only in Layer.0 (and in Layer.0's Attn) is tagged Layer.0.
    {"ConstantUsedByOneLayerStaysInIt",
     R"IR(
graph(%input : Tensor):
  %c_layer0 : Long(requires_grad=0, device=cpu) = onnx::Constant[value={2}]()
  %c_nested : Long(requires_grad=0, device=cpu) = onnx::Constant[value={3}]()
  %r0 : Tensor = onnx::Add(%input, %c_layer0)
  %q0 : Tensor = onnx::Sub(%r0, %c_nested)
  %p0 : Tensor = onnx::Div(%q0, %c_nested)
  return (%p0)
)IR",
     {{"r0", "layer0"}, {"q0", "attn0"}, {"p0", "layer0"}},
     {{"c_layer0", "/Net/Layer.0 (consumers)"}, {"c_nested", "/Net/Layer.0 (consumers)"}}},
    // Check that a graph output counts as the root for the consumers rule.
    {"ConstantReturnedAsGraphOutputGoesToRoot",
     R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={4}]()
  %r1 : Tensor = onnx::Add(%input, %c)
  return (%r1, %c)
)IR",
     {{"r1", "attn1"}},
     {{"c", "/Net (consumers)"}}},
    // Check that an unscoped node between two nodes of Layer.0's Attn is tagged Attn by the neighbours rule.
    {"NeighboursInOneModuleKeepTheNodeThere",
     R"IR(
graph(%input : Tensor):
  %a0 : Tensor = onnx::Relu(%input)
  %t0 : Tensor = onnx::Transpose[perm=[1, 0]](%a0)
  %m0 : Tensor = onnx::Mul(%t0, %a0)
  return (%m0)
)IR",
     {{"a0", "attn0"}, {"m0", "ln0"}},
     {{"t0", "/Net/Layer.0/Attn (neighbours)"}}},
    // Check that an unscoped node fed by Layer.0 and Layer.1 and consumed in Layer.1 is tagged Net.
    {"NeighboursInTwoLayersLiftTheNodeToTheirAncestor",
     R"IR(
graph(%input : Tensor):
  %a0 : Tensor = onnx::Relu(%input)
  %r1 : Tensor = onnx::Sigmoid(%a0)
  %x : Tensor = onnx::Sub(%r1, %a0)
  %z : Tensor = onnx::Neg(%x)
  return (%z)
)IR",
     {{"a0", "attn0"}, {"r1", "layer1"}, {"z", "layer1"}},
     {{"x", "/Net (neighbours)"}}},
    // Check that an initializer input does not pull an unscoped node to the root.
    {"InitializerInputDoesNotCountAsNeighbour",
     R"IR(
graph(%input : Tensor, %layers.0.attn.ln.weight : Tensor):
  %w : Tensor = onnx::Cast[to=1](%layers.0.attn.ln.weight)
  %r1 : Tensor = onnx::Add(%input, %w)
  return (%r1)
)IR",
     {{"r1", "attn1"}},
     {{"w", "/Net/Layer.1/Attn (neighbours)"}}},
    // Check that a user input counts as the root for the neighbours rule.
    {"UserInputCountsAsRootNeighbour",
     R"IR(
graph(%input : Tensor):
  %u : Tensor = onnx::Cast[to=1](%input)
  %r1 : Tensor = onnx::Add(%u, %u)
  return (%r1)
)IR",
     {{"r1", "attn1"}},
     {{"u", "/Net (neighbours)"}}},
    // Check that a chain of unscoped nodes first settles its first node on the neighbours known so far. u1 waits for u2
    // and u2 for u1; u1 (first) settles on its known producer, then u2 sees Attn.0 and Layer.1.
    {"WaitingChainSettlesFirstNodeOnKnownNeighbours",
     R"IR(
graph(%input : Tensor):
  %a0 : Tensor = onnx::Relu(%input)
  %u1 : Tensor = onnx::Neg(%a0)
  %u2 : Tensor = onnx::Abs(%u1)
  %r1 : Tensor = onnx::Sigmoid(%u2)
  return (%r1)
)IR",
     {{"a0", "attn0"}, {"r1", "layer1"}},
     {{"u1", "/Net/Layer.0/Attn (neighbours)"}, {"u2", "/Net (neighbours)"}}},
    // Check that a Constant read only by another waiting node (the second in pre-order) waits for it and takes
    // its tag: the rules' references to waiting nodes are not confused with neighbours that do not count.
    {"ConstantReadByAWaitingNodeTakesItsTag",
     R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %u : Tensor = onnx::Cast[to=1](%c)
  %r : Tensor = onnx::Add(%input, %u)
  return (%r)
)IR",
     {{"r", "attn1"}},
     {{"u", "/Net/Layer.1/Attn (neighbours)"}, {"c", "/Net/Layer.1/Attn (consumers)"}}},
    // Check that a node no rule applies to (an unscoped, unused Constant) gets the root by the root rule.
    {"UnusedConstantFallsBackToRoot",
     R"IR(
graph(%input : Tensor):
  %unused : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r0 : Tensor = onnx::Relu(%input)
  return (%r0)
)IR",
     {{"r0", "layer0"}},
     {{"unused", "/Net (root)"}}},
    // Check that a used unscoped Constant is settled by its consumers, not by the root fallback.
    {"UsedConstantDoesNotFallBackToRoot",
     R"IR(
graph(%input : Tensor):
  %used : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r0 : Tensor = onnx::Add(%input, %used)
  return (%r0)
)IR",
     {{"r0", "layer0"}},
     {{"used", "/Net/Layer.0 (consumers)"}}},
};

class AssignHierarchyRuleTest : public AssignHierarchyTagsTest, public ::testing::WithParamInterface<RuleCase> {
 protected:
  // The scopes a case names: the fixture's instances, and calls of a module
  // from Layer.0 that does not own it ("layer0>attn1") or skips its owner.
  ScopePtr Scopes(const std::string& key) {
    if (key == "net") return net_;
    if (key == "layer0") return layer0_;
    if (key == "attn0") return attn0_;
    if (key == "ln0") return ln0_;
    if (key == "layer1") return layer1_;
    if (key == "attn1") return attn1_;
    if (key == "ln1") return ln1_;
    if (key == "layer0>attn1") return testing::InstanceScope(layer0_, kAttn1, "pkg.Attn::attn");
    if (key == "layer0>ln0") return testing::InstanceScope(layer0_, kLn0, std::string(kLayerNorm) + "::ln");
    if (key == "layer0>ln1") return testing::InstanceScope(layer0_, kLn1, std::string(kLayerNorm) + "::ln");
    ADD_FAILURE() << "no scope '" << key << "'";
    return root_;
  }
};

TEST_P(AssignHierarchyRuleTest, PlacesEachNode) {
  const RuleCase& rule_case = GetParam();
  Parse(rule_case.ir);
  for (const auto& [value, key] : rule_case.scopes) SetScope(value, Scopes(key));
  HierarchyTagging tagging = Tag();
  for (const auto& [value, expected] : rule_case.expected) EXPECT_EQ(TagAndRule(tagging, value), expected) << value;
  int counts[kTagRuleCount] = {};
  for (const TaggedNode& tagged : tagging.nodes) ++counts[static_cast<int>(tagged.rule)];
  for (int rule = 0; rule < kTagRuleCount; ++rule) {
    EXPECT_EQ(tagging.rule_counts[rule], counts[rule]) << TagRuleName(static_cast<TagRule>(rule));
  }
}

INSTANTIATE_TEST_SUITE_P(Rules, AssignHierarchyRuleTest, ::testing::ValuesIn(kRuleCases),
                         [](const ::testing::TestParamInfo<RuleCase>& info) { return std::string(info.param.name); });

// One graph in which each rule applies to at least one node.
constexpr const char* kAllRulesGraph = R"IR(
graph(%input : Tensor, %n : Tensor, %cond : Tensor, %layers.0.attn.ln.bias : Tensor):
  %c_shared : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %unused : Long(requires_grad=0, device=cpu) = onnx::Constant[value={2}]()
  %layers.1.attn.ln.bias : Tensor = onnx::Identity(%layers.0.attn.ln.bias)
  %r0 : Tensor = onnx::Add(%input, %c_shared)
  %t0 : Tensor = onnx::Neg(%r0)
  %m0 : Tensor = onnx::Mul(%t0, %r0)
  %y : Tensor = onnx::Loop(%n, %cond, %m0)
    block0(%i : Tensor, %c : Tensor, %v : Tensor):
      %b : Tensor = onnx::Add(%v, %layers.1.attn.ln.bias)
      -> (%c, %b)
  %z : Tensor = onnx::Add(%y, %c_shared)
  return (%z)
)IR";

TEST_F(AssignHierarchyTagsTest, RuleCountsCoverEveryNode) {
  // Check that on a graph using all six rules each node gets the expected rule and the counts add up.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("m0", ln0_);
  SetScope("y", layer1_);
  SetScope("z", attn1_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "c_shared"), "/Net (consumers)");
  EXPECT_EQ(TagAndRule(tagging, "unused"), "/Net (root)");
  EXPECT_EQ(TagAndRule(tagging, "layers.1.attn.ln.bias"), "/Net/Layer.1/Attn (parameter-owner)");
  EXPECT_EQ(TagAndRule(tagging, "r0"), "/Net/Layer.0 (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "t0"), "/Net/Layer.0 (neighbours)");
  EXPECT_EQ(TagAndRule(tagging, "m0"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "y"), "/Net/Layer.1 (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "b"), "/Net/Layer.1 (enclosing)");
  EXPECT_EQ(TagAndRule(tagging, "z"), "/Net/Layer.1/Attn (recorded)");
  ASSERT_EQ(tagging.nodes.size(), 9u);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kRecorded)], 4);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kParameterOwner)], 1);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kEnclosing)], 1);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kConsumers)], 1);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kNeighbours)], 1);
  EXPECT_EQ(tagging.rule_counts[static_cast<int>(TagRule::kRoot)], 1);
}

TEST_F(AssignHierarchyTagsTest, DescribedNodesListOpTypesAndTagsInPreOrder) {
  // Check that DescribeTaggedModel gives ONNX op types and tags in serialization pre-order.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("m0", ln0_);
  SetScope("y", layer1_);
  SetScope("z", attn1_);
  HierarchyTagging tagging = Tag();
  TaggedModelEntries entries = Describe(tagging);
  const std::vector<SerializedNodeTag>& serialized = entries.nodes;
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"Constant", "/Net"},     {"Constant", "/Net"},    {"Identity", "/Net/Layer.1/Attn"},
      {"Add", "/Net/Layer.0"},  {"Neg", "/Net/Layer.0"}, {"Mul", "/Net/Layer.0/Attn"},
      {"Loop", "/Net/Layer.1"}, {"Add", "/Net/Layer.1"}, {"Add", "/Net/Layer.1/Attn"}};
  ASSERT_EQ(serialized.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(serialized[i].op_type, expected[i].first) << i;
    EXPECT_EQ(serialized[i].tag, expected[i].second) << i;
    EXPECT_TRUE(serialized[i].shared_with.empty()) << i;
    EXPECT_TRUE(serialized[i].more.empty()) << i;
  }
}

TEST_F(AssignHierarchyTagsTest, DescribedNodesKeepTheirTextsInTheEntriesThroughMovesAndReassignment) {
  // Check that the entries' texts and output lists live in their own arena (op types too: torch's interned
  // names can move), and stay readable when the entries are moved and a new description is assigned over them.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("y", layer1_);
  HierarchyTagging tagging = Tag();
  TaggedModelEntries first = Describe(tagging);
  TaggedModelEntries moved = std::move(first);
  moved = Describe(tagging);  // the old nodes give their lists back before their arena goes
  TaggedModelEntries again = Describe(tagging);
  ASSERT_EQ(moved.nodes.size(), again.nodes.size());
  for (size_t i = 0; i < moved.nodes.size(); ++i) {
    const SerializedNodeTag& node = moved.nodes[i];
    EXPECT_EQ(node.op_type, again.nodes[i].op_type) << i;
    EXPECT_EQ(node.tag, again.nodes[i].tag) << i;
    EXPECT_EQ(std::vector<std::string_view>(node.outputs.begin(), node.outputs.end()),
              std::vector<std::string_view>(again.nodes[i].outputs.begin(), again.nodes[i].outputs.end()))
        << i;
    EXPECT_FALSE(node.outputs.get_allocator().resource()->is_equal(*std::pmr::get_default_resource())) << i;
    EXPECT_NE(node.op_type.data(), again.nodes[i].op_type.data()) << i;  // each description its own copy
  }
}

TEST_F(AssignHierarchyTagsTest, DescribedModuleTableListsEveryUsedTag) {
  // Check that the module table maps every used tag to its module's path and class, sorted by tag.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("m0", ln0_);
  SetScope("y", layer1_);
  SetScope("z", attn1_);
  TaggedModelEntries entries = Describe(Tag());
  EXPECT_EQ(ModelEntry(entries, kModuleTableKey),
            "{\"/Net\":{\"path\":\"\",\"class\":\"pkg.Net\"},"
            "\"/Net/Layer.0\":{\"path\":\"layers.0\",\"class\":\"pkg.Layer\"},"
            "\"/Net/Layer.0/Attn\":{\"path\":\"layers.0.attn\",\"class\":\"pkg.Attn\"},"
            "\"/Net/Layer.1\":{\"path\":\"layers.1\",\"class\":\"pkg.Layer\"},"
            "\"/Net/Layer.1/Attn\":{\"path\":\"layers.1.attn\",\"class\":\"pkg.Attn\"}}");
  EXPECT_EQ(ModelEntry(entries, kFormatVersionKey), kFormatVersion);
  EXPECT_EQ(ModelEntry(entries, kRewritesKey), "");
}

TEST_F(AssignHierarchyTagsTest, UsedTagsAreSortedAndUnique) {
  // Check that UsedTags lists each call tag once, ascending, and only the tags nodes carry.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("m0", ln0_);
  SetScope("y", layer1_);
  SetScope("z", attn1_);
  std::vector<int> used = Tag().UsedTags();
  EXPECT_TRUE(std::is_sorted(used.begin(), used.end()));
  EXPECT_EQ(std::adjacent_find(used.begin(), used.end()), used.end());
  EXPECT_EQ(TagsOf(used), (std::vector<std::string>{"/Net", "/Net/Layer.0", "/Net/Layer.0/Attn", "/Net/Layer.1",
                                                    "/Net/Layer.1/Attn"}));
}

TEST_F(AssignHierarchyTagsTest, TaggingLeavesGraphUnchangedAndIsDeterministic) {
  // Check that tagging does not change the graph and gives the same result twice.
  Parse(kAllRulesGraph);
  SetScope("r0", layer0_);
  SetScope("m0", ln0_);
  SetScope("y", layer1_);
  SetScope("z", attn1_);
  const std::string before = graph_->toString();
  HierarchyTagging first = Tag();
  std::vector<std::string> first_tags;
  for (const TaggedNode& tagged : first.nodes) first_tags.push_back(call_tags_->Tag(tagged.tag));
  HierarchyTagging second = Tag();
  EXPECT_EQ(graph_->toString(), before);
  EXPECT_EQ(NodeOf("r0")->scope(), layer0_);
  ASSERT_EQ(first.nodes.size(), second.nodes.size());
  for (size_t i = 0; i < first.nodes.size(); ++i) {
    EXPECT_EQ(first.nodes[i].node, second.nodes[i].node) << i;
    EXPECT_EQ(first_tags[i], call_tags_->Tag(second.nodes[i].tag)) << i;
    EXPECT_EQ(first.nodes[i].tag_module, second.nodes[i].tag_module) << i;
    EXPECT_EQ(first.nodes[i].rule, second.nodes[i].rule) << i;
  }
}

TEST_F(AssignHierarchyTagsTest, SharedNodeListsOtherModules) {
  // Check that a node lent a shared scope lists the merged duplicates' tags, minus its own.
  Parse(R"IR(
graph(%input : Tensor):
  %s : Tensor = onnx::Shape(%input)
  %r0 : Tensor = onnx::Add(%input, %s)
  %r1 : Tensor = onnx::Add(%r0, %s)
  return (%r1)
)IR");
  ScopePtr other_layer0_call = testing::InstanceScope(net_, kLayer0, "pkg.Layer::layers.0");
  SetScope("s", borrowed_.Lend({layer0_, layer0_, {attn1_, layer1_, other_layer0_call, ln1_}, {}, {}, {}}));
  SetScope("r0", layer0_);
  SetScope("r1", layer1_);
  HierarchyTagging tagging = Tag();
  const TaggedNode& shared = Tagged(tagging, "s");
  EXPECT_EQ(TagAndRule(tagging, "s"), "/Net/Layer.0 (recorded)");
  EXPECT_TRUE(std::is_sorted(shared.shared_with().begin(), shared.shared_with().end()));
  EXPECT_EQ(TagsOf(shared.shared_with()), (std::vector<std::string>{"/Net/Layer.1", "/Net/Layer.1/Attn"}));
  TaggedModelEntries entries = Describe(tagging);
  const std::vector<SerializedNodeTag>& serialized = entries.nodes;
  ASSERT_EQ(serialized.size(), 3u);
  EXPECT_EQ(serialized[0].shared_with, (std::vector<std::string>{"/Net/Layer.1", "/Net/Layer.1/Attn"}));
  EXPECT_TRUE(serialized[1].shared_with.empty());
  EXPECT_EQ(TagsOf(tagging.UsedTags()),
            (std::vector<std::string>{"/Net/Layer.0", "/Net/Layer.1", "/Net/Layer.1/Attn"}));
}

TEST_F(AssignHierarchyTagsTest, NodeLentOnlyItsOwnModuleIsNotShared) {
  // Check that a loan whose duplicates all resolve to the node's own tag gives no shared_with.
  Parse(R"IR(
graph(%input : Tensor):
  %s : Tensor = onnx::Shape(%input)
  return (%s)
)IR");
  ScopePtr other_layer0_call = testing::InstanceScope(net_, kLayer0, "pkg.Layer::layers.0");
  SetScope("s", borrowed_.Lend({layer0_, layer0_, {other_layer0_call}, {}, {}, {}}));
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "s"), "/Net/Layer.0 (recorded)");
  EXPECT_TRUE(Tagged(tagging, "s").shared_with().empty());
}

TEST_F(AssignHierarchyTagsTest, SharedConstantListsOnlyTheCallsReadingIt) {
  // Check that a constant CSE kept for both layers but read by layer 0 alone is shared with no other call.
  Parse(R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={2}]()
  %r0 : Tensor = onnx::Mul(%input, %c)
  return (%r0)
)IR");
  SetScope("c", borrowed_.Lend({attn0_, attn0_, {attn1_, layer1_}, {}, {}, {}}));
  SetScope("r0", attn0_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "c"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_TRUE(Tagged(tagging, "c").shared_with().empty());
  EXPECT_TRUE(Describe(tagging).nodes[0].shared_with.empty());
}

TEST_F(AssignHierarchyTagsTest, SharedConstantKeepsTheCallsReadingIt) {
  // Check that a constant read by layer 1's attention (directly) and by a node
  // shared with layer 1 stays shared with exactly those calls and their callers it lists.
  Parse(R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={2}]()
  %d : Long(requires_grad=0, device=cpu) = onnx::Constant[value={3}]()
  %r0 : Tensor = onnx::Mul(%input, %c)
  %r1 : Tensor = onnx::Mul(%r0, %c)
  %s : Tensor = onnx::Add(%input, %d)
  %out : Tensor = onnx::Add(%r1, %s)
  return (%out)
)IR");
  SetScope("c", borrowed_.Lend({attn0_, attn0_, {attn1_, layer1_}, {}, {}, {}}));
  SetScope("d", borrowed_.Lend({layer0_, layer0_, {attn1_, layer1_}, {}, {}, {}}));
  SetScope("r0", attn0_);
  SetScope("r1", attn1_);
  SetScope("s", borrowed_.Lend({layer0_, layer0_, {layer1_}, {}, {}, {}}));
  SetScope("out", net_);
  HierarchyTagging tagging = Tag();
  // %c: read by layer 1's attention, which runs inside layer 1.
  EXPECT_EQ(TagsOf(Tagged(tagging, "c").shared_with()),
            (std::vector<std::string>{"/Net/Layer.1", "/Net/Layer.1/Attn"}));
  // %d: read by a node of layer 0 also shared with layer 1, not by layer 1's attention.
  EXPECT_EQ(TagsOf(Tagged(tagging, "d").shared_with()), (std::vector<std::string>{"/Net/Layer.1"}));
  // A node with inputs keeps every call it was merged for.
  EXPECT_EQ(TagsOf(Tagged(tagging, "s").shared_with()), (std::vector<std::string>{"/Net/Layer.1"}));
}

TEST_F(AssignHierarchyTagsTest, BorrowedCallSiteScopeIsRecorded) {
  // Check that a node lent a call-site scope (inlined call) is tagged with the call site's module.
  Parse(R"IR(
graph(%input : Tensor):
  %r : Tensor = onnx::Relu(%input)
  return (%r)
)IR");
  SetScope("r", borrowed_.Lend({attn1_, root_, {}, {}, {}, {}}));
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "r"), "/Net/Layer.1/Attn (recorded)");
  EXPECT_EQ(tagging.unresolved_scope_levels, 0);
}

// Scopes as torch rebuilds them for a scripted model: "Class::attr", no instance ids.
TEST_F(AssignHierarchyTagsTest, ChainWithoutInstanceIdsResolvesByPath) {
  // Check that "Net::" / "Layer::layers.0" / "Attn::attn" resolves to layers.0.attn.
  Parse(R"IR(
graph(%input : Tensor):
  %a0 : Tensor = onnx::Relu(%input)
  %r1 : Tensor = onnx::Neg(%a0)
  %n : Tensor = onnx::Abs(%r1)
  return (%n)
)IR");
  ScopePtr net = testing::PushScope(root_, "__torch__.pkg.Net::");
  SetScope("a0",
           testing::PushScope(testing::PushScope(net, "__torch__.pkg.Layer::layers.0"), "__torch__.pkg.Attn::attn"));
  SetScope("r1", testing::PushScope(net, "__torch__.pkg.Layer::layers.1"));
  SetScope("n", net);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "a0"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "r1"), "/Net/Layer.1 (recorded)");
  EXPECT_EQ(TagAndRule(tagging, "n"), "/Net (recorded)");
  EXPECT_EQ(tagging.unresolved_scope_levels, 0);
}

TEST_F(AssignHierarchyTagsTest, UnmatchedLevelStopsAtDeepestMatchedModule) {
  // Check that a level matching no module ends the walk at the deepest matched module and is counted.
  Parse(R"IR(
graph(%input : Tensor):
  %a0 : Tensor = onnx::Relu(%input)
  return (%a0)
)IR");
  ScopePtr layer0 =
      testing::PushScope(testing::PushScope(root_, "__torch__.pkg.Net::"), "__torch__.pkg.Layer::layers.0");
  SetScope("a0", testing::PushScope(testing::PushScope(layer0, "__torch__.pkg.Mystery::nowhere"),
                                    "__torch__.pkg.Attn::attn"));
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "a0"), "/Net/Layer.0 (recorded)");
  EXPECT_EQ(tagging.unresolved_scope_levels, 1);
}

TEST_F(AssignHierarchyTagsTest, LevelThroughUnscopedContainerMatchesUniqueDescendant) {
  // Check that "ln" under Layer::layers.1 finds the unique descendant layers.1.attn.ln.
  Parse(R"IR(
graph(%input : Tensor):
  %m1 : Tensor = onnx::Mul(%input, %input)
  return (%m1)
)IR");
  ScopePtr layer1 =
      testing::PushScope(testing::PushScope(root_, "__torch__.pkg.Net::"), "__torch__.pkg.Layer::layers.1");
  SetScope("m1", testing::PushScope(layer1, "__torch__.torch.nn.modules.normalization.LayerNorm::ln"));
  HierarchyTagging tagging = Tag();
  // The chain reads Layer.1 -> ln: the filtered LayerNorm adds no level to its caller's tag.
  EXPECT_EQ(TagAndRule(tagging, "m1"), "/Net/Layer.1 (recorded)");
  EXPECT_EQ(tagging.unresolved_scope_levels, 0);
  ScopeResolver resolver(modules_, *call_tags_);
  EXPECT_EQ(resolver.Resolve(NodeOf("m1")->scope()).module, kLn1);
}

TEST_F(AssignHierarchyTagsTest, AmbiguousLevelIsNotGuessed) {
  // Check that "attn" directly under Net (matching layers.0.attn and layers.1.attn) stops at the root.
  Parse(R"IR(
graph(%input : Tensor):
  %a : Tensor = onnx::Relu(%input)
  return (%a)
)IR");
  SetScope("a", testing::PushScope(testing::PushScope(root_, "__torch__.pkg.Net::"), "__torch__.pkg.Attn::attn"));
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "a"), "/Net (recorded)");
  EXPECT_EQ(tagging.unresolved_scope_levels, 1);
}

TEST_F(AssignHierarchyTagsTest, NodeInDirectScopeIsTaggedWithItsModule) {
  // Check that a node in a direct scope (Attn's forward entered without __call__) is tagged with that module.
  Parse(R"IR(
graph(%input : Tensor):
  %a : Tensor = onnx::Relu(%input)
  return (%a)
)IR");
  SetScope("a", testing::PushScope(layer0_, MarkDirectScopeName(kAttn0, "pkg.Attn::attn")));
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "a"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_EQ(Tagged(tagging, "a").tag_module, kAttn0);
  EXPECT_EQ(tagging.unresolved_scope_levels, 0);
}

TEST_F(AssignHierarchyTagsTest, NodeOutsideDirectScopeStaysInCaller) {
  // Check that a node of the caller next to a direct scope keeps the caller's tag.
  Parse(R"IR(
graph(%input : Tensor):
  %a : Tensor = onnx::Relu(%input)
  %r : Tensor = onnx::Neg(%a)
  return (%r)
)IR");
  SetScope("a", testing::PushScope(layer0_, MarkDirectScopeName(kAttn0, "pkg.Attn::attn")));
  SetScope("r", layer0_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "r"), "/Net/Layer.0 (recorded)");
  EXPECT_EQ(Tagged(tagging, "r").tag_module, kLayer0);
}

TEST_F(AssignHierarchyTagsTest, ForeignCallGetsCallTreeTag) {
  // Check that layers.0's Attn called from Layer.1 is tagged under Layer.1, disambiguated from Layer.1's own Attn.
  Parse(R"IR(
graph(%input : Tensor):
  %foreign : Tensor = onnx::Relu(%input)
  %own : Tensor = onnx::Neg(%foreign)
  return (%own)
)IR");
  SetScope("foreign", testing::InstanceScope(layer1_, kAttn0, "pkg.Attn::attn"));
  SetScope("own", attn1_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "foreign"), "/Net/Layer.1/Attn[~layers.0.attn] (recorded)");
  EXPECT_EQ(Tagged(tagging, "foreign").tag_module, kAttn0);
  EXPECT_EQ(TagAndRule(tagging, "own"), "/Net/Layer.1/Attn (recorded)");
  EXPECT_EQ(Tagged(tagging, "own").tag_module, kAttn1);
}

TEST_F(AssignHierarchyTagsTest, OwnedCallKeepsModuleTableTag) {
  // Check that layers.0's Attn called by its owner Layer.0 keeps its module-table tag, undisambiguated.
  Parse(R"IR(
graph(%input : Tensor):
  %own : Tensor = onnx::Relu(%input)
  return (%own)
)IR");
  SetScope("own", attn0_);
  HierarchyTagging tagging = Tag();
  EXPECT_EQ(TagAndRule(tagging, "own"), modules_.at(kAttn0).tag + " (recorded)");
}

TEST_F(AssignHierarchyTagsTest, FusedNodeGoesToCommonAncestorAndListsSpans) {
  // Check that a node an export pass fused Layer.1's nodes into gets the common ancestor and lists both tags
  // and Layer.0, whose boundary the fused computation crosses on the way from its Attn to Layer.1.
  Parse(R"IR(
graph(%input : Tensor):
  %f : Tensor = onnx::Conv(%input, %input)
  return (%f)
)IR");
  SetScope("f", borrowed_.Lend({attn0_, attn0_, {}, {layer1_}, "_jit_pass_onnx_eval_peephole", {}}));
  HierarchyTagging tagging = Tag();
  const TaggedNode& fused = Tagged(tagging, "f");
  EXPECT_EQ(TagAndRule(tagging, "f"), "/Net (recorded)");
  EXPECT_EQ(TagsOf(fused.spans()), (std::vector<std::string>{"/Net/Layer.0#0", "/Net/Layer.0/Attn", "/Net/Layer.1"}));
  EXPECT_EQ(fused.rewrite(), "_jit_pass_onnx_eval_peephole");
  EXPECT_TRUE(fused.folded_from().empty());
  TaggedModelEntries entries = Describe(tagging);
  ASSERT_EQ(entries.nodes.size(), 1u);
  EXPECT_EQ(entries.nodes[0].tag, "/Net");
  EXPECT_EQ(entries.nodes[0].more,
            (std::vector<std::pair<std::string, std::string>>{
                {std::string(kSpansKey), "[\"/Net/Layer.0\",\"/Net/Layer.0/Attn\",\"/Net/Layer.1\"]"},
                {std::string(kRewriteKey), "_jit_pass_onnx_eval_peephole"}}));
  EXPECT_EQ(ModelEntry(entries, kRewritesKey),
            "[{\"pass\":\"_jit_pass_onnx_eval_peephole\",\"kind\":\"fused\","
            "\"modules\":[\"/Net/Layer.0\",\"/Net/Layer.0/Attn\",\"/Net/Layer.1\"],\"node\":\"\"}]");
}

TEST_F(AssignHierarchyTagsTest, FusedNodeWithinOneTagKeepsItsTag) {
  // Check that spans resolving to the node's own tag (another call of Attn of layers.0) move nothing and list nothing.
  Parse(R"IR(
graph(%input : Tensor):
  %f : Tensor = onnx::Conv(%input, %input)
  return (%f)
)IR");
  ScopePtr other_attn0_call = testing::InstanceScope(layer0_, kAttn0, "pkg.Attn::attn");
  SetScope("f", borrowed_.Lend({attn0_, attn0_, {}, {other_attn0_call, ln0_}, "_jit_pass_onnx_eval_peephole", {}}));
  HierarchyTagging tagging = Tag();
  const TaggedNode& fused = Tagged(tagging, "f");
  EXPECT_EQ(TagAndRule(tagging, "f"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_TRUE(fused.spans().empty());
  EXPECT_TRUE(fused.rewrite().empty());
  EXPECT_TRUE(Describe(tagging).nodes[0].more.empty());
}

TEST_F(AssignHierarchyTagsTest, FusedNodeWithoutInputsListsSpansAsFoldedFrom) {
  // Check that a fused node later folded into a constant keeps its tag and lists the other tags as folded_from.
  Parse(R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r : Tensor = onnx::Add(%input, %c)
  return (%r)
)IR");
  SetScope("c", borrowed_.Lend({attn0_, attn0_, {}, {layer1_}, "_jit_pass_onnx_eval_peephole", {}}));
  SetScope("r", attn0_);
  HierarchyTagging tagging = Tag();
  const TaggedNode& folded = Tagged(tagging, "c");
  EXPECT_EQ(TagAndRule(tagging, "c"), "/Net/Layer.0/Attn (recorded)");
  EXPECT_TRUE(folded.spans().empty());
  EXPECT_EQ(TagsOf(folded.folded_from()), (std::vector<std::string>{"/Net/Layer.1"}));
}

TEST_F(AssignHierarchyTagsTest, FoldedConstantListsFoldedFromAndKeepsItsTag) {
  // Check that a constant lent folded_from keeps its recorded tag, lists the folded tags, and names them in the table.
  Parse(R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r : Tensor = onnx::Add(%input, %c)
  return (%r)
)IR");
  SetScope("c", borrowed_.Lend({layer0_, root_, {}, {}, {}, {attn1_, ln1_}}));
  SetScope("r", layer0_);
  HierarchyTagging tagging = Tag();
  const TaggedNode& folded = Tagged(tagging, "c");
  EXPECT_EQ(TagAndRule(tagging, "c"), "/Net/Layer.0 (recorded)");
  EXPECT_EQ(TagsOf(folded.folded_from()), (std::vector<std::string>{"/Net/Layer.1/Attn"}));
  EXPECT_TRUE(folded.spans().empty());
  EXPECT_EQ(TagsOf(tagging.UsedTags()), (std::vector<std::string>{"/Net/Layer.0", "/Net/Layer.1/Attn"}));
  std::string table = ModelEntry(Describe(tagging), kModuleTableKey);
  EXPECT_NE(table.find("\"/Net/Layer.1/Attn\":{\"path\":\"layers.1.attn\",\"class\":\"pkg.Attn\","
                       "\"folded_into\":[\"c\"]}"),
            std::string::npos)
      << table;
  EXPECT_EQ(table.find("\"/Net/Layer.1\":{\"path\":\"layers.1\",\"class\":\"pkg.Layer\",\"folded_into\""),
            std::string::npos)
      << table;
}

TEST_F(AssignHierarchyTagsTest, ConstantWithoutLoanIsNotFoldedFrom) {
  // Check that a constant no pass folded anything into lists no folded_from.
  Parse(R"IR(
graph(%input : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={1}]()
  %r : Tensor = onnx::Add(%input, %c)
  return (%r)
)IR");
  SetScope("c", layer0_);
  SetScope("r", layer0_);
  HierarchyTagging tagging = Tag();
  EXPECT_TRUE(Tagged(tagging, "c").folded_from().empty());
  EXPECT_EQ(ModelEntry(Describe(tagging), kModuleTableKey).find("folded_into"), std::string::npos);
}

TEST_F(AssignHierarchyTagsTest, ResolverNamesTheScopeOfTheTaggedCall) {
  // Check that a scope resolves to its innermost module, its call tag, and the scope of the tagged call.
  call_tags_ = std::make_unique<CallTags>(modules_);
  ScopeResolver resolver(modules_, *call_tags_);
  ResolvedScope in_ln = resolver.Resolve(ln0_);
  EXPECT_EQ(in_ln.module, kLn0);
  EXPECT_EQ(call_tags_->Module(in_ln.tag), kAttn0);
  EXPECT_EQ(in_ln.call_scope, attn0_.get());
  ResolvedScope blank = resolver.Resolve(root_);
  EXPECT_EQ(blank.module, -1);
  EXPECT_EQ(blank.tag, -1);
  EXPECT_EQ(blank.call_scope, nullptr);
  EXPECT_EQ(call_tags_->Tag(in_ln.tag), "/Net/Layer.0/Attn");
}

TEST_F(AssignHierarchyTagsTest, ListedInstanceScopesResolveBySymbol) {
  // Check that a resolver given the instance scope names by symbol resolves
  // each scope as it does from the names, and that it reads the symbol: a
  // level whose recorded name no longer parses (a NUL in the class name cuts
  // it before "::") resolves to the module it was made for.
  InstanceScopeSymbols symbols;
  const std::string cut_class = std::string("pkg.Ln\0", 7) + "Norm::ln";
  symbols.Add(kNet, MarkInstanceScopeName(kNet, "pkg.Net::"));
  symbols.Add(kLayer0, MarkInstanceScopeName(kLayer0, "pkg.Layer::layers.0"));
  symbols.Add(kAttn0, MarkInstanceScopeName(kAttn0, "pkg.Attn::attn"));
  symbols.Add(kLn0, MarkInstanceScopeName(kLn0, std::string(kLayerNorm) + "::ln"));
  symbols.Add(kLn1, MarkInstanceScopeName(kLn1, cut_class));
  ScopePtr cut = testing::InstanceScope(attn1_, kLn1, cut_class);
  call_tags_ = std::make_unique<CallTags>(modules_);
  ScopeResolver by_name(modules_, *call_tags_);
  ScopeResolver by_symbol(modules_, *call_tags_, &symbols);
  for (const ScopePtr& scope : {net_, layer0_, attn0_, ln0_, layer1_, attn1_, ln1_}) {
    ResolvedScope expected = by_name.Resolve(scope);
    ResolvedScope resolved = by_symbol.Resolve(scope);
    EXPECT_EQ(resolved.module, expected.module);
    EXPECT_EQ(resolved.tag, expected.tag);
    EXPECT_EQ(resolved.call_scope, expected.call_scope);
  }
  EXPECT_EQ(by_name.Resolve(cut).module, kAttn1);  // the name stops the walk at its caller
  EXPECT_EQ(by_name.unresolved_levels(), 1);
  EXPECT_EQ(by_symbol.Resolve(cut).module, kLn1);
  EXPECT_EQ(by_symbol.unresolved_levels(), 0);
}

TEST(InstanceScopeSymbolsTest, FindsNamesInternedBeforeTheSetUp) {
  // Check that a name interned before the others (an earlier export of the
  // model) is found after one interned later, and that no other symbol is.
  const std::string early = MarkInstanceScopeName(5, "pkg.Early::early");
  const std::string between = MarkInstanceScopeName(6, "pkg.Between::between");
  c10::Symbol::scope(early);
  c10::Symbol::scope(between);
  InstanceScopeSymbols symbols;
  symbols.Add(1, MarkInstanceScopeName(1, "pkg.Late::late"));
  symbols.Add(5, early);
  EXPECT_EQ(symbols.Find(c10::Symbol::scope(MarkInstanceScopeName(1, "pkg.Late::late"))), 1);
  EXPECT_EQ(symbols.Find(c10::Symbol::scope(early)), 5);
  EXPECT_EQ(symbols.Find(c10::Symbol::scope(between)), -1);
  EXPECT_EQ(symbols.Find(c10::Symbol::scope("pkg.Unlisted::x")), -1);
  EXPECT_EQ(symbols.Find(c10::prim::Constant), -1);
}

}  // namespace
}  // namespace hiertag
