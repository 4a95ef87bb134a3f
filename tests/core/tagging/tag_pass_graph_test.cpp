// Tests of TagPassGraph: a graph whose owners are recorded module calls (or
// loans of them), tagged by the call-tagging rules.
#include "hiertag/core/tagging/tag_pass_graph.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hiertag {
namespace {

// Net (root) with blocks.0 and blocks.1 (Block); blocks.0 holds a Linear (filtered) and an Expert.
class TagPassGraphTest : public ::testing::Test {
 protected:
  TagPassGraphTest() {
    modules_.Add("", "pkg.Net", "Net", true);                                        // 0
    modules_.Add("blocks.0", "pkg.Block", "Block", true);                            // 1
    modules_.Add("blocks.0.fc", "torch.nn.modules.linear.Linear", "Linear", false);  // 2
    modules_.Add("blocks.1", "pkg.Block", "Block", true);                            // 3
    modules_.Add("blocks.0.ff", "pkg.Expert", "Expert", true);                       // 4
    modules_.Finalize();
  }

  // Adds a node; the main graph's return is added by Tag().
  uint32_t Node(Owner owner, std::vector<ValueId> inputs, std::vector<ValueId> outputs,
                uint32_t holder = PassGraph::kMade) {
    PassGraph::Node node;
    node.owner = owner;
    node.kind = 1;
    std::vector<uint8_t> scalar(outputs.size(), 0);
    graph_.Add(node, inputs, outputs, scalar);
    holders_.push_back(holder);
    return static_cast<uint32_t>(graph_.size() - 1);
  }

  PassGraphTagging Tag(std::vector<ValueId> outputs, std::vector<ModuleCallRecord> calls,
                       std::vector<OwnerLoan> loans = {}, std::vector<PassRecord> records = {}) {
    PassGraph::Node ret;
    ret.is_return = true;
    graph_.Add(ret, outputs, {}, {});
    holders_.push_back(PassGraph::kMade);
    graph_.graph_inputs = {100, 200};  // a user input, then an initializer
    graph_.graph_input_scalar = {0, 0};
    call_tags_ = std::make_unique<CallTags>(modules_);
    TaggedGraph described{graph_, holders_, nested_inputs_, 1};
    return TagPassGraph(described, calls, loans, records, modules_, *call_tags_);
  }

  std::string TagOf(const PassGraphTagging& tagged, size_t k) { return call_tags_->Tag(tagged.tagging.nodes[k].tag); }

