// Tests of CallTags: call-tree tags on a module table, owned and foreign calls.
#include "hiertag/core/format/call_tags.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

// Module indices of the table below: an encoder layer that owns attn and ff
// but runs them inside its sublayers (Annotated Transformer), two Conv1D
// siblings (GPT-2), a block owning a second Attn, and a second layer.
constexpr int kNet = 0;
constexpr int kLayers = 1;
constexpr int kLayer0 = 2;
constexpr int kAttn0 = 3;
constexpr int kFf0 = 4;
constexpr int kSublayers0 = 5;
constexpr int kSublayer0 = 6;
constexpr int kSublayer1 = 7;
constexpr int kNorm0 = 8;
constexpr int kCAttn0 = 9;
constexpr int kCProj0 = 10;
constexpr int kBlock0 = 11;
constexpr int kBlockAttn0 = 12;
constexpr int kLayer1 = 13;
constexpr int kAttn1 = 14;

ModuleTable NetTable() {
  ModuleTable table;
  EXPECT_EQ(table.Add("", "pkg.Net", "Net", true), kNet);
  EXPECT_EQ(table.Add("layers", "torch.nn.modules.container.ModuleList", "ModuleList", false), kLayers);
  EXPECT_EQ(table.Add("layers.0", "pkg.Layer", "Layer", true), kLayer0);
  EXPECT_EQ(table.Add("layers.0.attn", "pkg.Attn", "Attn", true), kAttn0);
  EXPECT_EQ(table.Add("layers.0.ff", "pkg.FF", "FF", true), kFf0);
  EXPECT_EQ(table.Add("layers.0.sublayer", "torch.nn.modules.container.ModuleList", "ModuleList", false), kSublayers0);
  EXPECT_EQ(table.Add("layers.0.sublayer.0", "pkg.Sublayer", "Sublayer", true), kSublayer0);
  EXPECT_EQ(table.Add("layers.0.sublayer.1", "pkg.Sublayer", "Sublayer", true), kSublayer1);
  EXPECT_EQ(table.Add("layers.0.norm", "torch.nn.modules.normalization.LayerNorm", "LayerNorm", false), kNorm0);
  EXPECT_EQ(table.Add("layers.0.c_attn", "transformers.Conv1D", "Conv1D", true), kCAttn0);
  EXPECT_EQ(table.Add("layers.0.c_proj", "transformers.Conv1D", "Conv1D", true), kCProj0);
  EXPECT_EQ(table.Add("layers.0.block", "pkg.Block", "Block", true), kBlock0);
  EXPECT_EQ(table.Add("layers.0.block.attn", "pkg.Attn", "Attn", true), kBlockAttn0);
  EXPECT_EQ(table.Add("layers.1", "pkg.Layer", "Layer", true), kLayer1);
  EXPECT_EQ(table.Add("layers.1.attn", "pkg.Attn", "Attn", true), kAttn1);
  table.Finalize();
  return table;
}

void ExpectWellFormed(const std::string& tag) {
  std::string error;
  EXPECT_TRUE(ParseTag(tag, &error).has_value()) << tag << ": " << error;
}

class CallTagsTest : public ::testing::Test {
 protected:
  ModuleTable modules_ = NetTable();
  CallTags tags_{modules_};
};

