// Tests of RecordCseSharing around torch's common subexpression elimination.
#include "hiertag/passes/record_cse_sharing.h"

#include <torch/csrc/jit/passes/common_subexpression_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <string>
#include <vector>

#include "graph_test_support.h"

namespace hiertag {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;
using torch::jit::Value;

class RecordCseSharingTest : public testing::GraphTest {
 protected:
  int RunPass() {
    int lent = RecordCseSharing(*graph_, borrowed_, [&] { torch::jit::EliminateCommonSubexpression(graph_); });
    graph_->lint();
    return lent;
  }

  ScopePtr root_ = c10::make_intrusive<Scope>();
  ScopePtr net_ = testing::InstanceScope(root_, 0, "pkg.Net::");
  ScopePtr layer0_ = testing::InstanceScope(net_, 2, "pkg.Layer::layers.0");
  ScopePtr layer1_ = testing::InstanceScope(net_, 5, "pkg.Layer::layers.1");
  ScopePtr layer2_ = testing::InstanceScope(net_, 8, "pkg.Layer::layers.2");
};

const c10::Symbol kMul = c10::Symbol::fromQualString("aten::mul");
const c10::Symbol kNeg = c10::Symbol::fromQualString("aten::neg");

// %a (layers.0) and %b (layers.1) compute the same value; each feeds its own consumer.
constexpr const char* kTwoDuplicates = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %c : Tensor = aten::relu(%a)
  %b : Tensor = aten::mul(%x, %x)
  %d : Tensor = aten::sigmoid(%b)
  return (%c, %d)
)IR";

TEST_F(RecordCseSharingTest, DuplicateInOtherScopeIsShared) {
  // Check that the node CSE keeps for two modules is lent a scope recording layers.0, shared with layers.1.
  Parse(kTwoDuplicates);
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("b", layer1_);
  SetScope("d", layer1_);
  Node* kept = NodeOf("a");
  Node* sigmoid = NodeOf("d");

  EXPECT_EQ(RunPass(), 1);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  EXPECT_EQ(sigmoid->input(0)->node(), kept);
  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->original, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_}));
  EXPECT_EQ(kept->scope()->parent(), layer0_);
  EXPECT_EQ(std::string_view(kept->scope()->name().toUnqualString()), kBorrowedScopeName);
  EXPECT_EQ(LoanOf("c"), nullptr);
  EXPECT_EQ(sigmoid->scope(), layer1_);
}

TEST_F(RecordCseSharingTest, DuplicateInSameScopeIsNotShared) {
  // Check that merging two identical nodes of the same module call lends nothing.
  Parse(kTwoDuplicates);
  for (const char* name : {"a", "b", "c", "d"}) SetScope(name, layer0_);
  Node* kept = NodeOf("a");

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  EXPECT_EQ(kept->scope(), layer0_);
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordCseSharingTest, BlankDuplicateIsNotShared) {
  // Check that a merged duplicate without a scope adds no module to the kept node.
  Parse(kTwoDuplicates);
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("d", layer1_);
  Node* kept = NodeOf("a");

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  EXPECT_EQ(kept->scope(), layer0_);
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordCseSharingTest, DistinctNodesAreNotShared) {
  // Check that nodes that differ in an input (CSE keeps both) are left alone.
  Parse(R"IR(
graph(%x : Tensor, %y : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %b : Tensor = aten::mul(%x, %y)
  %c : Tensor = aten::relu(%a)
  %d : Tensor = aten::sigmoid(%b)
  return (%c, %d)
)IR");
  SetScope("a", layer0_);
  SetScope("b", layer1_);

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 2);
  EXPECT_EQ(NodeOf("a")->scope(), layer0_);
  EXPECT_EQ(NodeOf("b")->scope(), layer1_);
}

TEST_F(RecordCseSharingTest, DuplicateReturnedAsGraphOutputIsShared) {
  // Check that a duplicate whose only use is a graph output is traced to the node now returned in its place.
  Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %c : Tensor = aten::relu(%a)
  %b : Tensor = aten::mul(%x, %x)
  return (%c, %b)
)IR");
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("b", layer1_);
  Node* kept = NodeOf("a");

  EXPECT_EQ(RunPass(), 1);

  ASSERT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  ASSERT_EQ(graph_->outputs()[1]->node(), kept);
  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr) << "the merge of layers.1's aten::mul into layers.0's was not recorded";
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_}));
}

TEST_F(RecordCseSharingTest, DuplicateReturnedFromLoopBodyIsShared) {
  // Check that a Loop-body duplicate whose only use is the body's output is traced to the outer node kept for it.
  Parse(R"IR(
graph(%x : Tensor, %n : int, %cond : bool):
  %a : Tensor = aten::mul(%x, %x)
  %c : Tensor = aten::relu(%a)
  %y : Tensor = prim::Loop(%n, %cond, %x)
    block0(%i : int, %v : Tensor):
      %b : Tensor = aten::mul(%x, %x)
      -> (%cond, %b)
  return (%c, %y)
)IR");
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("y", layer1_);
  SetScope("b", layer1_);
  Node* kept = NodeOf("a");
  Node* loop = NodeOf("y");

  EXPECT_EQ(RunPass(), 1);

  ASSERT_EQ(loop->blocks()[0]->return_node()->input(1)->node(), kept);
  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr) << "the merge of layers.1's aten::mul into layers.0's was not recorded";
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_}));
}

