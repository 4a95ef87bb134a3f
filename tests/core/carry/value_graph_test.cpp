// Tests of ValueGraph (core/carry/value_graph.h): what each node reads and at
// which input, weights left out, the outputs counted as used, and descent.
// The Python tests check descent against the transitive closure on random
// graphs (tests/e2e/test_carry.py); these pin the tables' own rules.
#include "hiertag/core/carry/value_graph.h"

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "../../tool/model_builder.h"

namespace hiertag {
namespace {

using tooltest::GraphSpec;
using tooltest::ModelSpec;
using tooltest::Node;

// x, y -> relu(x) = a; split(a) = (b, unused); Mul(b, w) = m; Identity(w) = wi
// (a weight node); If(cond = y) whose body reads a and m; Add(m, "", wi) with an
// omitted optional input = z (the output).
ValueGraph Example() {
  ModelSpec model;
  model.tagged = false;
  model.graph.inputs = {"x", "y"};
  model.graph.outputs = {"z", "i"};
  model.graph.Initializer("w", {2});
  GraphSpec body;
  body.outputs = {"o"};
  body.Add(Node("inner", "Add").In({"a", "m"}).Out({"o"}));
  model.graph.Add(Node("relu", "Relu").In({"x"}).Out({"a"}))
      .Add(Node("split", "Split").In({"a"}).Out({"b", "unused"}))
      .Add(Node("mul", "Mul").In({"b", "w"}).Out({"m"}))
      .Add(Node("identity", "Identity").In({"w"}).Out({"wi"}))
      .Add(Node("if", "If").In({"y"}).Out({"i"}).Body(body))
      .Add(Node("add", "Add").In({"m", "", "wi"}).Out({"z"}));
  std::string error;
  std::optional<OnnxModel> parsed = OnnxModel::Parse(model.Bytes(), &error);
  EXPECT_TRUE(parsed) << error;
  return ValueGraph(*parsed);
}

std::vector<std::string> Names(const ValueGraph& graph, std::span<const int> ids) {
  std::vector<std::string> names;
  for (int id : ids) names.emplace_back(graph.Name(id));
  return names;
}

std::vector<std::pair<int, int>> ConsumersOf(const ValueGraph& graph, const std::string& name) {
  std::vector<std::pair<int, int>> found;
  for (const ValueGraph::Consumer& consumer : graph.Consumers(graph.Id(name))) {
    found.emplace_back(consumer.node, consumer.position);
  }
  return found;
}

TEST(ValueGraphTest, ReadsLeaveWeightsOutAndCountABodysOuterReads) {
  ValueGraph graph = Example();
  ASSERT_EQ(graph.node_count(), 6);
  EXPECT_EQ(Names(graph, graph.Reads(2)), (std::vector<std::string>{"b"}));            // w is a weight
  EXPECT_EQ(Names(graph, graph.Reads(3)), (std::vector<std::string>{}));               // Identity(w): a weight node
  EXPECT_EQ(Names(graph, graph.Reads(4)), (std::vector<std::string>{"y", "a", "m"}));  // the body's outer reads
  EXPECT_EQ(Names(graph, graph.Reads(5)), (std::vector<std::string>{"m"}));            // wi is a weight
  EXPECT_TRUE(graph.IsWeight(graph.Id("w")) && graph.IsInitializer(graph.Id("w")));
  EXPECT_TRUE(graph.IsWeight(graph.Id("wi")) && !graph.IsInitializer(graph.Id("wi")));
  EXPECT_FALSE(graph.IsWeight(graph.Id("m")));
}

TEST(ValueGraphTest, ConsumersNameTheInputPositionOrNoneForABodysRead) {
  ValueGraph graph = Example();
  // m: Mul's output, read by the If's body (no position) and by Add at input 0.
  EXPECT_EQ(ConsumersOf(graph, "m"), (std::vector<std::pair<int, int>>{{4, ValueGraph::kNoPosition}, {5, 0}}));
  // wi: at input 2, past the omitted optional input 1; weights have consumers too.
  EXPECT_EQ(ConsumersOf(graph, "wi"), (std::vector<std::pair<int, int>>{{5, 2}}));
  EXPECT_EQ(ConsumersOf(graph, "w"), (std::vector<std::pair<int, int>>{{2, 1}, {3, 0}}));
  EXPECT_EQ(graph.Producer(graph.Id("m")), 2);
  EXPECT_EQ(graph.Producer(graph.Id("x")), ValueGraph::kNone);
  EXPECT_EQ(graph.Id("nowhere"), ValueGraph::kNone);
}

TEST(ValueGraphTest, UsedOutputsAreThoseReadOrHandedOutElseAll) {
  ValueGraph graph = Example();
  EXPECT_EQ(Names(graph, graph.UsedOutputs(1)), (std::vector<std::string>{"b"}));
  EXPECT_EQ(Names(graph, graph.UsedOutputs(4)), (std::vector<std::string>{"i"}));  // a graph output
  EXPECT_EQ(Names(graph, graph.Outputs(1)), (std::vector<std::string>{"b", "unused"}));
  EXPECT_TRUE(graph.IsValue(graph.Id("unused")) && graph.IsValue(graph.Id("w")) && graph.IsValue(graph.Id("x")));
}

TEST(ValueGraphTest, DescentFollowsReadsAndMakersButNoWeights) {
  ValueGraph graph = Example();
  EXPECT_TRUE(graph.Descends(5, graph.Id("x")));   // add <- mul <- split <- relu <- x
  EXPECT_FALSE(graph.Descends(5, graph.Id("y")));  // only the If reads y
  EXPECT_TRUE(graph.Descends(4, graph.Id("a")));   // through its body
  EXPECT_TRUE(graph.Descends(1, graph.Id("b")));   // a node descends from what it makes
  EXPECT_FALSE(graph.Descends(5, graph.Id("w")));  // weights carry no descent
  EXPECT_FALSE(graph.Known(graph.Id("w")));
  EXPECT_FALSE(graph.Descends(5, graph.Id("nowhere")));
  EXPECT_EQ(graph.Descending({0, 1, 2, 3, 4, 5}, {graph.Id("b")}), (std::set<int>{1, 2, 4, 5}));
  EXPECT_EQ(graph.Descending({0, 3, 5}, {graph.Id("y"), graph.Id("x")}), (std::set<int>{0, 5}));
  EXPECT_EQ(graph.Between(graph.Id("b"), 5), (std::set<int>{1, 2, 5}));
  EXPECT_EQ(graph.Between(graph.Id("x"), 4), (std::set<int>{0, 1, 2, 4}));
}

}  // namespace
}  // namespace hiertag