  ModuleTable modules_;
  PassGraph graph_;
  std::vector<uint32_t> holders_;
  std::vector<std::pair<ValueId, uint32_t>> nested_inputs_;
  std::unique_ptr<CallTags> call_tags_;
};

// Calls: 0 the root, 1 blocks.0, 2 its Linear, 3 blocks.1.
const std::vector<ModuleCallRecord> kCalls = {{0, -1}, {1, 0}, {2, 1}, {3, 0}};

TEST_F(TagPassGraphTest, EachNodeTakesItsCallsTag) {
  // Check that a node owned by a call takes that call's tag, and a filtered module's call is its caller's.
  Node(1, {100, 200}, {1});
  Node(2, {1}, {2});
  Node(3, {2}, {3});
  Node(0, {3}, {4});
  PassGraphTagging tagged = Tag({4}, kCalls);
  ASSERT_EQ(tagged.tagging.nodes.size(), 4u);
  EXPECT_EQ(TagOf(tagged, 0), "/Net/Block.0");
  EXPECT_EQ(TagOf(tagged, 1), "/Net/Block.0");  // the Linear adds no level
  EXPECT_EQ(TagOf(tagged, 2), "/Net/Block.1");
  EXPECT_EQ(TagOf(tagged, 3), "/Net");
  for (const TaggedNode& node : tagged.tagging.nodes) EXPECT_EQ(node.rule, TagRule::kRecorded);
}

TEST_F(TagPassGraphTest, NodeWithoutOwnerIsPlacedByItsNeighbours) {
  // Check that a node no call owns takes the common ancestor of its producer's and reader's tags, and a constant
  // its readers'.
  Node(kNoOwner, {}, {5});  // a constant read by blocks.0 only
  Node(1, {100, 5}, {1});
  Node(kNoOwner, {1}, {2});  // between blocks.0 and blocks.1
  Node(3, {2}, {3});
  PassGraphTagging tagged = Tag({3}, kCalls);
  EXPECT_EQ(TagOf(tagged, 0), "/Net/Block.0");
  EXPECT_EQ(tagged.tagging.nodes[0].rule, TagRule::kConsumers);
  EXPECT_EQ(TagOf(tagged, 2), "/Net");
  EXPECT_EQ(tagged.tagging.nodes[2].rule, TagRule::kNeighbours);
}

TEST_F(TagPassGraphTest, LoanWithSpansMovesTheNodeToTheCommonAncestor) {
  // Check that a node lent spans of another call goes to their common ancestor and lists both as spans.
  Node(4, {100}, {1});  // owner 4: loans[0]
  PassGraphTagging tagged = Tag({1}, kCalls, {OwnerLoan{1, {3}, {}, "pass", {}}});
  EXPECT_EQ(TagOf(tagged, 0), "/Net");
  ASSERT_EQ(tagged.tagging.nodes[0].spans().size(), 2u);
  EXPECT_EQ(tagged.tagging.nodes[0].rewrite(), "pass");
}

TEST_F(TagPassGraphTest, LoanSharedWithAnotherCallListsIt) {
  // Check that a node shared with another call keeps its own tag and lists the other.
  Node(4, {100}, {1});
  Node(3, {1}, {2});
  PassGraphTagging tagged = Tag({2}, kCalls, {OwnerLoan{1, {}, {}, "", {3}}});
  EXPECT_EQ(TagOf(tagged, 0), "/Net/Block.0");
  ASSERT_EQ(tagged.tagging.nodes[0].shared_with().size(), 1u);
  EXPECT_EQ(call_tags_->Tag(tagged.tagging.nodes[0].shared_with()[0].tag), "/Net/Block.1");
}

TEST_F(TagPassGraphTest, RemovedRecordOfTwoCallsIsKept) {
  // Check that a removed record naming two calls is kept as a rewrite naming both.
  Node(1, {100}, {1});
  Node(3, {1}, {2});
  OwnerRewrite removed;
  removed.kind = OwnerRewrite::Kind::kRemoved;
  removed.owners = {1, 3};
  PassGraphTagging tagged = Tag({2}, kCalls, {}, {{"pass", removed}});
  ASSERT_EQ(tagged.tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagged.tagging.rewrites[0].kind, RewriteKind::kRemoved);
  EXPECT_EQ(tagged.tagging.rewrites[0].refs.size(), 2u);
}

TEST_F(TagPassGraphTest, RemovedRecordOfOneCallIsDropped) {
  // Check that a removed record inside one call cuts no boundary: dropped.
  Node(1, {100}, {1});
  OwnerRewrite removed;
  removed.kind = OwnerRewrite::Kind::kRemoved;
  removed.owners = {1};
  PassGraphTagging tagged = Tag({1}, kCalls, {}, {{"pass", removed}});
  EXPECT_TRUE(tagged.tagging.rewrites.empty());
}

TEST_F(TagPassGraphTest, FoldOfALentNodeNamesTheCallsOfItsLoanThatLeftNoNode) {
  // Check that a constant and an initializer folded from a lent node (owner 4: a node CSE kept for blocks.0 and
  // blocks.1) refer to that loan once, and that the module table names them as what blocks.1, which left no node,
  // became; blocks.0, which kept nodes, lists nothing.
  Node(5, {}, {1});  // a constant, owner 5: loans[1], folded from owner 4
  Node(1, {100, 1, 200}, {2});
  OwnerRewrite folded;
  folded.kind = OwnerRewrite::Kind::kFolded;
  folded.owners = {4};
  folded.initializer = 200;
  PassGraphTagging tagged =
      Tag({2}, kCalls, {OwnerLoan{1, {}, {}, "", {3}}, OwnerLoan{1, {}, {4}, "", {}}}, {{"pass", folded}});
  const TaggedNode& constant = tagged.tagging.nodes[0];
  ASSERT_TRUE(constant.records);
  EXPECT_TRUE(constant.folded_from().empty());
  ASSERT_EQ(constant.records->folded_sources.size(), 1u);
  ASSERT_EQ(tagged.tagging.folded_sources.size(), 1u);  // one source, however many folds read it
  std::vector<std::string> tags;
  for (int tag : tagged.tagging.FoldedTags(constant.folded_from(), constant.records->folded_sources)) {
    tags.push_back(call_tags_->Tag(tag));
  }
  EXPECT_EQ(tags, (std::vector<std::string>{"/Net/Block.0", "/Net/Block.1"}));
  ASSERT_EQ(tagged.tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagged.tagging.rewrites[0].sources, constant.records->folded_sources);
  std::vector<ModelMetadataEntry> entries = DescribeModel(
      tagged.tagging, *call_tags_, modules_, [](size_t k) { return "n" + std::to_string(k); },
      [](size_t k) { return std::optional<std::string>("c" + std::to_string(k)); },
      [](uint64_t id) { return std::optional<std::string>("i" + std::to_string(id)); });
  std::string table;
  for (const ModelMetadataEntry& entry : entries) {
    if (entry.key == "hiertag.modules") table = entry.value;
  }
  EXPECT_NE(table.find("\"folded_into\":[\"c0\",\"i200\"]"), std::string::npos) << table;
  EXPECT_EQ(table.find("folded_into"), table.rfind("folded_into")) << table;  // blocks.0 kept nodes
}

TEST_F(TagPassGraphTest, ModuleCalledTwiceNumbersItsCalls) {
  // Check that two calls of one module from the root are numbered 0 and 1, and each node keeps its call.
  Node(1, {100}, {1});
  Node(2, {1}, {2});
  PassGraphTagging tagged = Tag({2}, {{0, -1}, {1, 0}, {1, 0}});
  ASSERT_EQ(tagged.tagging.CallCount(tagged.tagging.nodes[0].tag), 2);
  EXPECT_EQ(tagged.tagging.nodes[0].call, 0);
  EXPECT_EQ(tagged.tagging.nodes[1].call, 1);
}

TEST_F(TagPassGraphTest, ContainerNeverCalledIsMarkedNeverRan) {
  // Check that a module the root reaches past keeps its level in the call's tag and is marked never ran.
  Node(1, {100}, {1});  // blocks.0's Expert called straight from the root
  PassGraphTagging tagged = Tag({1}, {{0, -1}, {4, 0}});
  EXPECT_EQ(TagOf(tagged, 0), "/Net/Block.0/Expert");
  int container = call_tags_->Parent(tagged.tagging.nodes[0].tag);
  EXPECT_EQ(call_tags_->Tag(container), "/Net/Block.0");
  EXPECT_EQ(tagged.tagging.never_ran.count(container), 1u);
  EXPECT_EQ(tagged.tagging.never_ran.count(tagged.tagging.nodes[0].tag), 0u);
}

}  // namespace
}  // namespace hiertag