TEST_F(RecordCseSharingTest, MergedChainMarksEveryKeptNode) {
  // Check that a chain of two merged nodes lends a shared scope to both kept nodes.
  Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %e : Tensor = aten::neg(%a)
  %c : Tensor = aten::relu(%e)
  %b : Tensor = aten::mul(%x, %x)
  %f : Tensor = aten::neg(%b)
  %d : Tensor = aten::sigmoid(%f)
  return (%c, %d)
)IR");
  for (const char* name : {"a", "e", "c"}) SetScope(name, layer0_);
  for (const char* name : {"b", "f", "d"}) SetScope(name, layer1_);
  Node* sigmoid = NodeOf("d");

  EXPECT_EQ(RunPass(), 2);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  EXPECT_EQ(testing::CountKind(graph_->block(), kNeg), 1);
  EXPECT_EQ(sigmoid->input(0)->node(), NodeOf("e"));
  for (const char* name : {"a", "e"}) {
    const BorrowedScopes::Loan* loan = LoanOf(name);
    ASSERT_NE(loan, nullptr) << name;
    EXPECT_EQ(loan->recorded, layer0_) << name;
    EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_})) << name;
  }
  EXPECT_EQ(LoanOf("c"), nullptr);
}

TEST_F(RecordCseSharingTest, ThreeDuplicatesListEachOtherScopeOnce) {
  // Check that duplicates from layers.1, layers.2 and layers.1 again are listed once each, in graph order.
  Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::mul(%x, %x)
  %b : Tensor = aten::mul(%x, %x)
  %g : Tensor = aten::mul(%x, %x)
  %h : Tensor = aten::mul(%x, %x)
  %a_use : Tensor = aten::relu(%a)
  %b_use : Tensor = aten::sigmoid(%b)
  %g_use : Tensor = aten::tanh(%g)
  %h_use : Tensor = aten::neg(%h)
  return (%a_use, %b_use, %g_use, %h_use)
)IR");
  SetScope("a", layer0_);
  SetScope("b", layer1_);
  SetScope("g", layer2_);
  SetScope("h", layer1_);
  Node* kept = NodeOf("a");

  EXPECT_EQ(RunPass(), 1);

  EXPECT_EQ(testing::CountKind(graph_->block(), kMul), 1);
  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_, layer2_}));
}

TEST_F(RecordCseSharingTest, RestoreGivesKeptNodeItsScopeBack) {
  // Check that Restore gives the kept node the scope torch left it with.
  Parse(kTwoDuplicates);
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("b", layer1_);
  SetScope("d", layer1_);
  Node* kept = NodeOf("a");
  ASSERT_EQ(RunPass(), 1);
  ASSERT_NE(kept->scope(), layer0_);

  EXPECT_EQ(Restore(), 1);
  EXPECT_EQ(kept->scope(), layer0_);
  EXPECT_EQ(borrowed_.Find(kept->scope()), nullptr);
  EXPECT_EQ(Restore(), 0);
}

TEST_F(RecordCseSharingTest, KeptInlinedNodeKeepsItsOriginalForRestore) {
  // Check that a kept node already lent a call-site scope records that call and still restores to blank.
  Parse(kTwoDuplicates);
  Node* kept = NodeOf("a");
  ScopePtr blank = kept->scope();
  ASSERT_TRUE(blank->isBlank());
  kept->setScope(borrowed_.Lend({layer0_, blank, {}, {}, {}, {}}));
  SetScope("c", layer0_);
  SetScope("b", layer1_);
  SetScope("d", layer1_);

  EXPECT_EQ(RunPass(), 1);

  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->original, blank);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_}));
  EXPECT_EQ(Restore(), 1);
  EXPECT_EQ(kept->scope(), blank);
}

TEST_F(RecordCseSharingTest, RemovedInlinedNodeContributesItsCallSite) {
  // Check that a removed duplicate lent a call-site scope contributes the call site, not the borrowed scope.
  Parse(kTwoDuplicates);
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  ScopePtr blank = NodeOf("b")->scope();
  SetScope("b", borrowed_.Lend({layer1_, blank, {}, {}, {}, {}}));
  SetScope("d", layer1_);
  Node* kept = NodeOf("a");

  EXPECT_EQ(RunPass(), 1);

  const BorrowedScopes::Loan* loan = borrowed_.Find(kept->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer0_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{layer1_}));
}

TEST_F(RecordCseSharingTest, IrShowsOneMergedNodeUnderABorrowedScopeAndBothConsumersReadingIt) {
  // Check, on the IR dump, that one mul is left, under a borrowed level of
  // layers.0's scope, and that layers.1's consumer reads it.
  Parse(kTwoDuplicates);
  SetScope("a", layer0_);
  SetScope("c", layer0_);
  SetScope("b", layer1_);
  SetScope("d", layer1_);
  RunPass();
  torch::jit::testing::FileCheck().run(R"(
# CHECK: %a : Tensor = aten::mul(%x, %x), scope: hiertag.m0|pkg.Net::/hiertag.m2|pkg.Layer::layers.0/hiertag.borrowed::
# CHECK: aten::relu(%a), scope: hiertag.m0|pkg.Net::/hiertag.m2|pkg.Layer::layers.0
# CHECK-NOT: aten::mul
# CHECK: aten::sigmoid(%a), scope: hiertag.m0|pkg.Net::/hiertag.m5|pkg.Layer::layers.1
)",
                                       *graph_);
}

TEST_F(RecordCseSharingTest, IrShowsNoBorrowedScopeForDuplicatesInOneScope) {
  // Check, on the IR dump, that duplicates CSE merges inside one module call lend nothing.
  Parse(kTwoDuplicates);
  for (const char* name : {"a", "b", "c", "d"}) SetScope(name, layer0_);
  RunPass();
  torch::jit::testing::FileCheck().run(R"(
# CHECK: aten::mul(%x, %x)
# CHECK-NOT: hiertag.borrowed
# CHECK: return
)",
                                       *graph_);
}

}  // namespace
}  // namespace hiertag
