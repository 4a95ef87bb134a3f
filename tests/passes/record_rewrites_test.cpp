// Tests of RecordRewrites: groups of removed nodes classified by what replaced them.
// Each pass is a lambda doing the graph surgery a torch pass does.
#include "hiertag/passes/record_rewrites.h"

#include <ATen/ATen.h>
#include <torch/csrc/jit/passes/dead_code_elimination.h>
#include <torch/csrc/jit/testing/file_check.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph_test_support.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/passes/assign_hierarchy_tags.h"
#include "hiertag/passes/tagged_model_entries.h"

namespace hiertag {
namespace {

using torch::jit::Node;
using torch::jit::Scope;
using torch::jit::ScopePtr;
using torch::jit::Value;

constexpr const char* kPass = "_jit_pass_test_surgery";

// Module indices of the table the tagging cross-checks use.
constexpr int kNet = 0;
constexpr int kToLast = 1;
constexpr int kToFirst = 2;
constexpr int kHead = 3;
constexpr int kEncoder = 4;
constexpr int kLayer = 5;
constexpr int kOutput = 6;
constexpr int kNorm = 7;

class RecordRewritesTest : public testing::GraphTest {
 protected:
  void SetUp() override {
    EXPECT_EQ(modules_.Add("", "pkg.Net", "Net", true), kNet);
    EXPECT_EQ(modules_.Add("to_last", "pkg.ToLast", "ToLast", true), kToLast);
    EXPECT_EQ(modules_.Add("to_first", "pkg.ToFirst", "ToFirst", true), kToFirst);
    EXPECT_EQ(modules_.Add("head", "pkg.Head", "Head", true), kHead);
    EXPECT_EQ(modules_.Add("encoder", "pkg.Encoder", "Encoder", true), kEncoder);
    EXPECT_EQ(modules_.Add("encoder.layer", "pkg.Layer", "Layer", true), kLayer);
    EXPECT_EQ(modules_.Add("encoder.layer.output", "pkg.Output", "Output", true), kOutput);
    EXPECT_EQ(modules_.Add("encoder.layer.output.norm", "pkg.Norm", "Norm", true), kNorm);
    modules_.Finalize();
  }

  void RunPass(const std::function<void()>& surgery) {
    RecordRewrites(*graph_, kPass, borrowed_, log_, surgery);
    graph_->lint();
  }

  // Tags the graph with the rewrites recorded so far.
  HierarchyTagging Tag() {
    call_tags_ = std::make_unique<CallTags>(modules_);
    return AssignHierarchyTags(*graph_, modules_, *call_tags_, borrowed_, {}, -1, nullptr, &log_);
  }

  // The tag strings of call tag ids, sorted.
  std::vector<std::string> TagsOf(const std::vector<int>& ids) {
    std::vector<std::string> tags;
    for (int id : ids) tags.push_back(call_tags_->Tag(id));
    std::sort(tags.begin(), tags.end());
    return tags;
  }

  // The tag strings of call references, with "#K" for a known call, sorted.
  // No module calls are recorded here: a scope a record names is every call of
  // its tag, while a call the tagging adds from the call chain is call 0.
  std::vector<std::string> TagsOf(const std::vector<TagRef>& refs) {
    std::vector<std::string> tags;
    for (const TagRef& ref : refs) {
      tags.push_back(call_tags_->Tag(ref.tag) + (ref.call == TagRef::kEveryCall ? "" : "#" + std::to_string(ref.call)));
    }
    std::sort(tags.begin(), tags.end());
    return tags;
  }

  // Scopes in a fixed order, for comparing lists whose order the pass does not promise.
  template <typename Scopes>
  static std::vector<ScopePtr> Sorted(const Scopes& list) {
    std::vector<ScopePtr> scopes(list.begin(), list.end());
    std::sort(scopes.begin(), scopes.end(), [](const ScopePtr& a, const ScopePtr& b) { return a.get() < b.get(); });
    return scopes;
  }
  static std::vector<ScopePtr> Sorted(std::initializer_list<ScopePtr> list) {
    return Sorted<>(std::vector<ScopePtr>(list));
  }

  // The one top-level node of `kind`.
  Node* Only(c10::Symbol kind) {
    Node* found = nullptr;
    for (Node* node : graph_->nodes()) {
      if (node->kind() == kind) {
        EXPECT_EQ(found, nullptr) << "more than one " << kind.toQualString();
        found = node;
      }
    }
    EXPECT_NE(found, nullptr) << "no " << kind.toQualString();
    return found;
  }

  ModuleTable modules_;
  std::unique_ptr<CallTags> call_tags_;
  RewriteLog log_;
  ScopePtr net_ = testing::InstanceScope(c10::make_intrusive<Scope>(), kNet, "pkg.Net::");
  ScopePtr to_last_ = testing::InstanceScope(net_, kToLast, "pkg.ToLast::to_last");
  ScopePtr to_first_ = testing::InstanceScope(net_, kToFirst, "pkg.ToFirst::to_first");
  ScopePtr head_ = testing::InstanceScope(net_, kHead, "pkg.Head::head");
  // A call chain: the encoder calls its layer, the layer its output block, the block its norm.
  ScopePtr encoder_ = testing::InstanceScope(net_, kEncoder, "pkg.Encoder::encoder");
  ScopePtr layer_ = testing::InstanceScope(encoder_, kLayer, "pkg.Layer::layer");
  ScopePtr output_ = testing::InstanceScope(layer_, kOutput, "pkg.Output::output");
  ScopePtr norm_ = testing::InstanceScope(output_, kNorm, "pkg.Norm::norm");
};

const c10::Symbol kConv = c10::Symbol::onnx("Conv");
const c10::Symbol kConstant = c10::Symbol::onnx("Constant");

// A permutation to channels-last and its inverse, then a consumer.
constexpr const char* kTransposePair = R"IR(
graph(%x : Tensor, %scale : Tensor):
  %t1 : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%x)
  %t2 : Tensor = onnx::Transpose[perm=[0, 3, 1, 2]](%t1)
  %y : Tensor = onnx::Mul(%t2, %scale)
  return (%y)
)IR";

// What the ONNX peephole does with a Transpose and its inverse: both go, the consumer reads their input.
std::function<void()> CancelTransposePair(std::unordered_map<std::string, Value*>& values) {
  Node* t1 = values.at("t1")->node();
  Node* t2 = values.at("t2")->node();
  Value* x = values.at("x");
  return [t1, t2, x] {
    t2->output()->replaceAllUsesWith(x);
    t2->destroy();
    t1->destroy();
  };
}