TEST_F(CallTagsTest, OwnedCallsKeepModuleTableTags) {
  // Check that every tagged module called by its module-table tag parent gets its module-table tag.
  std::vector<int> call_of(modules_.size(), -1);
  call_of[kNet] = CallTags::kRoot;
  for (int module = 1; module < modules_.size(); ++module) {
    if (modules_.at(module).has_segment) call_of[module] = tags_.Call(call_of[modules_.TagParent(module)], module);
  }
  for (int module = 0; module < modules_.size(); ++module) {
    if (!modules_.at(module).has_segment) continue;
    EXPECT_EQ(tags_.Tag(call_of[module]), modules_.at(module).tag) << modules_.at(module).path;
    EXPECT_EQ(tags_.Module(call_of[module]), module) << modules_.at(module).path;
  }
  EXPECT_EQ(tags_.Tag(call_of[kCAttn0]), "/Net/Layer.0/Conv1D[c_attn]");
  EXPECT_EQ(tags_.Tag(call_of[kCProj0]), "/Net/Layer.0/Conv1D[c_proj]");
  EXPECT_EQ(tags_.Tag(call_of[kSublayer1]), "/Net/Layer.0/Sublayer.1");
  EXPECT_EQ(tags_.Tag(CallTags::kRoot), "/Net");
}

TEST_F(CallTagsTest, OwnedCallOfOneSiblingKeepsDisambiguatedSegment) {
  // Check that c_attn called alone still takes its module-table segment Conv1D[c_attn], not plain Conv1D.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int c_attn = tags_.Call(layer0, kCAttn0);
  EXPECT_EQ(tags_.Tag(c_attn), "/Net/Layer.0/Conv1D[c_attn]");
}

TEST_F(CallTagsTest, RootCallIsTheRoot) {
  // Check that calling the root module from the root gives the root tag, and a child a new tag under it.
  EXPECT_EQ(tags_.Call(CallTags::kRoot, kNet), CallTags::kRoot);
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  EXPECT_NE(layer0, CallTags::kRoot);
  EXPECT_EQ(tags_.Parent(layer0), CallTags::kRoot);
  EXPECT_EQ(tags_.Parent(CallTags::kRoot), -1);
}

TEST_F(CallTagsTest, CalleeOwnedByCallersOwnerGoesUnderItsCaller) {
  // Check that layers.0.attn run inside layers.0.sublayer.0 is tagged under that Sublayer, with a plain segment.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int sublayer0 = tags_.Call(layer0, kSublayer0);
  int attn = tags_.Call(sublayer0, kAttn0);
  EXPECT_EQ(tags_.Tag(attn), "/Net/Layer.0/Sublayer.0/Attn");
  EXPECT_EQ(tags_.Module(attn), kAttn0);
  EXPECT_EQ(tags_.Parent(attn), sublayer0);
}

TEST_F(CallTagsTest, InstanceCalledFromTwoCallersHasTwoTags) {
  // Check that one Attn instance run inside both sublayers gets one tag under each, both naming that instance.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int in_sublayer0 = tags_.Call(tags_.Call(layer0, kSublayer0), kAttn0);
  int in_sublayer1 = tags_.Call(tags_.Call(layer0, kSublayer1), kAttn0);
  EXPECT_NE(in_sublayer0, in_sublayer1);
  EXPECT_EQ(tags_.Tag(in_sublayer0), "/Net/Layer.0/Sublayer.0/Attn");
  EXPECT_EQ(tags_.Tag(in_sublayer1), "/Net/Layer.0/Sublayer.1/Attn");
  EXPECT_EQ(tags_.Module(in_sublayer0), kAttn0);
  EXPECT_EQ(tags_.Module(in_sublayer1), kAttn0);
}

TEST_F(CallTagsTest, InstanceCalledTwiceByOneCallerHasOneTag) {
  // Check that repeating a call from the same caller gives the same tag and adds none.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int first = tags_.Call(layer0, kAttn0);
  int size = tags_.size();
  EXPECT_EQ(tags_.Call(layer0, kAttn0), first);
  EXPECT_EQ(tags_.size(), size);
}

TEST_F(CallTagsTest, ForeignCalleeCollidingWithCallersChildIsQualifiedWithFullPath) {
  // Check that layers.0.attn called from Layer.1, which owns an Attn of its own, becomes Attn[~layers.0.attn].
  int layer1 = tags_.Call(CallTags::kRoot, kLayer1);
  int foreign = tags_.Call(layer1, kAttn0);
  int own = tags_.Call(layer1, kAttn1);
  EXPECT_EQ(tags_.Tag(foreign), "/Net/Layer.1/Attn[~layers.0.attn]");
  EXPECT_EQ(tags_.Tag(own), "/Net/Layer.1/Attn");
  ExpectWellFormed(tags_.Tag(foreign));
}

