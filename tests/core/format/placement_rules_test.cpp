// Tests of PlaceByRules: each rule, the waiting order, and the fallbacks.
#include "hiertag/core/format/placement_rules.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <utility>
#include <vector>

#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"

namespace hiertag {
namespace {

// /Net (0) with /Net/Enc (1) holding /Net/Enc/A (2) and /Net/Enc/B (3), and /Net/Dec (4).
class PlacementRulesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    table_.Add("", "m.Net", "Net", true);
    table_.Add("enc", "m.Enc", "Enc", true);
    table_.Add("enc.a", "m.A", "A", true);
    table_.Add("enc.b", "m.B", "B", true);
    table_.Add("dec", "m.Dec", "Dec", true);
    table_.Finalize();
    call_tags_ = std::make_unique<CallTags>(table_);
    enc_ = call_tags_->Call(CallTags::kRoot, 1);
    a_ = call_tags_->Call(enc_, 2);
    b_ = call_tags_->Call(enc_, 3);
    dec_ = call_tags_->Call(CallTags::kRoot, 4);
  }

  std::vector<Placement> Place(const std::vector<UnplacedNode>& nodes) { return PlaceByRules(nodes, *call_tags_); }

  ModuleTable table_;
  std::unique_ptr<CallTags> call_tags_;
  int enc_ = -1, a_ = -1, b_ = -1, dec_ = -1;
};

void ExpectPlaced(const Placement& placement, int tag, TagRule rule) {
  EXPECT_EQ(placement.tag, tag);
  EXPECT_STREQ(TagRuleName(placement.rule), TagRuleName(rule));
}

TEST_F(PlacementRulesTest, AConstantGoesToTheCommonAncestorOfItsReaders) {
  auto placed = Place({{std::nullopt, false, {a_, b_}}});
  ASSERT_EQ(placed.size(), 1u);
  ExpectPlaced(placed[0], enc_, TagRule::kConsumers);
}

TEST_F(PlacementRulesTest, ANodeWithInputsCountsProducersAndReaders) {
  ExpectPlaced(Place({{std::nullopt, true, {a_, a_}}})[0], a_, TagRule::kNeighbours);
  ExpectPlaced(Place({{std::nullopt, true, {a_, dec_}}})[0], CallTags::kRoot, TagRule::kNeighbours);
}

TEST_F(PlacementRulesTest, ANestedNodeTakesItsHoldersTagEvenWhenTheHolderIsPlacedLater) {
  // Node 0 sits in the body of node 1, which the sweep places after it.
  auto placed = Place({{Unplaced(1), false, {dec_}}, {std::nullopt, true, {b_}}});
  ExpectPlaced(placed[1], b_, TagRule::kNeighbours);
  ExpectPlaced(placed[0], b_, TagRule::kEnclosing);
  ExpectPlaced(Place({{a_, false, {dec_}}})[0], a_, TagRule::kEnclosing);
}

TEST_F(PlacementRulesTest, ANodeWaitsForAnUnplacedNeighbour) {
  // Node 0 reads node 1's output (placed in the same sweep, after it) and feeds B:
  // it waits a sweep and then counts node 1's tag, A, instead of settling on B alone.
  auto placed = Place({{std::nullopt, true, {b_, Unplaced(1)}}, {std::nullopt, true, {a_}}});
  ExpectPlaced(placed[1], a_, TagRule::kNeighbours);
  ExpectPlaced(placed[0], enc_, TagRule::kNeighbours);
}

TEST_F(PlacementRulesTest, ACycleOfWaitingNodesIsBrokenAtTheFirstWithAPlacedNeighbour) {
  // The example of the header: nodes 0 and 1 wait for each other.
  auto placed = Place({{std::nullopt, false, {Unplaced(1), b_}}, {std::nullopt, true, {dec_, Unplaced(0)}}});
  ExpectPlaced(placed[0], b_, TagRule::kConsumers);
  ExpectPlaced(placed[1], CallTags::kRoot, TagRule::kNeighbours);
  // Node 0 has no placed neighbour: node 1 is the first that can settle partially.
  placed = Place({{std::nullopt, true, {Unplaced(1)}}, {std::nullopt, true, {Unplaced(0), a_}}});
  ExpectPlaced(placed[1], a_, TagRule::kNeighbours);
  ExpectPlaced(placed[0], a_, TagRule::kNeighbours);
}