TEST_F(RecordRewritesTest, TransposePairAcrossModulesIsRecordedRemoved) {
  // Check that a Transpose in to_last cancelled with its inverse in to_first gives one removed record with both scopes.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);

  RunPass(CancelTransposePair(vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::Transpose
# CHECK: onnx::Mul(%x, %scale)
)",
                                       *graph_);
  ASSERT_EQ(log_.records.size(), 1u);
  const RewriteRecord& record = log_.records[0];
  EXPECT_EQ(record.kind, RewriteRecord::Kind::kRemoved);
  EXPECT_EQ(record.pass, kPass);
  EXPECT_EQ(Sorted(record.scopes), Sorted({to_last_, to_first_}));
  EXPECT_EQ(record.initializer, 0u);
  EXPECT_EQ(log_.fused, 0);
  EXPECT_EQ(log_.merged, 0);
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, TransposePairInOneModuleIsNotRecorded) {
  // Check that a Transpose and its inverse cancelled inside one module call
  // leave no rewrite: the next module reads the same value it received.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_last_);
  SetScope("y", to_first_);

  RunPass(CancelTransposePair(vmap_));

  EXPECT_EQ(testing::CountKind(graph_->block(), c10::Symbol::onnx("Transpose")), 0);
  for (const RewriteRecord& record : log_.records) EXPECT_EQ(record.kind, RewriteRecord::Kind::kRewired);
  EXPECT_TRUE(Tag().rewrites.empty());
  EXPECT_TRUE(borrowed_.empty());
}

// A module permutes to channels-last, and its output is read twice: by the
// next module, which permutes it back, and by the caller.
constexpr const char* kTransposeKeptForAnotherReader = R"IR(
graph(%x : Tensor, %scale : Tensor):
  %t1 : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%x)
  %t2 : Tensor = onnx::Transpose[perm=[0, 3, 1, 2]](%t1)
  %y : Tensor = onnx::Mul(%t2, %scale)
  %z : Tensor = onnx::Relu(%t1)
  return (%y, %z)
)IR";

TEST_F(RecordRewritesTest, InverseTransposeCancelledAgainstAKeptOneIsRecordedRewired) {
  // Check that when only the second Transpose goes (the first stays for the
  // caller), the module that read the first one's output is recorded rewired.
  Parse(kTransposeKeptForAnotherReader);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  SetScope("z", head_);
  Node* t2 = NodeOf("t2");
  Value* x = vmap_.at("x");
  RunPass([t2, x] {
    t2->output()->replaceAllUsesWith(x);
    t2->destroy();
  });

  ASSERT_EQ(log_.records.size(), 1u);
  EXPECT_EQ(log_.records[0].kind, RewriteRecord::Kind::kRewired);
  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagging.rewrites[0].kind, RewriteRecord::Kind::kRewired);
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs), std::vector<std::string>{"/Net/ToFirst#0"});
}

TEST_F(RecordRewritesTest, ReaderOfTheValueBeforeIsNotRewired) {
  // Check that a module that already read the value it now reads keeps its boundary.
  Parse(kTransposeKeptForAnotherReader);
  SetScope("t1", to_last_);
  SetScope("t2", to_last_);
  SetScope("y", to_last_);
  SetScope("z", head_);
  Node* t2 = NodeOf("t2");
  Value* x = vmap_.at("x");
  RunPass([t2, x] {
    t2->output()->replaceAllUsesWith(x);
    t2->destroy();
  });

  EXPECT_TRUE(Tag().rewrites.empty());
}

TEST_F(RecordRewritesTest, RemovedRecordResolvesToBothTagsWhenTagging) {
  // Check that AssignHierarchyTags turns the removed record into a rewrite naming both call tags.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  RunPass(CancelTransposePair(vmap_));

  HierarchyTagging tagging = Tag();

  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagging.rewrites[0].kind, RewriteRecord::Kind::kRemoved);
  EXPECT_EQ(tagging.rewrites[0].pass, kPass);
  EXPECT_TRUE(std::is_sorted(tagging.rewrites[0].refs.begin(), tagging.rewrites[0].refs.end()));
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs), (std::vector<std::string>{"/Net/ToFirst", "/Net/ToLast"}));
}

TEST_F(RecordRewritesTest, TheFileListsEachRemovedRewriteOnceInTheOrderFirstMet) {
  // Check that records of one pass removing across the same calls are listed
  // once in hiertag.rewrites, and one of another pass after them.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  RunPass(CancelTransposePair(vmap_));
  ASSERT_EQ(log_.records.size(), 1u);
  RewriteRecord again = log_.records[0];
  RewriteRecord other = log_.records[0];
  other.pass = "_jit_pass_other_surgery";
  log_.records.push_back(other);
  log_.records.push_back(again);

  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.rewrites.size(), 3u);
  std::string listed;
  for (const ModelMetadataEntry& entry : DescribeTaggedModel(tagging, *call_tags_, modules_, *graph_).model) {
    if (entry.key == kRewritesKey) listed = entry.value;
  }
  EXPECT_EQ(listed,
            "[{\"pass\":\"_jit_pass_test_surgery\",\"kind\":\"removed\","
            "\"modules\":[\"/Net/ToFirst\",\"/Net/ToLast\"],\"node\":\"\"},"
            "{\"pass\":\"_jit_pass_other_surgery\",\"kind\":\"removed\","
            "\"modules\":[\"/Net/ToFirst\",\"/Net/ToLast\"],\"node\":\"\"}]");
}

// A Conv and the BatchNormalization after it, then a consumer.
constexpr const char* kConvBatchNorm = R"IR(
graph(%x : Tensor, %w : Tensor, %scale : Tensor, %bias : Tensor, %mean : Tensor, %var : Tensor):
  %conv : Tensor = onnx::Conv(%x, %w)
  %bn : Tensor = onnx::BatchNormalization(%conv, %scale, %bias, %mean, %var)
  %y : Tensor = onnx::Relu(%bn)
  return (%y)
)IR";

// What the eval peephole does: a new Conv with folded weights (new initializers) replaces both.
std::function<void()> FuseConvBatchNorm(torch::jit::Graph& graph, std::unordered_map<std::string, Value*>& values) {
  Node* conv = values.at("conv")->node();
  Node* bn = values.at("bn")->node();
  Value* x = values.at("x");
  return [&graph, conv, bn, x] {
    Value* fused_w = graph.addInput("fused_w");
    Value* fused_b = graph.addInput("fused_b");
    Node* fused = graph.create(kConv, {x, fused_w, fused_b}, 1);
    fused->insertBefore(bn);
    fused->copyMetadata(conv);
    fused->output()->setDebugName("fused");
    bn->output()->replaceAllUsesWith(fused->output());
    bn->destroy();
    conv->destroy();
  };
}

