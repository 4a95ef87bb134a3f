// Tests of VisitNodesAndReturns: the prefetching walk visits what a plain
// pre-order walk visits, in its order, whatever the length of each block
// (shorter and longer than the walk's look-ahead), and stops where told;
// given the order an earlier walk met the nodes in, it visits the same, even
// when that order is stale and lists nodes freed since.
#include "hiertag/passes/graph_walk.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <vector>

#include "graph_test_support.h"

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;

// The plain walk: every node, its blocks' nodes right after it, each block's
// return last.
void PlainWalk(Block* block, std::vector<Node*>* nodes) {
  for (Node* node : block->nodes()) {
    nodes->push_back(node);
    for (Block* nested : node->blocks()) PlainWalk(nested, nodes);
  }
  nodes->push_back(block->return_node());
}

// A graph of `length` chained nodes, relus but the middle one (if any), an If
// whose branches hold `length` - 1 and `length` relus.
std::string ChainIr(int length) {
  std::string ir = "graph(%x : Tensor, %c : bool):\n";
  std::string last = "%x";
  auto relus = [](const std::string& from, int count, const std::string& prefix, const std::string& indent,
                  std::string* out) {
    std::string value = from;
    for (int i = 0; i < count; ++i) {
      std::string next = "%" + prefix + std::to_string(i);
      *out += indent + next + " : Tensor = aten::relu(" + value + ")\n";
      value = next;
    }
    return value;
  };
  last = relus(last, length / 2, "a", "  ", &ir);
  if (length > 0) {
    ir += "  %branch : Tensor = prim::If(%c)\n    block0():\n";
    std::string then_value = relus(last, length - 1, "t", "      ", &ir);
    ir += "      -> (" + then_value + ")\n    block1():\n";
    std::string else_value = relus(last, length, "e", "      ", &ir);
    ir += "      -> (" + else_value + ")\n";
    last = "%branch";
  }
  last = relus(last, std::max(0, length - length / 2 - 1), "b", "  ", &ir);
  ir += "  return (" + last + ")\n";
  return ir;
}

class GraphWalkTest : public testing::GraphTest {};

TEST_F(GraphWalkTest, VisitsWhatThePlainWalkVisitsInItsOrder) {
  for (int length = 0; length <= 9; ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    Parse(ChainIr(length));
    ASSERT_EQ(std::distance(graph_->nodes().begin(), graph_->nodes().end()), length);
    std::vector<Node*> expected;
    PlainWalk(graph_->block(), &expected);
    std::vector<Node*> visited;
    CollectNodesAndReturns(graph_->block(), &visited);
    EXPECT_EQ(visited, expected);
  }
}

TEST_F(GraphWalkTest, StopsAtTheFirstNodeVisitRefuses) {
  Parse(ChainIr(7));
  std::vector<Node*> expected;
  PlainWalk(graph_->block(), &expected);
  for (size_t stop = 0; stop < expected.size(); ++stop) {
    std::vector<Node*> visited;
    bool finished = VisitNodesAndReturns(graph_->block(), [&](Node* node) {
      visited.push_back(node);
      return node != expected[stop];
    });
    EXPECT_FALSE(finished);
    EXPECT_EQ(visited, std::vector<Node*>(expected.begin(), expected.begin() + stop + 1));
  }
}

TEST_F(GraphWalkTest, TheExpectedOrderChangesNothingItVisitsEvenWhenStale) {
  for (int length = 0; length <= 20; ++length) {
    SCOPED_TRACE("length " + std::to_string(length));
    Parse(ChainIr(length));
    std::vector<Node*> before;
    PlainWalk(graph_->block(), &before);
    // The graph changes after `before` was noted: every other relu of the
    // outer block goes (its nodes are freed), and a node is added first.
    std::vector<Node*> outer(graph_->nodes().begin(), graph_->nodes().end());
    for (size_t i = 0; i < outer.size(); i += 2) {
      if (outer[i]->kind() != c10::aten::relu) continue;
      outer[i]->output()->replaceAllUsesWith(outer[i]->input());
      outer[i]->destroy();
    }
    graph_->prependNode(graph_->create(c10::prim::Constant));
    std::vector<Node*> expected;
    PlainWalk(graph_->block(), &expected);
    std::vector<Node*> reversed(before.rbegin(), before.rend());
    std::vector<Node*> longer = before;
    longer.insert(longer.end(), before.begin(), before.end());
    for (const std::vector<Node*>& order :
         {before, reversed, longer, std::vector<Node*>(before.begin(), before.begin() + before.size() / 2)}) {
      std::vector<Node*> visited;
      VisitNodesAndReturns(
          graph_->block(),
          [&visited](Node* node) {
            visited.push_back(node);
            return true;
          },
          order);
      EXPECT_EQ(visited, expected);
    }
  }
}

}  // namespace
}  // namespace hiertag