TEST_F(PlacementRulesTest, ANodeNothingPlacesIsTheRoots) {
  auto placed = Place({{std::nullopt, true, {}}, {std::nullopt, false, {Unplaced(2)}}, {Unplaced(1), false, {}}});
  for (const Placement& placement : placed) ExpectPlaced(placement, CallTags::kRoot, TagRule::kRoot);
}

TEST_F(PlacementRulesTest, AReferenceOutsideTheListIsRefused) {
  EXPECT_THROW(Place({{std::nullopt, true, {Unplaced(1)}}}), std::out_of_range);
  EXPECT_THROW(Place({{Unplaced(3), false, {}}}), std::out_of_range);
  EXPECT_TRUE(Place({}).empty());
}

// Ids of a caller's own (carry's calls): 0-3 are calls of one tag, 10 their
// parent, 20 the root; two calls meet in the parent, anything else at the root.
int MeetOfCalls(int a, int b) { return a == b ? a : (a <= 10 && b <= 10) ? 10 : 20; }

TEST(PlaceByRulesOverOwnIdsTest, TheCallersMeetAndRootPlaceTheNodes) {
  std::vector<std::pair<int, int>> asked;
  auto meet = [&asked](int a, int b) {
    asked.emplace_back(a, b);
    return MeetOfCalls(a, b);
  };
  auto placed = PlaceByRules(
      {{std::nullopt, true, {1, 2}}, {std::nullopt, false, {3, 3}}, {std::nullopt, true, {}}, {Unplaced(0), false, {}}},
      20, meet);
  ExpectPlaced(placed[0], 10, TagRule::kNeighbours);
  ExpectPlaced(placed[1], 3, TagRule::kConsumers);
  ExpectPlaced(placed[2], 20, TagRule::kRoot);
  ExpectPlaced(placed[3], 10, TagRule::kEnclosing);
  EXPECT_EQ(asked, (std::vector<std::pair<int, int>>{{1, 2}, {3, 3}}));
}

TEST(PlaceByRulesOverOwnIdsTest, WhatTheMeetThrowsPassesThrough) {
  auto refuse = [](int, int) -> int { throw std::invalid_argument("no meet"); };
  EXPECT_THROW(PlaceByRules({{std::nullopt, true, {1, 2}}}, 20, refuse), std::invalid_argument);
  // A single neighbour needs no meet.
  ExpectPlaced(PlaceByRules({{std::nullopt, true, {2}}}, 20, refuse)[0], 2, TagRule::kNeighbours);
}

TEST(CallsOfReadersTest, ANodeJoinsTheCallOfTheLastReaderWithItsTag) {
  // Tag 3 has several calls: node 0 is read by call 1 of tag 3, then call 2 of
  // tag 3 and call 0 of tag 4; node 1 by tag 4 alone.
  std::vector<int> calls = CallsOfReaders({{3, 0, {{3, 1}, {3, 2}, {4, 0}}}, {3, 1, {{4, 5}}}});
  EXPECT_EQ(calls, (std::vector<int>{2, 1}));
}

TEST(CallsOfReadersTest, AListedReaderCountsWithTheCallItWasGivenWhenEarlier) {
  // Node 1 reads nothing of its tag; node 0 reads node 1 (later: its own call 4);
  // node 2 reads node 0 (earlier: the call node 0 joined, 7).
  std::vector<int> calls = CallsOfReaders({{3, 0, {{Unplaced(1), 0}, {3, 7}}}, {3, 4, {}}, {3, 0, {{Unplaced(0), 0}}}});
  EXPECT_EQ(calls, (std::vector<int>{7, 4, 7}));
  calls = CallsOfReaders({{3, 0, {{Unplaced(1), 0}}}, {3, 4, {}}});
  EXPECT_EQ(calls, (std::vector<int>{4, 4}));
  // A reader of another tag leaves the call alone.
  EXPECT_EQ(CallsOfReaders({{3, 1, {{Unplaced(1), 0}}}, {5, 9, {}}}), (std::vector<int>{1, 9}));
}

TEST(CallsOfReadersTest, AReferenceOutsideTheListIsRefused) {
  EXPECT_THROW(CallsOfReaders({{3, 0, {{Unplaced(1), 0}}}}), std::out_of_range);
  EXPECT_TRUE(CallsOfReaders({}).empty());
}

TEST(TagRuleNameTest, NamesEveryRule) {
  const char* names[] = {"recorded", "parameter-owner", "enclosing", "consumers", "neighbours", "root"};
  for (int rule = 0; rule < kTagRuleCount; ++rule) {
    EXPECT_STREQ(TagRuleName(static_cast<TagRule>(rule)), names[rule]);
  }
}

}  // namespace
}  // namespace hiertag