TEST_F(RecordRewritesTest, ConvFusedWithOtherModulesBatchNormCarriesSpans) {
  // Check that a new Conv taking over to_last's Conv and to_first's BatchNorm is lent a loan spanning to_first.
  Parse(kConvBatchNorm);
  SetScope("conv", to_last_);
  SetScope("bn", to_first_);
  SetScope("y", to_first_);

  RunPass(FuseConvBatchNorm(*graph_, vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::BatchNormalization
# CHECK: %fused : Tensor = onnx::Conv(%x, %fused_w, %fused_b)
# CHECK: onnx::Relu(%fused)
)",
                                       *graph_);
  Node* fused = Only(kConv);
  const BorrowedScopes::Loan* loan = borrowed_.Find(fused->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, to_last_);
  EXPECT_EQ(loan->original, to_last_);
  EXPECT_EQ(loan->spans, (BorrowedScopes::Scopes{to_first_}));
  EXPECT_EQ(loan->rewrite, kPass);
  EXPECT_TRUE(loan->shared_with.empty());
  EXPECT_TRUE(loan->folded_from.empty());
  EXPECT_EQ(log_.fused, 1);
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(RecordRewritesTest, ConvFusedWithBatchNormOfSameModuleCarriesNoSpans) {
  // Check that fusing a Conv and a BatchNorm of one module call lends nothing and counts no fused node.
  Parse(kConvBatchNorm);
  SetScope("conv", to_last_);
  SetScope("bn", to_last_);
  SetScope("y", to_first_);

  RunPass(FuseConvBatchNorm(*graph_, vmap_));

  Node* fused = Only(kConv);
  EXPECT_EQ(fused->scope(), to_last_);
  EXPECT_TRUE(borrowed_.empty());
  EXPECT_EQ(log_.fused, 0);
  EXPECT_TRUE(log_.records.empty());
}

// Two Conv+BatchNormalization pairs in a row, fused in one pass (the eval peephole on consecutive layers).
constexpr const char* kTwoConvBatchNorms = R"IR(
graph(%x : Tensor, %w1 : Tensor, %w2 : Tensor, %scale : Tensor, %bias : Tensor, %mean : Tensor, %var : Tensor):
  %conv1 : Tensor = onnx::Conv(%x, %w1)
  %bn1 : Tensor = onnx::BatchNormalization(%conv1, %scale, %bias, %mean, %var)
  %conv2 : Tensor = onnx::Conv(%bn1, %w2)
  %bn2 : Tensor = onnx::BatchNormalization(%conv2, %scale, %bias, %mean, %var)
  %y : Tensor = onnx::Relu(%bn2)
  return (%y)
)IR";

// Fuses both pairs; each new Conv copies its old Conv's metadata. Names the new Convs %fused1 and %fused2.
std::function<void()> FuseTwoConvBatchNorms(torch::jit::Graph& graph, std::unordered_map<std::string, Value*>& values) {
  Node* conv1 = values.at("conv1")->node();
  Node* bn1 = values.at("bn1")->node();
  Node* conv2 = values.at("conv2")->node();
  Node* bn2 = values.at("bn2")->node();
  Value* x = values.at("x");
  return [&graph, conv1, bn1, conv2, bn2, x] {
    Node* fused1 = graph.create(kConv, {x, graph.addInput("fused_w1"), graph.addInput("fused_b1")}, 1);
    fused1->insertBefore(bn1)->copyMetadata(conv1)->output()->setDebugName("fused1");
    bn1->output()->replaceAllUsesWith(fused1->output());
    Node* fused2 = graph.create(kConv, {fused1->output(), graph.addInput("fused_w2"), graph.addInput("fused_b2")}, 1);
    fused2->insertBefore(bn2)->copyMetadata(conv2)->output()->setDebugName("fused2");
    bn2->output()->replaceAllUsesWith(fused2->output());
    bn2->destroy();
    conv2->destroy();
    bn1->destroy();
    conv1->destroy();
  };
}

// The new Conv whose output is named `name`.
Node* FusedConv(torch::jit::Graph& graph, const std::string& name) {
  for (Node* node : graph.nodes()) {
    if (node->kind() == kConv && node->output()->debugName() == name) return node;
  }
  ADD_FAILURE() << "no Conv %" << name;
  return nullptr;
}

TEST_F(RecordRewritesTest, SideBySideFusionsInTheirOwnModulesCarryNoSpans) {
  // Check that two Conv+BatchNorm fusions, each inside one module call, lend neither new Conv anything.
  Parse(kTwoConvBatchNorms);
  SetScope("conv1", to_last_);
  SetScope("bn1", to_last_);
  SetScope("conv2", to_first_);
  SetScope("bn2", to_first_);
  SetScope("y", head_);

  RunPass(FuseTwoConvBatchNorms(*graph_, vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::BatchNormalization
# CHECK: %fused1 : Tensor = onnx::Conv(%x, %fused_w1, %fused_b1)
# CHECK: %fused2 : Tensor = onnx::Conv(%fused1, %fused_w2, %fused_b2)
)",
                                       *graph_);
  EXPECT_EQ(FusedConv(*graph_, "fused1")->scope(), to_last_);
  EXPECT_EQ(FusedConv(*graph_, "fused2")->scope(), to_first_);
  EXPECT_TRUE(borrowed_.empty());
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(RecordRewritesTest, SideBySideFusionsAcrossModulesEachCarryTheirOwnSpans) {
  // Check that with each BatchNorm in the next module, each new Conv spans exactly the module of the BatchNorm it took.
  Parse(kTwoConvBatchNorms);
  SetScope("conv1", to_last_);
  SetScope("bn1", to_first_);
  SetScope("conv2", to_first_);
  SetScope("bn2", head_);
  SetScope("y", head_);

  RunPass(FuseTwoConvBatchNorms(*graph_, vmap_));

  const BorrowedScopes::Loan* first = borrowed_.Find(FusedConv(*graph_, "fused1")->scope());
  EXPECT_NE(first, nullptr) << "%fused1 took over to_first's BatchNormalization";
  if (first != nullptr) {
    EXPECT_EQ(first->recorded, to_last_);
    EXPECT_EQ(first->spans, (BorrowedScopes::Scopes{to_first_}));
  }
  const BorrowedScopes::Loan* second = borrowed_.Find(FusedConv(*graph_, "fused2")->scope());
  EXPECT_NE(second, nullptr) << "%fused2 took over head's BatchNormalization";
  if (second != nullptr) {
    EXPECT_EQ(second->recorded, to_first_);
    EXPECT_EQ(second->spans, (BorrowedScopes::Scopes{head_}));
  }
  EXPECT_EQ(log_.fused, 2);
}

TEST_F(RecordRewritesTest, FusedConvGoesToCommonAncestorWhenTagging) {
  // Check that the fused Conv is tagged with the common ancestor of both modules and lists both as spans.
  Parse(kConvBatchNorm);
  SetScope("conv", to_last_);
  SetScope("bn", to_first_);
  SetScope("y", to_first_);
  RunPass(FuseConvBatchNorm(*graph_, vmap_));

  HierarchyTagging tagging = Tag();

  const TaggedNode* fused = nullptr;
  for (const TaggedNode& tagged : tagging.nodes) {
    if (JitNode(tagged)->kind() == kConv) fused = &tagged;
  }
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(call_tags_->Tag(fused->tag), "/Net");
  EXPECT_EQ(TagsOf(fused->spans()), (std::vector<std::string>{"/Net/ToFirst", "/Net/ToLast"}));
  EXPECT_EQ(fused->rewrite(), kPass);
}

// to_last negates a weight and transposes it; head multiplies by the result.
constexpr const char* kFoldableWeight = R"IR(
graph(%x : Tensor, %w : Tensor, %other : Tensor):
  %n : Tensor = onnx::Neg(%w)
  %t : Tensor = onnx::Transpose[perm=[1, 0]](%n)
  %y : Tensor = onnx::MatMul(%x, %t)
  return (%y)
)IR";

// Removes n and t, and makes y read `replacement` (made by `make_replacement` inside the pass).
std::function<void()> ReplaceWeightChain(std::unordered_map<std::string, Value*>& values,
                                         std::function<Value*()> make_replacement) {
  Node* n = values.at("n")->node();
  Node* t = values.at("t")->node();
  Node* y = values.at("y")->node();
  return [n, t, y, make_replacement] {
    y->replaceInput(1, make_replacement());
    t->destroy();
    n->destroy();
  };
}

