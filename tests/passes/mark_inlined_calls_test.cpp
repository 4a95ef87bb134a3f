// Tests of MarkInlinedCalls: call-site scopes lent to nodes between call markers.
#include "hiertag/passes/mark_inlined_calls.h"

#include <torch/csrc/jit/testing/file_check.h>

#include <string>

#include "graph_test_support.h"

namespace hiertag {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;
using torch::jit::Value;

const c10::Symbol kCallBegin = c10::Symbol::fromQualString("hiertag::call_begin");
const c10::Symbol kCallEnd = c10::Symbol::fromQualString("hiertag::call_end");

class MarkInlinedCallsTest : public testing::GraphTest {
 protected:
  // Inserts a marker right before the node producing `value_name`, created in `scope`.
  void InsertMarkerBefore(const std::string& value_name, CallMarker marker, const ScopePtr& scope) {
    torch::jit::WithInsertPoint insert_point(NodeOf(value_name));
    torch::jit::WithCurrentScope current_scope(*graph_, scope);
    InsertCallMarker(*graph_, marker);
  }

  int RunPass() {
    int lent = MarkInlinedCalls(*graph_, borrowed_);
    graph_->lint();
    return lent;
  }

  ScopePtr net_ = testing::InstanceScope(c10::make_intrusive<Scope>(), 0, "pkg.Net::");
  ScopePtr layer0_ = testing::InstanceScope(net_, 2, "pkg.Layer::layers.0");
  ScopePtr layer1_ = testing::InstanceScope(net_, 5, "pkg.Layer::layers.1");
};

constexpr const char* kStraightGraph = R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::relu(%x)
  %b : Tensor = aten::sigmoid(%a)
  %c : Tensor = aten::tanh(%b)
  %d : Tensor = aten::neg(%c)
  return (%d)
)IR";

TEST_F(MarkInlinedCallsTest, InsertCallMarkerUsesCurrentScope) {
  // Check that a marker is created in the graph's current scope, at the insertion point.
  Parse(kStraightGraph);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  Node* marker = NodeOf("b")->prev();
  EXPECT_EQ(marker->kind(), kCallBegin);
  EXPECT_EQ(marker->scope(), layer1_);
  EXPECT_EQ(marker->outputs().size(), 0u);
}

TEST_F(MarkInlinedCallsTest, BlankNodesBetweenMarkersBorrowCallSiteScope) {
  // Check that blank-scoped nodes between markers are lent a child of the markers' scope.
  Parse(kStraightGraph);
  NodeOf("a")->setScope(layer0_);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  ASSERT_EQ(testing::CountKind(graph_->block(), kCallBegin), 1);

  EXPECT_EQ(RunPass(), 2);

  for (const char* name : {"b", "c"}) {
    const BorrowedScopes::Loan* loan = LoanOf(name);
    ASSERT_NE(loan, nullptr) << name;
    EXPECT_EQ(loan->recorded, layer1_) << name;
    EXPECT_TRUE(loan->shared_with.empty()) << name;
    EXPECT_EQ(NodeOf(name)->scope()->parent(), layer1_) << name;
    EXPECT_EQ(std::string_view(NodeOf(name)->scope()->name().toUnqualString()), kBorrowedScopeName) << name;
  }
  EXPECT_EQ(NodeOf("b")->scope(), NodeOf("c")->scope());
  EXPECT_EQ(testing::CountKind(graph_->block(), kCallBegin), 0);
  EXPECT_EQ(testing::CountKind(graph_->block(), kCallEnd), 0);
}

TEST_F(MarkInlinedCallsTest, NodesOutsideMarkersAreNotLent) {
  // Check that nodes before and after the markers keep their scope, blank or not.
  Parse(kStraightGraph);
  NodeOf("a")->setScope(layer0_);
  ScopePtr blank = NodeOf("d")->scope();
  ASSERT_TRUE(blank->isBlank());
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("c", CallMarker::kEnd, layer1_);

  EXPECT_EQ(RunPass(), 1);

  EXPECT_NE(LoanOf("b"), nullptr);
  EXPECT_EQ(NodeOf("a")->scope(), layer0_);
  EXPECT_EQ(NodeOf("c")->scope(), blank);
  EXPECT_EQ(NodeOf("d")->scope(), blank);
  EXPECT_EQ(LoanOf("c"), nullptr);
}