TEST_F(CallTagsTest, ForeignCalleeWithoutCollisionKeepsPlainSegment) {
  // Check that layers.0.ff called from Layer.1, which owns no FF, keeps the plain segment FF.
  int layer1 = tags_.Call(CallTags::kRoot, kLayer1);
  EXPECT_EQ(tags_.Tag(tags_.Call(layer1, kFf0)), "/Net/Layer.1/FF");
}

TEST_F(CallTagsTest, ForeignCalleeCollidingWithUncalledChildIsStillQualified) {
  // Check that the caller's own Attn counts as taken even when it is never called.
  int layer1 = tags_.Call(CallTags::kRoot, kLayer1);
  EXPECT_EQ(tags_.Tag(tags_.Call(layer1, kAttn0)), "/Net/Layer.1/Attn[~layers.0.attn]");
}

TEST_F(CallTagsTest, TwoForeignCalleesWithOnePlainSegmentAreBothQualified) {
  // Check that two Attn instances called from one Sublayer, neither owned by it, both take the ~path form.
  int sublayer0 = tags_.Call(tags_.Call(CallTags::kRoot, kLayer0), kSublayer0);
  int attn = tags_.Call(sublayer0, kAttn0);
  int block_attn = tags_.Call(sublayer0, kBlockAttn0);
  EXPECT_EQ(tags_.Tag(attn), "/Net/Layer.0/Sublayer.0/Attn[~layers.0.attn]");
  EXPECT_EQ(tags_.Tag(block_attn), "/Net/Layer.0/Sublayer.0/Attn[~layers.0.block.attn]");
}

TEST_F(CallTagsTest, DescendantCalledPastRanContainerIsQualifiedWithRelativePath) {
  // Check that block.attn called by Layer.0 itself (Block ran elsewhere) becomes Attn[block.attn].
  tags_.MarkRan(kNet);
  tags_.MarkRan(kLayer0);
  tags_.MarkRan(kBlock0);
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int block_attn = tags_.Call(layer0, kBlockAttn0);
  int attn = tags_.Call(layer0, kAttn0);
  EXPECT_EQ(tags_.Parent(block_attn), layer0);
  EXPECT_EQ(tags_.Tag(block_attn), "/Net/Layer.0/Attn[block.attn]");
  EXPECT_EQ(tags_.Tag(attn), "/Net/Layer.0/Attn");
  ExpectWellFormed(tags_.Tag(block_attn));
}

TEST_F(CallTagsTest, DescendantCalledPastNeverRunContainerKeepsContainerLevel) {
  // Check that block.attn called by Layer.0 while Block never ran keeps Block's level: its module-table tag.
  tags_.MarkRan(kNet);
  tags_.MarkRan(kLayer0);
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int block_attn = tags_.Call(layer0, kBlockAttn0);
  EXPECT_EQ(tags_.Module(tags_.Parent(block_attn)), kBlock0);
  EXPECT_EQ(tags_.Parent(tags_.Parent(block_attn)), layer0);
  EXPECT_EQ(tags_.Tag(block_attn), "/Net/Layer.0/Block/Attn");
}

TEST_F(CallTagsTest, WithoutRunRecordsEveryContainerKeepsItsLevel) {
  // Check that with no MarkRan at all, a descendant called from the root keeps every tagged level in between.
  int block_attn = tags_.Call(CallTags::kRoot, kBlockAttn0);
  EXPECT_EQ(tags_.Tag(block_attn), "/Net/Layer.0/Block/Attn");
  EXPECT_EQ(tags_.Tag(tags_.Parent(tags_.Parent(block_attn))), "/Net/Layer.0");
}