TEST_F(RecordRewritesTest, ConsumerReadingNewInitializerIsRecordedFolded) {
  // Check that a group whose consumer now reads a new graph input (an initializer) gives a folded record naming it.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_last_);
  SetScope("y", head_);
  Value* folded = nullptr;

  RunPass(ReplaceWeightChain(vmap_, [&] { return folded = graph_->addInput("folded"); }));

  ASSERT_NE(folded, nullptr);
  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::Neg
# CHECK: onnx::MatMul(%x, %folded)
)",
                                       *graph_);
  ASSERT_EQ(log_.records.size(), 1u);
  const RewriteRecord& record = log_.records[0];
  EXPECT_EQ(record.kind, RewriteRecord::Kind::kFolded);
  EXPECT_EQ(record.pass, kPass);
  EXPECT_EQ(record.scopes, (std::vector<ScopePtr>{to_last_}));
  EXPECT_EQ(record.initializer, folded->unique());
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, ConsumerReadingExistingInputIsNotRecordedFolded) {
  // Check that a group whose consumer now reads a graph input that existed before the pass records no fold.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_last_);
  SetScope("y", head_);
  Value* other = vmap_.at("other");

  RunPass(ReplaceWeightChain(vmap_, [other] { return other; }));

  EXPECT_TRUE(log_.records.empty());
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, NewInitializerAtAnErasedInputsAddressIsRecordedFolded) {
  // Check that an initializer the pass adds right after erasing an unused input
  // is told new by its number, not its address. glibc's malloc hands the
  // erased input's memory to the next value of its size, so the new input
  // usually sits where the erased one was: code telling inputs apart by
  // address takes it for the erased one, and records no fold (the module
  // folded away leaves no trace). Such code fails this only when the
  // allocator reuses the address (glibc; not under ASan, whose quarantine
  // holds freed memory back), which the test reports as a property.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_last_);
  SetScope("y", head_);
  auto erased = reinterpret_cast<std::uintptr_t>(vmap_.at("other"));
  Value* folded = nullptr;

  RunPass(ReplaceWeightChain(vmap_, [&] {
    graph_->eraseInput(2);
    return folded = graph_->addInput("folded");
  }));

  ASSERT_NE(folded, nullptr);
  RecordProperty("address_reused", reinterpret_cast<std::uintptr_t>(folded) == erased ? "yes" : "no");
  ASSERT_EQ(log_.records.size(), 1u);
  EXPECT_EQ(log_.records[0].kind, RewriteRecord::Kind::kFolded);
  EXPECT_EQ(log_.records[0].scopes, (std::vector<ScopePtr>{to_last_}));
  EXPECT_EQ(log_.records[0].initializer, folded->unique());
}

TEST_F(RecordRewritesTest, FoldedInitializerNamesTheModuleThatLeftNoNode) {
  // Check that at tagging, the folded record resolves to to_last's tag with the initializer's id.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_last_);
  SetScope("y", head_);
  Value* folded = nullptr;
  RunPass(ReplaceWeightChain(vmap_, [&] { return folded = graph_->addInput("folded"); }));

  HierarchyTagging tagging = Tag();

  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagging.rewrites[0].kind, RewriteRecord::Kind::kFolded);
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs), (std::vector<std::string>{"/Net/ToLast"}));
  EXPECT_EQ(tagging.rewrites[0].initializer, folded->unique());
}

// A new Constant (no inputs) made by the pass in the graph's current scope.
Value* NewConstant(torch::jit::Graph& graph, Node* before) {
  Node* constant = graph.create(kConstant, 1);
  constant->t_(c10::Symbol::attr("value"), at::ones({2, 2}));
  constant->insertBefore(before);
  constant->output()->setDebugName("folded");
  return constant->output();
}

TEST_F(RecordRewritesTest, GroupFoldedIntoNewConstantLendsFoldedFrom) {
  // Check that a group replaced by a new Constant lends it a loan listing the group's scope as folded_from.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_last_);
  SetScope("y", head_);
  Node* y = NodeOf("y");

  RunPass(ReplaceWeightChain(vmap_, [&] { return NewConstant(*graph_, y); }));

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::Neg
# CHECK: %folded : Tensor = onnx::Constant
# CHECK: onnx::MatMul(%x, %folded)
)",
                                       *graph_);
  Node* constant = Only(kConstant);
  const BorrowedScopes::Loan* loan = borrowed_.Find(constant->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->folded_from, (BorrowedScopes::Scopes{to_last_}));
  EXPECT_EQ(loan->recorded, to_last_);
  EXPECT_TRUE(loan->original->isBlank());
  EXPECT_TRUE(loan->spans.empty());
  EXPECT_TRUE(loan->shared_with.empty());
  EXPECT_TRUE(log_.records.empty());
  EXPECT_EQ(Restore(), 1);
  EXPECT_TRUE(Only(kConstant)->scope()->isBlank());
}

TEST_F(RecordRewritesTest, GroupOfTwoModulesFoldedIntoScopedConstantListsBoth) {
  // Check that a Constant the pass made in head's scope keeps head as its record and lists both folded modules.
  Parse(kFoldableWeight);
  SetScope("n", to_last_);
  SetScope("t", to_first_);
  SetScope("y", head_);
  Node* y = NodeOf("y");

  RunPass(ReplaceWeightChain(vmap_, [&] {
    Value* constant = NewConstant(*graph_, y);
    constant->node()->setScope(head_);
    return constant;
  }));

  const BorrowedScopes::Loan* loan = borrowed_.Find(Only(kConstant)->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, head_);
  EXPECT_EQ(loan->original, head_);
  EXPECT_EQ(Sorted(loan->folded_from), Sorted({to_last_, to_first_}));
  EXPECT_TRUE(log_.records.empty());
}

// Two computations sharing a removed node (each layer's shape arithmetic from one
// sequence length): one group, folded into two constants.
constexpr const char* kTwoFoldsFromOneRoot = R"IR(
graph(%x : Tensor, %w : Tensor):
  %r : Tensor = onnx::Neg(%w)
  %a : Tensor = onnx::Abs(%r)
  %b : Tensor = onnx::Exp(%r)
  %ya : Tensor = onnx::MatMul(%x, %a)
  %yb : Tensor = onnx::MatMul(%x, %b)
  %y : Tensor = onnx::Add(%ya, %yb)
  return (%y)
)IR";

// kTwoFoldsFromOneRoot with r in to_last, a in to_first, b in norm, ya and yb in head.
class TwoFoldsFromOneRootTest : public RecordRewritesTest {
 protected:
  void SetUp() override {
    RecordRewritesTest::SetUp();
    Parse(kTwoFoldsFromOneRoot);
    SetScope("r", to_last_);
    SetScope("a", to_first_);
    SetScope("b", norm_);
    SetScope("ya", head_);
    SetScope("yb", head_);
  }

  // Surgery: `user` reads a new Constant in place of its second input; returns the Constant.
  Value* ReadNewConstant(const std::string& user) {
    Node* reader = NodeOf(user);
    Value* constant = NewConstant(*graph_, reader);
    reader->replaceInput(1, constant);
    return constant;
  }

  // The folded_from of the loan lent to `constant`'s node (a failure when none).
  std::vector<ScopePtr> FoldedFrom(Value* constant) {
    const BorrowedScopes::Loan* loan = borrowed_.Find(constant->node()->scope());
    EXPECT_NE(loan, nullptr);
    return loan ? Sorted(loan->folded_from) : std::vector<ScopePtr>{};
  }
};

