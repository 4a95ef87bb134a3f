// ExportSession: the stages of one tagged export and hiertag's work in each.
#include "hiertag/plugin/export_session.h"

#include <algorithm>
#include <iterator>
#include <stdexcept>

#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/passes/assign_hierarchy_tags.h"
#include "hiertag/passes/graph_walk.h"
#include "hiertag/passes/mark_inlined_calls.h"
#include "hiertag/passes/record_cse_sharing.h"
#include "hiertag/passes/tagged_model_entries.h"

namespace hiertag {

const char* ExportStageName(ExportStage stage) {
  switch (stage) {
    case ExportStage::kTracing:
      return "tracing";
    case ExportStage::kOptimizing:
      return "optimizing";
    case ExportStage::kTagged:
      return "tagged";
    case ExportStage::kPlanned:
      return "planned";
    case ExportStage::kWritten:
      return "written";
  }
  return "?";
}

ExportSession::ExportSession(ModuleTable modules, std::unordered_set<std::string> member_names, ExportOptions options,
                             InstanceScopeSymbols scope_symbols)
    : modules_(std::move(modules)),
      member_names_(std::move(member_names)),
      scope_symbols_(std::move(scope_symbols)),
      options_(std::move(options)) {}

void ExportSession::Expect(std::initializer_list<ExportStage> allowed, const char* step) const {
  if (std::find(allowed.begin(), allowed.end(), stage_) != allowed.end()) return;
  std::string expected;
  for (ExportStage stage : allowed) expected += (expected.empty() ? "" : " or ") + std::string(ExportStageName(stage));
  throw std::runtime_error(std::string("hiertag: torch's exporter reached ") + step + " while the export was " +
                           ExportStageName(stage_) + " (expected " + expected +
                           "); this torch's exporter runs its stages in another order; nothing written");
}

void ExportSession::MaybeFailAt(std::string_view step) const {
  if (options_.inject_failure_at == step) {
    throw std::runtime_error("hiertag: injected failure at " + std::string(step) + " (HIERTAG_INJECT_FAILURE)");
  }
}

void ExportSession::OwnWork::RunTorch(const std::function<void()>& run) {
  struct Timer {
    std::chrono::steady_clock::duration& total;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timer() { total += std::chrono::steady_clock::now() - start; }
  } timer{torch_time_};
  run();
}

void ExportSession::OwnWork::Then(Work next) {
  std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now();
  session_.own_time_[static_cast<int>(work_)] += now - start_ - torch_time_;
  work_ = next;
  start_ = now;
  torch_time_ = {};
}

void ExportSession::BeforeFunctionSubstitution(torch::jit::Graph& graph) {
  Expect({ExportStage::kTracing, ExportStage::kOptimizing}, "_jit_pass_onnx_function_substitution");
  OwnWork own(*this, Work::kInlining);
  VisitNodesAndReturns(graph.block(), [this](torch::jit::Node* node) {
    if (node->kind() != c10::prim::CallFunction) return true;
    const BorrowedScopes::Loan* loan = borrowed_.Find(node->scope());
    if (loan == nullptr || loan->shared_with.empty()) return true;
    InlinedAlias alias{{}, {loan->shared_with.begin(), loan->shared_with.end()}};
    for (torch::jit::Value* output : node->outputs()) {
      for (const torch::jit::Use& use : output->uses()) alias.uses.emplace_back(use.user, use.offset);
    }
    inlined_aliases_.push_back(std::move(alias));
    return true;
  });
  // Which nodes existed before is asked only about the aliases' readers: with
  // no alias call (most models) no set of every node is built, here or after.
  if (inlined_aliases_.empty()) return;
  std::vector<torch::jit::Node*> nodes;
  CollectNodesAndReturns(graph.block(), &nodes);
  before_inlining_.reserve(nodes.size());
  before_inlining_.insert(nodes.begin(), nodes.end());
}

void ExportSession::AfterFunctionSubstitution(torch::jit::Graph& graph) {
  Expect({ExportStage::kTracing, ExportStage::kOptimizing}, "_jit_pass_onnx_function_substitution");
  stage_ = ExportStage::kOptimizing;
  MaybeFailAt("function-substitution");
  OwnWork own(*this, Work::kInlining);
  MarkInlinedCalls(graph, borrowed_);
  if (inlined_aliases_.empty()) return;
  std::vector<torch::jit::Node*> nodes;
  CollectNodesAndReturns(graph.block(), &nodes);
  ska::flat_hash_set<torch::jit::Node*> alive(nodes.begin(), nodes.end());
  for (const InlinedAlias& alias : inlined_aliases_) {
    for (const auto& [user, offset] : alias.uses) {
      if (!alive.count(user) || !before_inlining_.count(user)) continue;  // inlined itself
      torch::jit::Node* maker = user->input(offset)->node();
      if (before_inlining_.count(maker)) continue;  // the function returned a value from before the call
      for (const torch::jit::ScopePtr& caller : alias.shared_with) borrowed_.ShareWith(maker, caller);
    }
  }
  inlined_aliases_.clear();
  before_inlining_.clear();
}

void ExportSession::ObservePass(torch::jit::Graph& graph, const char* pass, const std::function<void()>& run) {
  Expect({ExportStage::kTracing, ExportStage::kOptimizing}, pass);
  stage_ = ExportStage::kOptimizing;
  MaybeFailAt("graph-pass");
  ++observed_passes_;  // however it ends
  OwnWork own(*this, Work::kPasses);
  recorder_.Observe(graph, pass, [&] { own.RunTorch(run); });
}

void ExportSession::ObserveCse(torch::jit::Graph& graph, const std::function<void()>& run) {
  Expect({ExportStage::kTracing, ExportStage::kOptimizing}, "_jit_pass_cse");
  stage_ = ExportStage::kOptimizing;
  MaybeFailAt("cse");
  OwnWork own(*this, Work::kCse);
  RecordCseSharing(graph, borrowed_, [&] { own.RunTorch(run); });
}

void ExportSession::NoteInitializers(const torch::jit::Graph& graph, size_t initializer_count) {
  Expect({ExportStage::kOptimizing}, "_jit_pass_onnx_eliminate_unused_items");
  MaybeFailAt("unused-items");
  user_input_count_ = static_cast<int>(graph.inputs().size()) - static_cast<int>(initializer_count);
}

void ExportSession::TagFinalGraph(torch::jit::Graph& graph, const std::function<void()>& name_nodes) {
  Expect({ExportStage::kOptimizing}, "_jit_pass_onnx_assign_scoped_names_for_node_and_value");
  MaybeFailAt("tagging");
  // One scope over tagging and describing: declared first, it ends last, so
  // letting go of the tagging's results counts as own work too.
  OwnWork own(*this, Work::kTagging);
  CallTags call_tags(modules_);
  HierarchyTagging tagging = AssignHierarchyTags(graph, modules_, call_tags, borrowed_, member_names_,
                                                 user_input_count_, &calls_, &rewrites_, &scope_symbols_);
  borrowed_.Restore(graph.block());
  RestoreTorchScopes(graph.block());
  own.RunTorch(name_nodes);
  own.Then(Work::kEntries);
  entries_ = DescribeTaggedModel(tagging, call_tags, modules_, graph);
  report_.nodes = tagging.nodes.size();
  for (int rule = 0; rule < kTagRuleCount; ++rule) {
    report_.rule_counts.emplace_back(TagRuleName(static_cast<TagRule>(rule)), tagging.rule_counts[rule]);
  }
  for (const TaggedNode& tagged : tagging.nodes) {
    if (tagged.rule != TagRule::kRecorded) ++report_.unrecorded_op_types[JitNode(tagged)->kind().toUnqualString()];
  }
  report_.unresolved_scope_levels = tagging.unresolved_scope_levels;
  report_.module_calls = calls_.calls().size();
  report_.direct_calls = calls_.direct_calls();
  report_.aliases = calls_.aliases();
  report_.fused = rewrites_.fused;
  report_.merged = rewrites_.merged;
  report_.removed_or_folded = rewrites_.records.size();
  stage_ = ExportStage::kTagged;
}

void ExportSession::PlanFile(std::string_view serialized) {
  Expect({ExportStage::kTagged, ExportStage::kPlanned}, "Graph._export_onnx");
  MaybeFailAt("plan");
  OwnWork own(*this, Work::kPlan);
  std::string error;
  if (!PlanTaggedModel(serialized, entries_.nodes, entries_.model, &plan_, &error)) {
    throw std::runtime_error("hiertag: cannot tag the exported model (" + error + "); nothing written");
  }
  stage_ = ExportStage::kPlanned;
}

void ExportSession::WriteFile(const std::function<void(std::string_view)>& sink) {
  Expect({ExportStage::kPlanned}, "_export_file");
  MaybeFailAt("write");
  auto start = std::chrono::steady_clock::now();
  plan_.ForEachChunk(sink);
  plan_ = TaggedModelPlan();  // written: its arena goes now, not at the session's end
  write_time_ += std::chrono::steady_clock::now() - start;
  stage_ = ExportStage::kWritten;
}

void ExportSession::Release() {
  OwnWork own(*this, Work::kRelease);
  {
    // Moved into locals that end here, inside the timed scope.
    ModuleTable modules = std::move(modules_);
    std::unordered_set<std::string> member_names = std::move(member_names_);
    std::vector<InlinedAlias> inlined_aliases = std::move(inlined_aliases_);
    ska::flat_hash_set<torch::jit::Node*> before_inlining = std::move(before_inlining_);
    recorder_.Release();
    RewriteLog rewrites = std::move(rewrites_);
    ModuleCalls calls = std::move(calls_);
    BorrowedScopes borrowed = std::move(borrowed_);
    TaggedModelEntries entries = std::move(entries_);
    TaggedModelPlan plan = std::move(plan_);
  }
  TrimMappedMemory();  // the blocks kept for reuse during the export
}

std::string ExportSession::ReportLine() const {
  if (stage_ != ExportStage::kWritten) return "";
  using Milliseconds = std::chrono::duration<double, std::milli>;
  ExportReport report = report_;
  static constexpr const char* kWorkNames[] = {"set-up",  "inlining", "passes", "cse",
                                               "tagging", "entries",  "plan",   "release"};
  static_assert(std::size(kWorkNames) == static_cast<size_t>(Work::kCount));
  for (int work = 0; work < static_cast<int>(Work::kCount); ++work) {
    double milliseconds = Milliseconds(own_time_[work]).count();
    report.own_milliseconds += milliseconds;
    report.own_parts.emplace_back(kWorkNames[work], milliseconds);
  }
  report.observed_passes = observed_passes_;
  const RewriteTimes& times = recorder_.times();
  for (const auto& [part, time] :
       {std::pair<const char*, std::chrono::steady_clock::duration>{"snapshot", times.snapshot},
        {"check", times.check},
        {"matching", times.matching},
        {"classify", times.classify}}) {
    report.pass_parts.emplace_back(part, Milliseconds(time).count());
  }
  report.write_milliseconds = Milliseconds(write_time_).count();
  return FormatExportReport(report);
}

}  // namespace hiertag