TEST_F(CallTagsTest, FilteredModuleAddsNoLevel) {
  // Check that calling a filtered LayerNorm returns the caller's tag and adds no tag, from any caller.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int sublayer0 = tags_.Call(layer0, kSublayer0);
  int size = tags_.size();
  EXPECT_EQ(tags_.Call(layer0, kNorm0), layer0);
  EXPECT_EQ(tags_.Call(sublayer0, kNorm0), sublayer0);
  EXPECT_EQ(tags_.Call(CallTags::kRoot, kNorm0), CallTags::kRoot);
  EXPECT_EQ(tags_.size(), size);
}

TEST_F(CallTagsTest, TaggedModuleAddsALevel) {
  // Check that calling a tagged module gives a new tag whose parent is the caller's.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int attn = tags_.Call(layer0, kAttn0);
  EXPECT_NE(attn, layer0);
  EXPECT_EQ(tags_.Parent(attn), layer0);
}

TEST_F(CallTagsTest, FromChainFollowsInstancesFromTheRoot) {
  // Check that a chain of instances (filtered ones included) gives the tag of calling each from the previous.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int attn = tags_.Call(tags_.Call(layer0, kSublayer0), kAttn0);
  EXPECT_EQ(tags_.FromChain({kNet, kLayer0, kSublayer0, kAttn0}), attn);
  EXPECT_EQ(tags_.FromChain({kNet, kLayer0, kSublayer0, kAttn0, kNorm0}), attn);
  EXPECT_EQ(tags_.FromChain({kNet}), CallTags::kRoot);
}

TEST_F(CallTagsTest, CommonAncestorAndAncestry) {
  // Check that CommonAncestor and IsAncestorOrSelf follow the call tree, across the two sublayers.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  int sublayer0 = tags_.Call(layer0, kSublayer0);
  int attn = tags_.Call(sublayer0, kAttn0);
  int ff = tags_.Call(tags_.Call(layer0, kSublayer1), kFf0);
  int layer1 = tags_.Call(CallTags::kRoot, kLayer1);
  EXPECT_EQ(tags_.CommonAncestor(attn, ff), layer0);
  EXPECT_EQ(tags_.CommonAncestor(ff, attn), layer0);
  EXPECT_EQ(tags_.CommonAncestor(attn, sublayer0), sublayer0);
  EXPECT_EQ(tags_.CommonAncestor(attn, attn), attn);
  EXPECT_EQ(tags_.CommonAncestor(attn, layer1), CallTags::kRoot);
  EXPECT_TRUE(tags_.IsAncestorOrSelf(layer0, attn));
  EXPECT_TRUE(tags_.IsAncestorOrSelf(attn, attn));
  EXPECT_TRUE(tags_.IsAncestorOrSelf(CallTags::kRoot, ff));
  EXPECT_FALSE(tags_.IsAncestorOrSelf(sublayer0, ff));
  EXPECT_FALSE(tags_.IsAncestorOrSelf(attn, layer0));
}

TEST_F(CallTagsTest, NewCallAfterTagsAreSettledThrows) {
  // Check that adding a call after Tag() was used throws std::logic_error.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  ASSERT_EQ(tags_.Tag(layer0), "/Net/Layer.0");
  EXPECT_THROW(tags_.Call(layer0, kAttn0), std::logic_error);
}

TEST_F(CallTagsTest, KnownCallAfterTagsAreSettledDoesNotThrow) {
  // Check that repeating an existing call, or calling a filtered module, after Tag() was used is allowed.
  int layer0 = tags_.Call(CallTags::kRoot, kLayer0);
  ASSERT_EQ(tags_.Tag(layer0), "/Net/Layer.0");
  EXPECT_EQ(tags_.Call(CallTags::kRoot, kLayer0), layer0);
  EXPECT_EQ(tags_.Call(layer0, kNorm0), layer0);
}

}  // namespace
}  // namespace hiertag
