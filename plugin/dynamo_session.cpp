// DynamoSession: the calls recorded, the graphs observed, and the tagging.
#include "hiertag/plugin/dynamo_session.h"

#include <algorithm>
#include <stdexcept>

namespace hiertag {

const char* DynamoStageName(DynamoStage stage) {
  switch (stage) {
    case DynamoStage::kCapture:
      return "capture";
    case DynamoStage::kObserving:
      return "observing";
    case DynamoStage::kTagged:
      return "tagged";
  }
  return "?";
}

DynamoSession::DynamoSession(ModuleTable modules, ExportOptions options)
    : modules_(std::move(modules)), options_(std::move(options)) {}

void DynamoSession::Expect(std::initializer_list<DynamoStage> allowed, const char* step) const {
  if (std::find(allowed.begin(), allowed.end(), stage_) != allowed.end()) return;
  throw std::logic_error(std::string("hiertag: torch's dynamo exporter reached ") + step +
                         " while hiertag's export was " + DynamoStageName(stage_) +
                         ": this exporter runs its steps in an order hiertag does not know");
}

void DynamoSession::MaybeFailAt(std::string_view step) const {
  if (options_.inject_failure_at == step) {
    throw std::runtime_error("hiertag: injected failure at " + std::string(step) + " (HIERTAG_INJECT_FAILURE)");
  }
}

int DynamoSession::EnterCall(int module) {
  Expect({DynamoStage::kCapture}, "a module call");
  calls_.push_back({module, current_call()});
  stack_.push_back(static_cast<int>(calls_.size()) - 1);
  return stack_.back();
}

void DynamoSession::ExitCall() {
  if (!stack_.empty()) stack_.pop_back();
}

void DynamoSession::Translated(DynamoGraph graph) {
  Expect({DynamoStage::kCapture, DynamoStage::kTagged}, "the translated ONNX graph");
  graph_ = std::move(graph);
  stage_ = DynamoStage::kObserving;
}

void DynamoSession::Observe(const std::string& pass, DynamoGraph after) {
  Expect({DynamoStage::kObserving, DynamoStage::kTagged}, "an ONNX pass");
  stage_ = DynamoStage::kObserving;
  ++observed_passes_;
  auto start = std::chrono::steady_clock::now();
  struct Timed {
    std::chrono::steady_clock::time_point start;
    std::chrono::steady_clock::duration& total;
    ~Timed() { total += std::chrono::steady_clock::now() - start; }
  } timed{start, classify_time_};
  if (!Unchanged(graph_.graph, after.graph)) {
    ++changed_passes_;
    size_t calls = calls_.size();
    LoanLookup loans = [&](Owner owner) -> const OwnerLoan* {
      if (owner < 0 || static_cast<size_t>(owner) < calls) return nullptr;
      return &loans_.at(owner - calls);
    };
    if (debug_log_)
      debug_log_(pass + ": changed the graph (" + std::to_string(graph_.graph.size()) + " -> " +
                 std::to_string(after.graph.size()) + " nodes and returns)");
    Apply(classifier_.Classify(graph_.graph, after.graph, pass, loans, debug_log_), pass, after.graph);
  }
  graph_ = std::move(after);
}

void DynamoSession::Apply(PassRewrites rewrites, const std::string& pass, PassGraph& after) {
  size_t calls = calls_.size();
  auto loan_of = [&](Owner owner) -> OwnerLoan* {
    if (owner < 0 || static_cast<size_t>(owner) < calls) return nullptr;
    return &loans_.at(owner - calls);
  };
  auto lend = [&](uint32_t node, OwnerLoan loan) {
    loans_.push_back(std::move(loan));
    after.nodes[node].owner = static_cast<Owner>(calls + loans_.size() - 1);
  };
  // A merged node is shared with the group's owners; a loan is held by its
  // node alone (a node a pass makes owns a call, never a loan), so it grows in place.
  std::vector<uint32_t> shared_nodes;
  for (const PassRewrites::Shared& shared : rewrites.shares) {
    Owner owner = after.nodes[shared.node].owner;
    OwnerLoan* loan = loan_of(owner);
    Owner recorded = loan ? loan->recorded : owner;
    if (recorded == kNoOwner || shared.with == recorded) continue;
    if (loan) {
      if (std::find(loan->shared_with.begin(), loan->shared_with.end(), shared.with) != loan->shared_with.end())
        continue;
      loan->shared_with.push_back(shared.with);
    } else {
      lend(shared.node, OwnerLoan{owner, {}, {}, {}, {shared.with}});
    }
    shared_nodes.push_back(shared.node);
  }
  std::sort(shared_nodes.begin(), shared_nodes.end());
  merged_ += static_cast<int>(std::unique(shared_nodes.begin(), shared_nodes.end()) - shared_nodes.begin());
  for (PassRewrites::Lent& lent : rewrites.loans) {
    // The grown loan is whole (what the node's loan held, and more); the
    // node's shares above stay with it.
    if (OwnerLoan* held = loan_of(after.nodes[lent.node].owner)) lent.loan.shared_with = held->shared_with;
    lend(lent.node, std::move(lent.loan));
  }
  fused_ += rewrites.fused;
  for (OwnerRewrite& record : rewrites.records) records_.push_back({pass, std::move(record)});
}

PassGraphTagging DynamoSession::Tag(CallTags& call_tags) {
  Expect({DynamoStage::kObserving, DynamoStage::kTagged}, "tagging");
  stage_ = DynamoStage::kTagged;
  TaggedGraph graph{graph_.graph, graph_.holders, graph_.nested_inputs, graph_.user_inputs};
  return TagPassGraph(graph, calls_, loans_, records_, modules_, call_tags);
}

std::string DynamoSession::ReportLine(const PassGraphTagging& tagging) const {
  ExportReport report;
  report.nodes = tagging.tagging.nodes.size();
  for (int rule = 0; rule < kTagRuleCount; ++rule) {
    report.rule_counts.emplace_back(TagRuleName(static_cast<TagRule>(rule)), tagging.tagging.rule_counts[rule]);
  }
  report.module_calls = calls_.size();
  report.fused = fused_;
  report.merged = merged_;
  report.removed_or_folded = records_.size();
  report.observed_passes = observed_passes_;
  static const char* const kParts[] = {"set-up", "capture", "translation", "passes", "tagging", "entries"};
  std::chrono::steady_clock::duration total{};
  for (int work = 0; work < static_cast<int>(Work::kCount); ++work) {
    total += own_time_[work];
    report.own_parts.emplace_back(kParts[work], std::chrono::duration<double, std::milli>(own_time_[work]).count());
  }
  report.own_milliseconds = std::chrono::duration<double, std::milli>(total).count();
  report.pass_parts = {{"read", std::chrono::duration<double, std::milli>(read_time_).count()},
                       {"classify", std::chrono::duration<double, std::milli>(classify_time_).count()}};
  return FormatExportReport(report);
}

}  // namespace hiertag
