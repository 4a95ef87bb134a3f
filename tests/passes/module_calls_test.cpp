// Tests of RestoreTorchScopes: direct scopes removed, scope identity kept.
// ModuleCalls::Enter/Exit need a live tracer; the end-to-end tests cover them.
// AliasChain: the links of a tracer alias.
#include "hiertag/passes/module_calls.h"

#include <torch/csrc/jit/testing/file_check.h>

#include <string>

#include "graph_test_support.h"

namespace hiertag {
namespace {

using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;

constexpr int kAttn = 3;
constexpr int kLn = 4;
constexpr const char* kLnName = "torch.nn.modules.normalization.LayerNorm::ln";

class RestoreTorchScopesTest : public testing::GraphTest {
 protected:
  int RunPass() {
    int changed = RestoreTorchScopes(graph_->block());
    graph_->lint();
    return changed;
  }

  ScopePtr net_ = testing::InstanceScope(c10::make_intrusive<Scope>(), 0, "pkg.Net::");
  // Attn's forward entered without __call__ inside Net, and Attn's LayerNorm called through __call__.
  ScopePtr direct_ = testing::PushScope(net_, MarkDirectScopeName(kAttn, "pkg.Attn::attn"));
  ScopePtr ln_ = testing::InstanceScope(direct_, kLn, kLnName);
};

constexpr const char* kChainGraph = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::neg(%c)
  %e : Tensor = aten::abs(%d)
  return (%e)
)IR";

TEST_F(RestoreTorchScopesTest, NodeUnderDirectLevelMovesUnderCallersScope) {
  // Check that a node in net/direct(attn)/ln ends in a new scope named like ln whose parent is net's scope object.
  Parse(kChainGraph);
  SetScope("a", ln_);

  EXPECT_EQ(RunPass(), 1);

  ScopePtr restored = NodeOf("a")->scope();
  EXPECT_NE(restored, ln_);
  EXPECT_EQ(restored->name(), ln_->name());
  EXPECT_EQ(restored->parent(), net_);
  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: hiertag.d
# CHECK: aten::relu(%x), scope: hiertag.m0|pkg.Net::/hiertag.m4|torch.nn.modules.normalization.LayerNorm::ln
)",
                                       *graph_);
}

TEST_F(RestoreTorchScopesTest, NodeInDirectScopeMovesToCallersScopeObject) {
  // Check that a node recorded directly in the direct scope ends in the caller's scope object itself.
  Parse(kChainGraph);
  SetScope("a", direct_);

  EXPECT_EQ(RunPass(), 1);

  EXPECT_EQ(NodeOf("a")->scope(), net_);
}

TEST_F(RestoreTorchScopesTest, NodesSharingOneScopeObjectShareTheRestoredOne) {
  // Check that two nodes with one original scope object get one restored object, also inside a Loop body.
  Parse(R"IR(
graph(%x : Tensor, %n : int, %cond : bool):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %y : Tensor = prim::Loop(%n, %cond, %b)
    block0(%i : int, %v : Tensor):
      %w : Tensor = aten::tanh(%v)
      -> (%cond, %w)
  return (%y)
)IR");
  SetScope("a", ln_);
  SetScope("b", ln_);
  SetScope("w", ln_);

  EXPECT_EQ(RunPass(), 3);

  EXPECT_EQ(NodeOf("a")->scope(), NodeOf("b")->scope());
  EXPECT_EQ(NodeOf("w")->scope(), NodeOf("a")->scope());
  EXPECT_EQ(NodeOf("a")->scope()->parent(), net_);
}

TEST_F(RestoreTorchScopesTest, DistinctScopeObjectsWithOneNameStayDistinct) {
  // Check that two different original scope objects named alike (two calls of ln) restore to two objects.
  Parse(kChainGraph);
  ScopePtr second_ln_call = testing::InstanceScope(direct_, kLn, kLnName);
  SetScope("a", ln_);
  SetScope("b", second_ln_call);

  EXPECT_EQ(RunPass(), 2);

  ScopePtr first = NodeOf("a")->scope();
  ScopePtr second = NodeOf("b")->scope();
  EXPECT_NE(first, second);
  EXPECT_EQ(first->name(), second->name());
  EXPECT_EQ(first->parent(), net_);
  EXPECT_EQ(second->parent(), net_);
}

