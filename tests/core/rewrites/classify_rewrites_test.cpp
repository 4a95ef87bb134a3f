// Tests of the rewrite classification over PassGraphs, as either exporter's
// observer describes its graphs (the TorchScript path's own tests,
// tests/passes/record_rewrites_test.cpp, run it on torch's graphs).
#include "hiertag/core/rewrites/classify_rewrites.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <vector>

namespace hiertag {
namespace {

enum Kind : uint32_t { kTranspose = 1, kMul, kConv, kBatchNorm, kRelu, kConstant, kAdd };

struct NodeSpec {
  uint32_t kind;
  Owner owner;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  uint64_t attributes = 1;
  uint32_t before = PassGraph::kMade;
};

PassGraph Graph(std::initializer_list<NodeSpec> nodes, std::vector<ValueId> graph_outputs,
                std::vector<ValueId> graph_inputs) {
  PassGraph graph;
  for (const NodeSpec& spec : nodes) {
    PassGraph::Node node;
    node.kind = spec.kind;
    node.owner = spec.owner;
    node.attributes = spec.inputs.empty() ? 0 : spec.attributes;
    node.before = spec.before;
    node.constant_op = spec.kind == kConstant;
    std::vector<uint8_t> scalar(spec.outputs.size(), 0);
    graph.Add(node, spec.inputs, spec.outputs, scalar);
  }
  PassGraph::Node ret;
  ret.is_return = true;
  ret.before = static_cast<uint32_t>(nodes.size());  // the return is the return (indices line up in these tests)
  graph.Add(ret, graph_outputs, {}, {});
  graph.graph_inputs.assign(graph_inputs.begin(), graph_inputs.end());
  graph.graph_input_scalar.assign(graph.graph_inputs.size(), 0);
  return graph;
}

// The return of `after` pairs with the return of `before`.
void PairReturns(const PassGraph& before, PassGraph& after) {
  after.nodes.back().before = static_cast<uint32_t>(before.size() - 1);
}

PassRewrites Classify(const PassGraph& before, PassGraph after, const LoanLookup& loans = {}) {
  PairReturns(before, after);
  return RewriteClassifier().Classify(before, after, "pass", loans);
}

constexpr Owner kToLast = 0, kToFirst = 1, kConvOwner = 2, kNormOwner = 3;

TEST(ClassifyRewritesTest, PermutePairCancelledAcrossOwnersIsRecordedRemoved) {
  // Check that a permute and its inverse in two owners, both gone with the reader reading their input, is removed.
  PassGraph before = Graph(
      {{kTranspose, kToLast, {1}, {2}}, {kTranspose, kToFirst, {2}, {3}}, {kMul, kToFirst, {3, 9}, {4}}}, {4}, {1, 9});
  PassGraph after = Graph({{kMul, kToFirst, {1, 9}, {4}, 1, 2}}, {4}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.records.size(), 1u);
  EXPECT_EQ(rewrites.records[0].kind, OwnerRewrite::Kind::kRemoved);
  EXPECT_EQ(rewrites.records[0].owners, (std::vector<Owner>{kToLast, kToFirst}));
  EXPECT_TRUE(rewrites.loans.empty());
}

TEST(ClassifyRewritesTest, PermutePairCancelledInsideOneOwnerIsNotRecordedRemoved) {
  // Check that the same pair inside one owner is no removed record: the reader is rewired to a value its own
  // owner read before (which tagging finds cuts no boundary).
  PassGraph before = Graph(
      {{kTranspose, kToFirst, {1}, {2}}, {kTranspose, kToFirst, {2}, {3}}, {kMul, kToFirst, {3, 9}, {4}}}, {4}, {1, 9});
  PassGraph after = Graph({{kMul, kToFirst, {1, 9}, {4}, 1, 2}}, {4}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.records.size(), 1u);
  EXPECT_EQ(rewrites.records[0].kind, OwnerRewrite::Kind::kRewired);
  EXPECT_EQ(rewrites.records[0].graph_input, 0);
  EXPECT_EQ(rewrites.records[0].value_owners, (std::vector<Owner>{kToFirst}));
  EXPECT_TRUE(rewrites.loans.empty());
}

TEST(ClassifyRewritesTest, MadeNodeTakingOverAnotherOwnersNodesCarriesSpans) {
  // Check that a Conv the pass made under the Conv's owner, computing from what the group read, spans the
  // BatchNorm's owner.
  PassGraph before =
      Graph({{kConv, kConvOwner, {1, 7}, {2}}, {kBatchNorm, kNormOwner, {2, 8}, {3}}, {kRelu, kNormOwner, {3}, {4}}},
            {4}, {1, 7, 8});
  PassGraph after = Graph({{kConv, kConvOwner, {1, 10}, {11}}, {kRelu, kNormOwner, {11}, {4}, 1, 2}}, {4}, {1, 10});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].node, 0u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kConvOwner);
  EXPECT_EQ(rewrites.loans[0].loan.spans, (std::vector<Owner>{kNormOwner}));
  EXPECT_EQ(rewrites.loans[0].loan.rewrite, "pass");
  EXPECT_EQ(rewrites.fused, 1);
}