TEST_F(TwoFoldsFromOneRootTest, EachConstantListsTheModulesItsValueWasComputedBy) {
  // Check that of one group folded into two constants, each lists the shared node's module and its own
  // computation's, not the other's.
  Node* a = NodeOf("a");
  Node* b = NodeOf("b");
  Node* r = NodeOf("r");
  Value* from_a = nullptr;
  Value* from_b = nullptr;

  RunPass([&] {
    from_a = ReadNewConstant("ya");
    from_b = ReadNewConstant("yb");
    a->destroy();
    b->destroy();
    r->destroy();
  });

  EXPECT_EQ(FoldedFrom(from_a), Sorted({to_last_, to_first_}));
  EXPECT_EQ(FoldedFrom(from_b), Sorted({to_last_, norm_}));
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(TwoFoldsFromOneRootTest, OneRecorderOverManyPassesClassifiesEachAsAFreshObservationWould) {
  // Check that a recorder keeping its arrays from pass to pass (as the export does) classifies a pass
  // after one over a larger graph, and after a pass that changed the graph, as RecordRewrites alone would.
  Node* a = NodeOf("a");
  Node* b = NodeOf("b");
  Node* r = NodeOf("r");
  Value* from_a = nullptr;
  Value* from_b = nullptr;
  RewriteRecorder recorder(borrowed_, log_);

  recorder.Observe(*graph_, kPass, [] {});
  recorder.Observe(*graph_, kPass, [&] {  // b alone: r stays for a
    from_b = ReadNewConstant("yb");
    b->destroy();
  });
  recorder.Observe(*graph_, kPass, [&] {
    from_a = ReadNewConstant("ya");
    a->destroy();
    r->destroy();
  });
  recorder.Observe(*graph_, kPass, [] {});
  graph_->lint();

  EXPECT_EQ(FoldedFrom(from_a), Sorted({to_last_, to_first_}));
  EXPECT_EQ(FoldedFrom(from_b), (std::vector<ScopePtr>{norm_}));
  EXPECT_TRUE(log_.records.empty());
  EXPECT_EQ(Restore(), 2);
}

TEST_F(RecordRewritesTest, UnscopedGroupFoldedIntoNewConstantLendsNothing) {
  // Check that folding nodes no module call recorded lends the new Constant nothing.
  Parse(kFoldableWeight);
  SetScope("y", head_);
  Node* y = NodeOf("y");

  RunPass(ReplaceWeightChain(vmap_, [&] { return NewConstant(*graph_, y); }));

  EXPECT_TRUE(Only(kConstant)->scope()->isBlank());
  EXPECT_TRUE(borrowed_.empty());
  EXPECT_TRUE(log_.records.empty());
}

// A constant an earlier pass made (head keeps reading it) and a chain computing from it
// across to_last and to_first, which a consumer in head reads.
constexpr const char* kChainFromConstant = R"IR(
graph(%x : Tensor):
  %c : Tensor = onnx::Constant()
  %n : Tensor = onnx::Abs(%c)
  %m : Tensor = onnx::Abs(%n)
  %k : Tensor = onnx::Add(%x, %c)
  %y : Tensor = onnx::Mul(%k, %m)
  return (%y)
)IR";

// What constant folding does when the value it computes is already a constant (torch
// 2.8 makes constants for static shapes before folding): y reads c, n and m go.
std::function<void()> FoldChainIntoOlderConstant(std::unordered_map<std::string, Value*>& values) {
  Node* n = values.at("n")->node();
  Node* m = values.at("m")->node();
  Value* c = values.at("c");
  return [n, m, c] {
    m->output()->replaceAllUsesWith(c);
    m->destroy();
    n->destroy();
  };
}

TEST_F(RecordRewritesTest, ChainAcrossModulesFoldedIntoOlderConstantIsFoldedNotRemoved) {
  // Check that a group across two modules whose consumer now reads an older constant is folded into
  // that constant (folded_from lists both), with no removed record: constants cut no boundary.
  Parse(kChainFromConstant);
  SetScope("c", head_);
  SetScope("n", to_last_);
  SetScope("m", to_first_);
  SetScope("k", head_);
  SetScope("y", head_);

  RunPass(FoldChainIntoOlderConstant(vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::Abs
# CHECK: onnx::Mul(%k, %c)
)",
                                       *graph_);
  EXPECT_TRUE(log_.records.empty());
  const BorrowedScopes::Loan* loan = borrowed_.Find(Only(kConstant)->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, head_);
  EXPECT_EQ(Sorted(loan->folded_from), Sorted({to_last_, to_first_}));
}

TEST_F(RecordRewritesTest, ChainAcrossModulesBypassedToDataIsRecordedRemoved) {
  // Check that the same surgery with data in place of the constant (a graph input) still removes a
  // boundary: the consumer reads a value the modules between handed on.
  Parse(R"IR(
graph(%x : Tensor, %c : Tensor):
  %n : Tensor = onnx::Abs(%c)
  %m : Tensor = onnx::Abs(%n)
  %k : Tensor = onnx::Add(%x, %c)
  %y : Tensor = onnx::Mul(%k, %m)
  return (%y)
)IR");
  SetScope("n", to_last_);
  SetScope("m", to_first_);
  SetScope("k", head_);
  SetScope("y", head_);

  RunPass(FoldChainIntoOlderConstant(vmap_));

  ASSERT_EQ(log_.records.size(), 1u);
  EXPECT_EQ(log_.records[0].kind, RewriteRecord::Kind::kRemoved);
  EXPECT_EQ(Sorted(log_.records[0].scopes), Sorted({to_last_, to_first_}));
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, ConstantRemadeWhereTheOldOneWasIsFolded) {
  // Check that a Constant the pass destroys and makes again, of the same kind
  // and scope (the allocator may hand it the old node's address), is a new node:
  // the old one is folded into it.
  Parse(R"IR(
graph(%x : Tensor):
  %c : Long(requires_grad=0, device=cpu) = onnx::Constant[value={2}]()
  %y : Tensor = onnx::Mul(%x, %c)
  return (%y)
)IR");
  SetScope("c", to_last_);
  SetScope("y", head_);
  Node* old_constant = NodeOf("c");
  Node* y = NodeOf("y");
  Value* x = vmap_.at("x");

  RunPass([&] {
    y->replaceInput(1, x);
    old_constant->destroy();
    Node* remade = graph_->create(kConstant, 1);
    remade->t_(c10::Symbol::attr("value"), at::full({}, 2.0));
    remade->setScope(to_last_);
    remade->insertBefore(y);
    y->replaceInput(1, remade->output());
  });

  const BorrowedScopes::Loan* loan = borrowed_.Find(Only(kConstant)->scope());
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, to_last_);
  EXPECT_EQ(loan->folded_from, (BorrowedScopes::Scopes{to_last_}));
  EXPECT_TRUE(log_.records.empty());
}

// %a (to_last) and %b (to_first) compute the same value; each feeds its own consumer.
constexpr const char* kTwoEqualNodes = R"IR(
graph(%x : Tensor):
  %a : Tensor = onnx::Mul(%x, %x)
  %c : Tensor = onnx::Relu(%a)
  %b : Tensor = onnx::Mul(%x, %x)
  %d : Tensor = onnx::Sigmoid(%b)
  return (%c, %d)
)IR";