TEST_F(MarkInlinedCallsTest, ScopedNodeBetweenMarkersKeepsItsScope) {
  // Check that a node between the markers that has its own scope is not lent the call site's.
  Parse(kStraightGraph);
  NodeOf("b")->setScope(layer0_);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);

  EXPECT_EQ(RunPass(), 1);

  EXPECT_EQ(NodeOf("b")->scope(), layer0_);
  const BorrowedScopes::Loan* loan = LoanOf("c");
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, layer1_);
}

TEST_F(MarkInlinedCallsTest, NestedBlockNodesBorrowCallSiteScope) {
  // Check that blank nodes inside a Loop body between the markers are lent the call site's scope too.
  Parse(R"IR(
graph(%x : Tensor, %n : int, %cond : bool):
  %a : Tensor = aten::relu(%x)
  %y : Tensor = prim::Loop(%n, %cond, %a)
    block0(%i : int, %v : Tensor):
      %w : Tensor = aten::sigmoid(%v)
      -> (%cond, %w)
  %d : Tensor = aten::neg(%y)
  return (%d)
)IR");
  NodeOf("a")->setScope(layer0_);
  InsertMarkerBefore("y", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);

  EXPECT_EQ(RunPass(), 2);

  const BorrowedScopes::Loan* loop_loan = LoanOf("y");
  const BorrowedScopes::Loan* body_loan = LoanOf("w");
  ASSERT_NE(loop_loan, nullptr);
  ASSERT_NE(body_loan, nullptr);
  EXPECT_EQ(loop_loan->recorded, layer1_);
  EXPECT_EQ(body_loan->recorded, layer1_);
  EXPECT_EQ(LoanOf("d"), nullptr);
}

TEST_F(MarkInlinedCallsTest, BlankMarkersLendNothing) {
  // Check that markers without a scope (no calling module known) lend nothing but are still removed.
  Parse(kStraightGraph);
  ScopePtr blank = NodeOf("b")->scope();
  InsertMarkerBefore("b", CallMarker::kBegin, blank);
  InsertMarkerBefore("d", CallMarker::kEnd, blank);

  EXPECT_EQ(RunPass(), 0);

  EXPECT_EQ(NodeOf("b")->scope(), blank);
  EXPECT_EQ(NodeOf("c")->scope(), blank);
  EXPECT_EQ(testing::CountKind(graph_->block(), kCallBegin), 0);
  EXPECT_EQ(testing::CountKind(graph_->block(), kCallEnd), 0);
}

TEST_F(MarkInlinedCallsTest, SecondRunChangesNothing) {
  // Check that the pass is idempotent: a second run finds no markers and lends nothing.
  Parse(kStraightGraph);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  ASSERT_EQ(RunPass(), 2);
  ScopePtr lent = NodeOf("b")->scope();
  const std::string after_first = graph_->toString();

  EXPECT_EQ(RunPass(), 0);
  EXPECT_EQ(graph_->toString(), after_first);
  EXPECT_EQ(NodeOf("b")->scope(), lent);
}

TEST_F(MarkInlinedCallsTest, RestoreGivesOriginalScopeBack) {
  // Check that Restore gives the lent nodes their blank scope back and leaves other nodes alone.
  Parse(kStraightGraph);
  NodeOf("a")->setScope(layer0_);
  ScopePtr blank = NodeOf("b")->scope();
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  ASSERT_EQ(RunPass(), 2);

  EXPECT_EQ(Restore(), 2);
  EXPECT_EQ(NodeOf("b")->scope(), blank);
  EXPECT_EQ(NodeOf("c")->scope(), blank);
  EXPECT_EQ(NodeOf("a")->scope(), layer0_);
  EXPECT_EQ(Restore(), 0);
}