TEST(ClassifyRewritesTest, MadeNodeTakingOverItsOwnNodesCarriesNoSpans) {
  // Check that the same fusion inside one owner lends nothing.
  PassGraph before =
      Graph({{kConv, kConvOwner, {1, 7}, {2}}, {kBatchNorm, kConvOwner, {2, 8}, {3}}, {kRelu, kNormOwner, {3}, {4}}},
            {4}, {1, 7, 8});
  PassGraph after = Graph({{kConv, kConvOwner, {1, 10}, {11}}, {kRelu, kNormOwner, {11}, {4}, 1, 2}}, {4}, {1, 10});
  PassRewrites rewrites = Classify(before, after);
  EXPECT_TRUE(rewrites.loans.empty());
  EXPECT_EQ(rewrites.fused, 0);
}

TEST(ClassifyRewritesTest, MadeNodeReadingWhatAnEarlierOwnersNodeReadTakesItOverToo) {
  // Check that two Reshapes of two owners collapsed into one made under the later's owner, reading what the
  // earlier read, spans the earlier's owner (it took over both).
  PassGraph before = Graph(
      {{kTranspose, kToLast, {1}, {2}}, {kTranspose, kToFirst, {2}, {3}}, {kMul, kToFirst, {3, 9}, {4}}}, {4}, {1, 9});
  PassGraph after = Graph({{kTranspose, kToFirst, {1}, {5}}, {kMul, kToFirst, {5, 9}, {4}, 1, 2}}, {4}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kToFirst);
  EXPECT_EQ(rewrites.loans[0].loan.spans, (std::vector<Owner>{kToLast}));
}

TEST(ClassifyRewritesTest, MadeNodeReadingOnlyItsOwnNodesInputTakesOverNothingUpstream) {
  // Check that a node made from the later Transpose, reading the later's own input, does not take over the
  // earlier owner's node (which another reader keeps reading).
  PassGraph before = Graph({{kTranspose, kToLast, {1}, {2}},
                            {kTranspose, kToFirst, {2}, {3}},
                            {kMul, kToFirst, {3, 9}, {4}},
                            {kAdd, kToLast, {2, 2}, {6}}},
                           {4, 6}, {1, 9});
  PassGraph after = Graph({{kTranspose, kToLast, {1}, {2}, 1, 0},
                           {kTranspose, kToFirst, {2}, {5}},
                           {kMul, kToFirst, {5, 9}, {4}, 1, 2},
                           {kAdd, kToLast, {2, 2}, {6}, 1, 3}},
                          {4, 6}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  EXPECT_TRUE(rewrites.loans.empty());
}

TEST(ClassifyRewritesTest, ReaderOfANewInitializerRecordsTheOwnersFolded) {
  // Check that nodes whose reader now reads a new graph input (an initializer) give a folded record naming it.
  PassGraph before =
      Graph({{kConstant, kToLast, {}, {2}}, {kTranspose, kToLast, {2}, {3}}, {kMul, kToFirst, {3, 1}, {4}}}, {4}, {1});
  PassGraph after = Graph({{kMul, kToFirst, {20, 1}, {4}, 1, 2}}, {4}, {1, 20});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.records.size(), 1u);
  EXPECT_EQ(rewrites.records[0].kind, OwnerRewrite::Kind::kFolded);
  EXPECT_EQ(rewrites.records[0].owners, (std::vector<Owner>{kToLast}));
  EXPECT_EQ(rewrites.records[0].initializer, 20u);
}