// A CSE-like merge: b's users read the older, equal a, and b goes.
std::function<void()> MergeIntoOlder(std::unordered_map<std::string, Value*>& values) {
  Node* a = values.at("a")->node();
  Node* b = values.at("b")->node();
  return [a, b] {
    b->output()->replaceAllUsesWith(a->output());
    b->destroy();
  };
}

TEST_F(RecordRewritesTest, NodeMergedIntoOlderEqualNodeIsShared) {
  // Check that when to_first's Mul is replaced by to_last's equal Mul, the kept node is shared with to_first.
  Parse(kTwoEqualNodes);
  SetScope("a", to_last_);
  SetScope("c", to_last_);
  SetScope("b", to_first_);
  SetScope("d", to_first_);

  RunPass(MergeIntoOlder(vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK: %a : Tensor = onnx::Mul(%x, %x)
# CHECK-NOT: onnx::Mul
# CHECK: onnx::Sigmoid(%a)
)",
                                       *graph_);
  const BorrowedScopes::Loan* loan = LoanOf("a");
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, to_last_);
  EXPECT_EQ(loan->original, to_last_);
  EXPECT_EQ(loan->shared_with, (BorrowedScopes::Scopes{to_first_}));
  EXPECT_TRUE(loan->spans.empty());
  EXPECT_EQ(log_.merged, 1);
  EXPECT_TRUE(log_.records.empty());
  EXPECT_EQ(LoanOf("d"), nullptr);
}

TEST_F(RecordRewritesTest, NodeMergedInsideOneModuleIsNotShared) {
  // Check that merging two equal nodes of one module call lends nothing and counts no merged node.
  Parse(kTwoEqualNodes);
  for (const char* name : {"a", "b", "c", "d"}) SetScope(name, to_last_);

  RunPass(MergeIntoOlder(vmap_));

  EXPECT_EQ(NodeOf("a")->scope(), to_last_);
  EXPECT_TRUE(borrowed_.empty());
  EXPECT_EQ(log_.merged, 0);
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(RecordRewritesTest, DeadNodesAcrossModulesAreNotRecorded) {
  // Check that dead nodes of two modules removed without users (torch's dead code elimination) record nothing.
  Parse(R"IR(
graph(%x : Tensor):
  %a : Tensor = aten::neg(%x)
  %b : Tensor = aten::abs(%a)
  %y : Tensor = aten::relu(%x)
  return (%y)
)IR");
  SetScope("a", to_last_);
  SetScope("b", to_first_);
  SetScope("y", head_);

  RunPass([&] { torch::jit::EliminateDeadCode(graph_); });

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: aten::neg
# CHECK-NOT: aten::abs
# CHECK: aten::relu(%x)
)",
                                       *graph_);
  EXPECT_TRUE(log_.records.empty());
  EXPECT_TRUE(borrowed_.empty());
  EXPECT_EQ(log_.fused, 0);
  EXPECT_EQ(log_.merged, 0);
}

TEST_F(RecordRewritesTest, PassChangingNothingRecordsNothing) {
  // Check that observing a pass that leaves the graph alone records nothing and changes no scope.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  const std::string before = graph_->toString();

  RunPass([] {});

  EXPECT_EQ(graph_->toString(), before);
  EXPECT_TRUE(log_.records.empty());
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, PassThatThrowsLeavesNoScopeHeld) {
  // Check that a pass throwing (torch exports on after its shape inference throws) leaves the recorder
  // holding none of the graph's scopes, so a later loan grows in place.
  Parse(kTransposePair);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  const size_t held = to_first_.use_count();
  RewriteRecorder recorder(borrowed_, log_);

  EXPECT_THROW(recorder.Observe(*graph_, kPass, [] { throw std::runtime_error("shape inference failed"); }),
               std::runtime_error);

  EXPECT_EQ(to_first_.use_count(), held);
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(RecordRewritesTest, NumberHandedBetweenModulesIsNotRecordedRemoved) {
  // Check that a NumToTensor in to_last and the Int reading it in to_first, both dropped, record nothing: a number
  // crossed.
  Parse(R"IR(
graph(%n : int, %x : Tensor):
  %t : Long(requires_grad=0, device=cpu) = prim::NumToTensor(%n)
  %i : int = aten::Int(%t)
  %y : Tensor = aten::add(%x, %i)
  return (%y)
)IR");
  SetScope("t", to_last_);
  SetScope("i", to_first_);
  SetScope("y", to_first_);
  Node* t = NodeOf("t");
  Node* i = NodeOf("i");
  Value* n = vmap_.at("n");

  RunPass([&] {
    i->output()->replaceAllUsesWith(n);
    i->destroy();
    t->destroy();
  });

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: prim::NumToTensor
# CHECK: aten::add(%x, %n)
)",
                                       *graph_);
  EXPECT_TRUE(log_.records.empty());
  EXPECT_TRUE(borrowed_.empty());
}

// Two cancelled pairs in a row: to_last/to_first, then to_first/head reading the first pair's consumer.
constexpr const char* kTwoTransposePairs = R"IR(
graph(%x : Tensor, %w : Tensor):
  %t1 : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%x)
  %t2 : Tensor = onnx::Transpose[perm=[0, 3, 1, 2]](%t1)
  %y : Tensor = onnx::Mul(%t2, %w)
  %u1 : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%y)
  %u2 : Tensor = onnx::Transpose[perm=[0, 3, 1, 2]](%u1)
  %z : Tensor = onnx::Mul(%u2, %w)
  return (%z)
)IR";

TEST_F(RecordRewritesTest, TwoCancelledPairsInARowAreBothRecordedRemoved) {
  // Check that a cancelled pair whose users now read %y, itself rewired by the pass, is removed, not fused into %y.
  Parse(kTwoTransposePairs);
  SetScope("t1", to_last_);
  SetScope("t2", to_first_);
  SetScope("y", to_first_);
  SetScope("u1", to_first_);
  SetScope("u2", head_);
  SetScope("z", head_);
  Node* t1 = NodeOf("t1");
  Node* t2 = NodeOf("t2");
  Node* u1 = NodeOf("u1");
  Node* u2 = NodeOf("u2");
  Value* x = vmap_.at("x");
  Value* y = vmap_.at("y");

  RunPass([&] {
    t2->output()->replaceAllUsesWith(x);
    t2->destroy();
    t1->destroy();
    u2->output()->replaceAllUsesWith(y);
    u2->destroy();
    u1->destroy();
  });

  torch::jit::testing::FileCheck().run(R"(
# CHECK-NOT: onnx::Transpose
# CHECK: %y : Tensor = onnx::Mul(%x, %w)
# CHECK: onnx::Mul(%y, %w)
)",
                                       *graph_);
  EXPECT_EQ(LoanOf("y"), nullptr) << "%y read the second pair's input; it took nothing over";
  EXPECT_EQ(log_.fused, 0);
  ASSERT_EQ(log_.records.size(), 2u);
  std::vector<std::vector<ScopePtr>> removed;
  for (const RewriteRecord& record : log_.records) {
    EXPECT_EQ(record.kind, RewriteRecord::Kind::kRemoved);
    removed.push_back(Sorted(record.scopes));
  }
  std::sort(removed.begin(), removed.end());
  std::vector<std::vector<ScopePtr>> expected = {Sorted({to_last_, to_first_}), Sorted({to_first_, head_})};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(removed, expected);
}