TEST_F(MarkInlinedCallsTest, RestoreReachesNestedBlocks) {
  // Check that Restore gives a Loop body node its blank scope back.
  Parse(R"IR(
graph(%x : Tensor, %n : int, %cond : bool):
  %y : Tensor = prim::Loop(%n, %cond, %x)
    block0(%i : int, %v : Tensor):
      %w : Tensor = aten::sigmoid(%v)
      -> (%cond, %w)
  %d : Tensor = aten::neg(%y)
  return (%d)
)IR");
  ScopePtr blank = NodeOf("w")->scope();
  InsertMarkerBefore("y", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  ASSERT_EQ(RunPass(), 2);

  EXPECT_EQ(Restore(), 2);
  EXPECT_EQ(NodeOf("w")->scope(), blank);
  EXPECT_EQ(NodeOf("y")->scope(), blank);
}

TEST_F(MarkInlinedCallsTest, RestoreAfterScopedFirstNodeGivesBlankBack) {
  // Check that a blank node lent after a scoped node in the same call gets its blank scope back.
  Parse(kStraightGraph);
  NodeOf("b")->setScope(layer0_);
  ScopePtr blank = NodeOf("c")->scope();
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  ASSERT_EQ(RunPass(), 1);
  ASSERT_NE(LoanOf("c"), nullptr);

  EXPECT_EQ(Restore(), 1);
  EXPECT_EQ(NodeOf("b")->scope(), layer0_);
  EXPECT_EQ(NodeOf("c")->scope(), blank) << "c was given back " << NodeOf("c")->scope()->namesFromRoot();
}

TEST_F(MarkInlinedCallsTest, IrShowsCallSiteScopeLentAndMarkersGone) {
  // Check, on the IR dump, that the nodes between the markers print the call
  // site's scope under a borrowed level, and that no marker is left.
  Parse(kStraightGraph);
  NodeOf("a")->setScope(layer0_);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  RunPass();
  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: hiertag::call_begin
# CHECK: aten::relu(%x), scope: hiertag.m0|pkg.Net::/hiertag.m2|pkg.Layer::layers.0
# CHECK-NOT: hiertag::call
# CHECK: aten::sigmoid(%a), scope: hiertag.m0|pkg.Net::/hiertag.m5|pkg.Layer::layers.1/hiertag.borrowed::
# CHECK: aten::tanh(%b), scope: hiertag.m0|pkg.Net::/hiertag.m5|pkg.Layer::layers.1/hiertag.borrowed::
# CHECK-NOT: hiertag::call_end
# CHECK: aten::neg(%c)
# CHECK-NOT: scope
# CHECK: return
)",
                                       *graph_);
}

TEST_F(MarkInlinedCallsTest, IrShowsNothingLentWithoutMarkers) {
  // Check, on the IR dump, that a graph without markers keeps its blank scopes.
  Parse(kStraightGraph);
  NodeOf("a")->setScope(layer0_);
  EXPECT_EQ(RunPass(), 0);
  torch::jit::testing::FileCheck().run(R"(
# CHECK: aten::relu(%x), scope: hiertag.m0|pkg.Net::/hiertag.m2|pkg.Layer::layers.0
# CHECK-NOT: hiertag.borrowed
# CHECK: return
)",
                                       *graph_);
}

TEST_F(MarkInlinedCallsTest, IrShowsTorchsScopesAfterRestore) {
  // Check, on the IR dump, that Restore gives every lent node its blank scope back.
  Parse(kStraightGraph);
  InsertMarkerBefore("b", CallMarker::kBegin, layer1_);
  InsertMarkerBefore("d", CallMarker::kEnd, layer1_);
  RunPass();
  EXPECT_EQ(Restore(), 2);
  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: scope:
# CHECK: return
)",
                                       *graph_);
}

}  // namespace
}  // namespace hiertag