TEST(ClassifyRewritesTest, GroupFoldedIntoANewConstantLendsItFoldedFrom) {
  // Check that a new constant read in place of a group's value is lent the group's owners as folded_from.
  PassGraph before =
      Graph({{kConstant, kToLast, {}, {2}}, {kTranspose, kToLast, {2}, {3}}, {kMul, kToFirst, {3, 1}, {4}}}, {4}, {1});
  PassGraph after = Graph({{kConstant, kNoOwner, {}, {20}}, {kMul, kToFirst, {20, 1}, {4}, 1, 2}}, {4}, {1});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].node, 0u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kToLast);
  EXPECT_EQ(rewrites.loans[0].loan.folded_from, (std::vector<Owner>{kToLast}));
  EXPECT_TRUE(rewrites.records.empty());
}

TEST(ClassifyRewritesTest, FoldOfALentNodeListsItsOwnerOnceNotItsLoansOwners) {
  // Check that a group holding a lent node (a computation CSE kept for many calls) folded into a new constant and
  // into an initializer lists the lent owner once, standing for its loan, rather than a copy of every owner the loan
  // lists: a deep decoder folds such a node into each layer's constants. The constant records whose node it is.
  constexpr Owner kShared = 9;
  OwnerLoan shared{kConvOwner, {}, {kNormOwner}, "", {kToLast, kToFirst}};
  LoanLookup loans = [&](Owner owner) { return owner == kShared ? &shared : nullptr; };
  PassGraph before =
      Graph({{kConstant, kShared, {}, {2}}, {kTranspose, kToLast, {2}, {3}}, {kMul, kToFirst, {3, 1}, {4}}}, {4}, {1});
  PassGraph to_constant = Graph({{kConstant, kNoOwner, {}, {20}}, {kMul, kToFirst, {20, 1}, {4}, 1, 2}}, {4}, {1});
  PassRewrites folded = Classify(before, to_constant, loans);
  ASSERT_EQ(folded.loans.size(), 1u);
  EXPECT_EQ(folded.loans[0].loan.recorded, kConvOwner);
  EXPECT_EQ(folded.loans[0].loan.folded_from, (std::vector<Owner>{kShared, kToLast}));
  PassGraph to_initializer = Graph({{kMul, kToFirst, {20, 1}, {4}, 1, 2}}, {4}, {1, 20});
  PassRewrites recorded = Classify(before, to_initializer, loans);
  ASSERT_EQ(recorded.records.size(), 1u);
  EXPECT_EQ(recorded.records[0].kind, OwnerRewrite::Kind::kFolded);
  EXPECT_EQ(recorded.records[0].owners, (std::vector<Owner>{kShared, kToLast}));
}

TEST(ClassifyRewritesTest, NodeMergedIntoAnEqualNodeOfAnotherOwnerIsShared) {
  // Check that a node removed for an equal older node of another owner (CSE) shares that node with its owner.
  PassGraph before =
      Graph({{kRelu, kToLast, {1}, {2}}, {kRelu, kToFirst, {1}, {3}}, {kAdd, kToFirst, {2, 3}, {4}}}, {4}, {1});
  PassGraph after = Graph({{kRelu, kToLast, {1}, {2}, 1, 0}, {kAdd, kToFirst, {2, 2}, {4}, 1, 2}}, {4}, {1});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.shares.size(), 1u);
  EXPECT_EQ(rewrites.shares[0].node, 0u);
  EXPECT_EQ(rewrites.shares[0].with, kToFirst);
  EXPECT_TRUE(rewrites.records.empty());
}