// A caller splits heads (Reshape to a shape list, Transpose) and its attention
// transposes the keys again, then multiplies.
constexpr const char* kKeysTransposedTwice = R"IR(
graph(%x : Tensor, %n : int, %m : int):
  %shape : int[] = prim::ListConstruct(%n, %m)
  %r : Tensor = onnx::Reshape(%x, %shape)
  %k : Tensor = onnx::Transpose[perm=[0, 2, 1, 3]](%r)
  %kt : Tensor = onnx::Transpose[perm=[0, 1, 3, 2]](%k)
  %y : Tensor = onnx::MatMul(%kt, %kt)
  return (%y)
)IR";

// What the ONNX peephole does there: the shape list becomes a Concat of
// Unsqueezes made in the caller's scope, and the second Transpose absorbs the
// first (composed permutation, the first one's input); the first goes unless
// something else reads it.
std::function<void()> FuseKeyTransposes(torch::jit::Graph& graph, std::unordered_map<std::string, Value*>& values) {
  Node* shape = values.at("shape")->node();
  Node* k = values.at("k")->node();
  Node* kt = values.at("kt")->node();
  Value* r = values.at("r");
  return [&graph, shape, k, kt, r] {
    std::vector<Value*> parts;
    for (Value* dim : shape->inputs()) {
      Node* unsqueeze =
          graph.create(c10::Symbol::onnx("Unsqueeze"), {dim}, 1)->insertBefore(shape)->copyMetadata(shape);
      parts.push_back(unsqueeze->output());
    }
    Node* concat = graph.create(c10::Symbol::onnx("Concat"), parts, 1)->insertBefore(shape)->copyMetadata(shape);
    concat->i_(c10::Symbol::attr("axis"), 0)->output()->setDebugName("concat");
    shape->output()->replaceAllUsesWith(concat->output());
    shape->destroy();
    kt->is_(c10::Symbol::attr("perm"), {0, 2, 3, 1});
    kt->replaceInput(0, r);
    if (!k->hasUses()) k->destroy();
  };
}

TEST_F(RecordRewritesTest, CallersTransposeFusedIntoTheAttentionsCarriesSpans) {
  // Check that the attention's Transpose absorbing its caller's (gone) gets the
  // caller as a span, although the pass made other nodes in the caller's scope.
  Parse(kKeysTransposedTwice);
  for (const char* name : {"shape", "r", "k"}) SetScope(name, net_);
  SetScope("kt", to_first_);
  SetScope("y", to_first_);

  RunPass(FuseKeyTransposes(*graph_, vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK: %concat : Tensor = onnx::Concat[axis=0]
# CHECK: %r : Tensor = onnx::Reshape(%x, %concat)
# CHECK-NOT: onnx::Transpose[perm=[0, 2, 1, 3]]
# CHECK: %kt : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%r)
)",
                                       *graph_);
  const BorrowedScopes::Loan* loan = LoanOf("kt");
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, to_first_);
  EXPECT_EQ(loan->spans, (BorrowedScopes::Scopes{net_}));
  EXPECT_EQ(loan->rewrite, kPass);
  EXPECT_EQ(log_.fused, 1);
  EXPECT_TRUE(log_.records.empty());
  HierarchyTagging tagging = Tag();
  for (const TaggedNode& tagged : tagging.nodes) {
    if (tagged.node != NodeOf("kt")) continue;
    EXPECT_EQ(call_tags_->Tag(tagged.tag), "/Net");
    EXPECT_EQ(TagsOf(tagged.spans()), (std::vector<std::string>{"/Net", "/Net/ToFirst"}));
  }
}

TEST_F(RecordRewritesTest, TransposesFusedInsideTheAttentionCarryNoSpans) {
  // Check that the same fusion with both Transposes in the attention lends nothing.
  Parse(kKeysTransposedTwice);
  for (const char* name : {"shape", "r"}) SetScope(name, net_);
  for (const char* name : {"k", "kt", "y"}) SetScope(name, to_first_);

  RunPass(FuseKeyTransposes(*graph_, vmap_));

  EXPECT_EQ(testing::CountKind(graph_->block(), c10::Symbol::onnx("Transpose")), 1);
  EXPECT_EQ(LoanOf("kt"), nullptr);
  EXPECT_EQ(log_.fused, 0);
  EXPECT_TRUE(log_.records.empty());
}

// The caller also hands its transposed keys out (a cache): its Transpose stays.
constexpr const char* kKeysTransposedTwiceAndKept = R"IR(
graph(%x : Tensor, %n : int, %m : int):
  %shape : int[] = prim::ListConstruct(%n, %m)
  %r : Tensor = onnx::Reshape(%x, %shape)
  %k : Tensor = onnx::Transpose[perm=[0, 2, 1, 3]](%r)
  %kt : Tensor = onnx::Transpose[perm=[0, 1, 3, 2]](%k)
  %y : Tensor = onnx::MatMul(%kt, %kt)
  return (%y, %k)
)IR";

TEST_F(RecordRewritesTest, TransposeFusedPastOneKeptForTheCallerCarriesSpans) {
  // Check that the attention's Transpose composed with its caller's, which
  // stays for the keys handed out, still spans the caller: it does its work.
  Parse(kKeysTransposedTwiceAndKept);
  for (const char* name : {"shape", "r", "k"}) SetScope(name, net_);
  SetScope("kt", to_first_);
  SetScope("y", to_first_);

  RunPass(FuseKeyTransposes(*graph_, vmap_));

  torch::jit::testing::FileCheck().run(R"(
# CHECK: %k : Tensor = onnx::Transpose[perm=[0, 2, 1, 3]](%r)
# CHECK: %kt : Tensor = onnx::Transpose[perm=[0, 2, 3, 1]](%r)
# CHECK: return (%y, %k)
)",
                                       *graph_);
  const BorrowedScopes::Loan* loan = LoanOf("kt");
  ASSERT_NE(loan, nullptr);
  EXPECT_EQ(loan->recorded, to_first_);
  EXPECT_EQ(loan->spans, (BorrowedScopes::Scopes{net_}));
  EXPECT_EQ(log_.fused, 1);
  EXPECT_EQ(LoanOf("k"), nullptr);
  EXPECT_TRUE(log_.records.empty());
}

TEST_F(RecordRewritesTest, TransposeFusedPastOneKeptInTheSameCallCarriesNoSpans) {
  // Check that composing two Transposes of one call, the first kept, lends nothing.
  Parse(kKeysTransposedTwiceAndKept);
  for (const char* name : {"shape", "r"}) SetScope(name, net_);
  for (const char* name : {"k", "kt", "y"}) SetScope(name, to_first_);

  RunPass(FuseKeyTransposes(*graph_, vmap_));

  EXPECT_EQ(testing::CountKind(graph_->block(), c10::Symbol::onnx("Transpose")), 2);
  EXPECT_EQ(LoanOf("kt"), nullptr);
  EXPECT_EQ(log_.fused, 0);
  EXPECT_TRUE(log_.records.empty());
}