TEST_F(RestoreTorchScopesTest, NodesAboveOrBesideDirectScopesKeepTheirScopeObjects) {
  // Check that nodes whose chain has no direct level keep their exact scope objects while others are restored.
  Parse(kChainGraph);
  ScopePtr layer = testing::InstanceScope(net_, 2, "pkg.Layer::layers.0");
  SetScope("a", ln_);
  SetScope("b", net_);
  SetScope("c", layer);
  ScopePtr blank = NodeOf("d")->scope();

  EXPECT_EQ(RunPass(), 1);

  EXPECT_EQ(NodeOf("b")->scope(), net_);
  EXPECT_EQ(NodeOf("c")->scope(), layer);
  EXPECT_EQ(NodeOf("d")->scope(), blank);
}

TEST_F(RestoreTorchScopesTest, GraphWithoutDirectScopesIsUnchanged) {
  // Check that a graph whose scopes have no direct level is left as it is and 0 is returned.
  Parse(kChainGraph);
  ScopePtr instance_ln = testing::InstanceScope(net_, kLn, kLnName);
  SetScope("a", instance_ln);
  SetScope("b", net_);
  const std::string before = graph_->toString();

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(NodeOf("a")->scope(), instance_ln);
  EXPECT_EQ(NodeOf("b")->scope(), net_);
  EXPECT_EQ(graph_->toString(), before);
}

TEST_F(RestoreTorchScopesTest, RestoringTwiceChangesNothingTheSecondTime) {
  // Check that RestoreTorchScopes is idempotent: the second run changes no node and returns 0.
  Parse(kChainGraph);
  SetScope("a", ln_);
  SetScope("b", direct_);
  ASSERT_EQ(RunPass(), 2);
  ScopePtr a_once = NodeOf("a")->scope();
  ScopePtr b_once = NodeOf("b")->scope();

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(NodeOf("a")->scope(), a_once);
  EXPECT_EQ(NodeOf("b")->scope(), b_once);
}

// A call's no-op links on its input %x (as traced: the caller's %x rebound to %c),
// a node before the call, and one beside the chain.
constexpr const char* kAliasGraph = R"IR(
graph(%x : Tensor, %y : Tensor):
  %before : Tensor = aten::relu(%y)
  %a : Tensor = aten::to(%x)
  %s : int[] = aten::size(%a)
  %c : Tensor = aten::view(%a, %s)
  %beside : Tensor = aten::relu(%x)
  %d : Tensor = aten::add(%c, %before)
  return (%d, %beside)
)IR";

class AliasChainTest : public testing::GraphTest {};

TEST_F(AliasChainTest, ChainHoldsEveryLinkFromTheInputToItsNewValue) {
  // Check that the chain is every node made in the call on a path from %x to %c, in graph order.
  Parse(kAliasGraph);
  std::vector<Node*> chain = AliasChain(vmap_.at("x"), vmap_.at("c"), NodeOf("before"));
  EXPECT_EQ(chain, (std::vector<Node*>{NodeOf("a"), NodeOf("s"), NodeOf("c")}));
}

TEST_F(AliasChainTest, NodesBeforeTheCallAreNotInTheChain) {
  // Check that a link made before the call began (the call received %a) is no
  // part of this call's chain.
  Parse(kAliasGraph);
  std::vector<Node*> chain = AliasChain(vmap_.at("a"), vmap_.at("c"), NodeOf("a"));
  EXPECT_EQ(chain, (std::vector<Node*>{NodeOf("s"), NodeOf("c")}));
}

TEST_F(AliasChainTest, WithoutPathOnlyTheLastLinkIsTheChain) {
  // Check that a new value not computed from the input gives just its own node.
  Parse(kAliasGraph);
  std::vector<Node*> chain = AliasChain(vmap_.at("y"), vmap_.at("c"), NodeOf("before"));
  EXPECT_EQ(chain, std::vector<Node*>{NodeOf("c")});
}

}  // namespace
}  // namespace hiertag