TEST(ClassifyRewritesTest, ChainMergedIntoAnEqualChainSharesEveryKeptNodeOfIt) {
  // Check that when a chain of another owner is merged into an equal older chain (CSE), every node of the kept
  // chain the removed one paired with is shared with its owner, not only the node its reader reads now.
  PassGraph before = Graph({{kRelu, kToLast, {1}, {2}},
                            {kMul, kToLast, {2, 9}, {3}},
                            {kRelu, kToFirst, {1}, {4}},
                            {kMul, kToFirst, {4, 9}, {5}},
                            {kAdd, kToFirst, {3, 5}, {6}}},
                           {6}, {1, 9});
  PassGraph after =
      Graph({{kRelu, kToLast, {1}, {2}, 1, 0}, {kMul, kToLast, {2, 9}, {3}, 1, 1}, {kAdd, kToFirst, {3, 3}, {6}, 1, 4}},
            {6}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  std::vector<uint32_t> shared;
  for (const PassRewrites::Shared& share : rewrites.shares) {
    EXPECT_EQ(share.with, kToFirst);
    shared.push_back(share.node);
  }
  std::sort(shared.begin(), shared.end());
  EXPECT_EQ(shared, (std::vector<uint32_t>{0, 1}));
}

TEST(ClassifyRewritesTest, NodeMergedIntoAnEqualNodeOfItsOwnOwnerIsSharedWithItself) {
  // Check that inside one owner the share names that owner (the lender drops a share with a node's own record).
  PassGraph before =
      Graph({{kRelu, kToLast, {1}, {2}}, {kRelu, kToLast, {1}, {3}}, {kAdd, kToLast, {2, 3}, {4}}}, {4}, {1});
  PassGraph after = Graph({{kRelu, kToLast, {1}, {2}, 1, 0}, {kAdd, kToLast, {2, 2}, {4}, 1, 2}}, {4}, {1});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.shares.size(), 1u);
  EXPECT_EQ(rewrites.shares[0].with, kToLast);
}

TEST(ClassifyRewritesTest, ReaderRewiredPastAKeptTransposeIsRecordedRewired) {
  // Check that a reader rewired to read past a Transpose pair, one of which stays for another reader, is
  // recorded rewired with the owners of the value's maker and readers before.
  PassGraph before = Graph({{kRelu, kToLast, {1}, {2}},
                            {kTranspose, kToLast, {2}, {3}},
                            {kTranspose, kToFirst, {3}, {4}},
                            {kMul, kToFirst, {4, 9}, {5}},
                            {kAdd, kToLast, {3, 3}, {6}}},
                           {5, 6}, {1, 9});
  PassGraph after = Graph({{kRelu, kToLast, {1}, {2}, 1, 0},
                           {kTranspose, kToLast, {2}, {3}, 1, 1},
                           {kMul, kToFirst, {2, 9}, {5}, 1, 3},
                           {kAdd, kToLast, {3, 3}, {6}, 1, 4}},
                          {5, 6}, {1, 9});
  PassRewrites rewrites = Classify(before, after);
  ASSERT_EQ(rewrites.records.size(), 1u);
  const OwnerRewrite& record = rewrites.records[0];
  EXPECT_EQ(record.kind, OwnerRewrite::Kind::kRewired);
  EXPECT_EQ(record.reader, kToFirst);
  EXPECT_EQ(record.replaced, kToFirst);
  EXPECT_EQ(record.value_owners, (std::vector<Owner>{kToLast, kToLast}));  // its maker, and the Transpose reading it
}

TEST(ClassifyRewritesTest, ExistingLoanGrowsWithoutListingAnOwnerTwice) {
  // Check that a node already lent spans keeps its loan and gains only the owners it does not carry: the loan's
  // own owner stands for what it carries.
  constexpr Owner kLent = 5, kOther = 4;
  PassGraph before = Graph(
      {{kConv, kLent, {1, 7}, {2}}, {kBatchNorm, kOther, {2, 8}, {3}}, {kRelu, kNormOwner, {3}, {4}}}, {4}, {1, 7, 8});
  PassGraph after = Graph({{kConv, kLent, {1, 10}, {11}}, {kRelu, kNormOwner, {11}, {4}, 1, 2}}, {4}, {1, 10});
  OwnerLoan existing{kConvOwner, {kNormOwner}, {}, "earlier", {}};
  PassRewrites rewrites = Classify(before, after, [&](Owner owner) { return owner == kLent ? &existing : nullptr; });
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kConvOwner);
  EXPECT_EQ(rewrites.loans[0].loan.spans, (std::vector<Owner>{kNormOwner, kOther}));
  EXPECT_EQ(rewrites.loans[0].loan.rewrite, "earlier");
}