// to_last's no-op Cast, then to_first's no-op Cast, which to_first hands out
// and multiplies.
constexpr const char* kNoOpCastsKept = R"IR(
graph(%x : Tensor, %scale : Tensor):
  %c : Tensor = onnx::Cast[to=1](%x)
  %d : Tensor = onnx::Cast[to=1](%c)
  %y : Tensor = onnx::Mul(%d, %scale)
  return (%y, %d)
)IR";

TEST_F(RecordRewritesTest, ReaderRewiredPastKeptNodesToAValueItsCallNeverReceivedIsRecordedRewired) {
  // Check that when the pass makes to_first's Mul read %x past both Casts (kept
  // as they are), to_first, which received %c only, is recorded rewired.
  Parse(kNoOpCastsKept);
  SetScope("c", to_last_);
  SetScope("d", to_first_);
  SetScope("y", to_first_);
  Node* y = NodeOf("y");
  Value* x = vmap_.at("x");

  RunPass([y, x] { y->replaceInput(0, x); });

  torch::jit::testing::FileCheck().run(R"(
# CHECK: %d : Tensor = onnx::Cast[to=1](%c)
# CHECK: %y : Tensor = onnx::Mul(%x, %scale)
)",
                                       *graph_);
  ASSERT_EQ(log_.records.size(), 1u);
  EXPECT_EQ(log_.records[0].kind, RewriteRecord::Kind::kRewired);
  EXPECT_TRUE(borrowed_.empty());
  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs), std::vector<std::string>{"/Net/ToFirst#0"});
}

TEST_F(RecordRewritesTest, ReaderRewiredPastKeptNodesToAValueItsCallReceivedIsNotRecorded) {
  // Check that reading %c past to_first's own Cast (its input: received) and
  // reading an unrelated value (%scale) record no rewrite.
  Parse(kNoOpCastsKept);
  SetScope("c", to_last_);
  SetScope("d", to_first_);
  SetScope("y", to_first_);
  Node* y = NodeOf("y");
  Value* c = vmap_.at("c");
  Value* scale = vmap_.at("scale");

  RunPass([y, c, scale] {
    y->replaceInput(0, c);
    y->replaceInput(1, scale);
  });

  EXPECT_TRUE(Tag().rewrites.empty());
  EXPECT_TRUE(borrowed_.empty());
}

TEST_F(RecordRewritesTest, PairCancelledBetweenANestedCallAndItsCallerNamesEveryCallBetween) {
  // Check that a permute in the norm cancelled against the encoder's inverse
  // names, once tagged, the norm, its output block, the layer and the encoder:
  // the three inner calls all handed out the value between the two.
  Parse(kTransposePair);
  SetScope("t1", norm_);
  SetScope("t2", encoder_);
  SetScope("y", encoder_);

  RunPass(CancelTransposePair(vmap_));

  ASSERT_EQ(log_.records.size(), 1u);
  EXPECT_EQ(Sorted(log_.records[0].scopes), Sorted({norm_, encoder_}));
  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(tagging.rewrites[0].kind, RewriteRecord::Kind::kRemoved);
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs),
            (std::vector<std::string>{"/Net/Encoder", "/Net/Encoder/Layer#0", "/Net/Encoder/Layer/Output#0",
                                      "/Net/Encoder/Layer/Output/Norm"}));
}

TEST_F(RecordRewritesTest, PairCancelledInsideOneLayerNamesNoCallAroundIt) {
  // Check that a pair cancelled between the norm and its output block names
  // those two only: the layer and the encoder hold both ends.
  Parse(kTransposePair);
  SetScope("t1", norm_);
  SetScope("t2", output_);
  SetScope("y", output_);

  RunPass(CancelTransposePair(vmap_));

  HierarchyTagging tagging = Tag();
  ASSERT_EQ(tagging.rewrites.size(), 1u);
  EXPECT_EQ(TagsOf(tagging.rewrites[0].refs),
            (std::vector<std::string>{"/Net/Encoder/Layer/Output", "/Net/Encoder/Layer/Output/Norm"}));
}

TEST_F(RecordRewritesTest, TransposeFusedAcrossANestedCallSpansEveryCallBetween) {
  // Check that the norm's Transpose absorbing the encoder's (kept) spans, once
  // tagged, the layer and the output block between them too, and moves to the encoder.
  Parse(kKeysTransposedTwiceAndKept);
  for (const char* name : {"shape", "r", "k"}) SetScope(name, encoder_);
  SetScope("kt", norm_);
  SetScope("y", norm_);

  RunPass(FuseKeyTransposes(*graph_, vmap_));

  HierarchyTagging tagging = Tag();
  const TaggedNode* fused = nullptr;
  for (const TaggedNode& tagged : tagging.nodes) {
    if (tagged.node == NodeOf("kt")) fused = &tagged;
  }
  ASSERT_NE(fused, nullptr);
  EXPECT_EQ(call_tags_->Tag(fused->tag), "/Net/Encoder");
  EXPECT_EQ(TagsOf(fused->spans()),
            (std::vector<std::string>{"/Net/Encoder", "/Net/Encoder/Layer#0", "/Net/Encoder/Layer/Output#0",
                                      "/Net/Encoder/Layer/Output/Norm"}));
}

TEST_F(RecordRewritesTest, BlankConstantFoldedFromTwoModulesIsRecordedTheSameEveryTime) {
  // Check that a new unscoped Constant replacing nodes of to_first and head gets the same record on every run.
  std::vector<std::shared_ptr<torch::jit::Graph>> graphs;  // kept alive, so every run has other addresses
  std::vector<std::string> recorded;
  // Six nodes ahead of the folded pair, so the pass's node maps hold enough entries to depend on addresses.
  for (int run = 0; run < 200; ++run) {
    Parse(R"IR(
graph(%x : Tensor, %w : Tensor, %other : Tensor):
  %a1 : Tensor = onnx::Relu(%x)
  %a2 : Tensor = onnx::Relu(%a1)
  %a3 : Tensor = onnx::Relu(%a2)
  %a4 : Tensor = onnx::Relu(%a3)
  %a5 : Tensor = onnx::Relu(%a4)
  %a6 : Tensor = onnx::Relu(%a5)
  %n : Tensor = onnx::Neg(%w)
  %t : Tensor = onnx::Transpose[perm=[1, 0]](%n)
  %y : Tensor = onnx::MatMul(%a6, %t)
  return (%y)
)IR");
    graphs.push_back(graph_);
    SetScope("n", to_first_);
    SetScope("t", head_);
    SetScope("y", head_);
    Node* y = NodeOf("y");
    RunPass(ReplaceWeightChain(vmap_, [&] { return NewConstant(*graph_, y); }));
    const BorrowedScopes::Loan* loan = borrowed_.Find(Only(kConstant)->scope());
    ASSERT_NE(loan, nullptr) << "run " << run;
    EXPECT_EQ(Sorted(loan->folded_from), Sorted({to_first_, head_})) << "run " << run;
    recorded.push_back(loan->recorded->namesFromRoot());
  }
  std::set<std::string> distinct(recorded.begin(), recorded.end());
  std::string listed;
  for (const std::string& scope : distinct) listed += "\n  " + scope;
  EXPECT_EQ(distinct.size(), 1u) << "records seen over " << recorded.size() << " runs:" << listed;
}

}  // namespace
}  // namespace hiertag