TEST(ClassifyRewritesTest, LoanCarryingEveryOwnerAbsorbedGrowsNothing) {
  // Check that absorbing nodes whose owners the loan already carries lends nothing new.
  constexpr Owner kLent = 5;
  PassGraph before =
      Graph({{kConv, kLent, {1, 7}, {2}}, {kBatchNorm, kNormOwner, {2, 8}, {3}}, {kRelu, kNormOwner, {3}, {4}}}, {4},
            {1, 7, 8});
  PassGraph after = Graph({{kConv, kLent, {1, 10}, {11}}, {kRelu, kNormOwner, {11}, {4}, 1, 2}}, {4}, {1, 10});
  OwnerLoan existing{kConvOwner, {kNormOwner}, {}, "earlier", {}};
  PassRewrites rewrites = Classify(before, after, [&](Owner owner) { return owner == kLent ? &existing : nullptr; });
  EXPECT_TRUE(rewrites.loans.empty());
}

constexpr Owner kMerged = 5, kOtherCall = 4;

// A Conv CSE merged for two calls (its owner kMerged's loan is recorded as kConvOwner, shared with kOtherCall)
// and a BatchNorm owned by `norm_owner`, fused by a pass into one Conv.
PassRewrites FuseSharedConvWithNormOf(Owner norm_owner) {
  PassGraph before =
      Graph({{kConv, kMerged, {1, 7}, {2}}, {kBatchNorm, norm_owner, {2, 8}, {3}}, {kRelu, kNormOwner, {3}, {4}}}, {4},
            {1, 7, 8});
  PassGraph after = Graph({{kConv, kConvOwner, {1, 10}, {11}}, {kRelu, kNormOwner, {11}, {4}, 1, 2}}, {4}, {1, 10});
  OwnerLoan merged{kConvOwner, {}, {}, "", {kOtherCall}};
  return Classify(before, after, [&](Owner owner) { return owner == kMerged ? &merged : nullptr; });
}

TEST(ClassifyRewritesTest, FusionOfNodesAllSharedWithAnOwnerStaysSharedWithIt) {
  // Check that nodes CSE merged for two calls, fused by a later pass into one node, make a node shared with
  // that call, not one spanning it: the fused node is still one computation both calls made (torch's
  // preprocess fusing a shared split with its unpacks).
  PassRewrites rewrites = FuseSharedConvWithNormOf(kMerged);
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kConvOwner);
  EXPECT_TRUE(rewrites.loans[0].loan.spans.empty());
  EXPECT_EQ(rewrites.loans[0].loan.shared_with, (std::vector<Owner>{kOtherCall}));
  EXPECT_EQ(rewrites.fused, 0);
}

TEST(ClassifyRewritesTest, FusionOfASharedNodeWithAnotherCallsNodeSpansBoth) {
  // Check that a node shared with a call, fused with a node only a third call computed, spans both: neither
  // computed the fused node on its own, and the value between them is gone.
  PassRewrites rewrites = FuseSharedConvWithNormOf(kNormOwner);
  ASSERT_EQ(rewrites.loans.size(), 1u);
  EXPECT_EQ(rewrites.loans[0].loan.recorded, kConvOwner);
  std::vector<Owner> spans = rewrites.loans[0].loan.spans;
  std::sort(spans.begin(), spans.end());
  EXPECT_EQ(spans, (std::vector<Owner>{kNormOwner, kOtherCall}));
  EXPECT_TRUE(rewrites.loans[0].loan.shared_with.empty());
  EXPECT_EQ(rewrites.fused, 1);
}

}  // namespace
}  // namespace hiertag
