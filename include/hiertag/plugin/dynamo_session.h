// DynamoSession: one tagged export by torch's dynamo (torch.export-based)
// exporter, as the stages it goes through (torch 2.13,
// torch/onnx/_internal/exporter/_core.py export):
//
//   stage        entered by (hook in plugin/dynamo_hooks.cpp)         hiertag's work
//   kCapture     _core.export, HIERTAG=1                              module table; every forward
//                                                                     wrapped: each call recorded
//                                                                     (EnterCall/ExitCall) and the FX
//                                                                     nodes made during it annotated
//                                                                     with it (node.meta["custom"])
//   kObserving   _exported_program_to_onnx_program returned           each ONNX node's call read from
//                                                                     its FX node (Translated); then
//                                                                     every pass of the ONNX optimizer
//                                                                     torch runs (Observe)
//   kTagged      _core.export returning, and after each later         TagPassGraph over the last graph
//                ONNXProgram.optimize()                               (Tag)
//
// Each step checks that the session is in a stage it may follow, so an
// exporter that runs its steps in another order stops the export instead of
// writing wrong tags. Knows nothing about Python or torch: the hooks describe
// onnx_ir's graphs as PassGraphs whose owners are the calls recorded here
// (owner k < calls().size() is call k) or loans of them (owner calls().size()
// + j is loans()[j]).
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "hiertag/core/export/export_options.h"
#include "hiertag/core/export/export_report.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/rewrites/classify_rewrites.h"
#include "hiertag/core/rewrites/pass_graph.h"
#include "hiertag/core/tagging/tag_pass_graph.h"

namespace hiertag {

enum class DynamoStage { kCapture, kObserving, kTagged };
const char* DynamoStageName(DynamoStage stage);

// A graph as the hooks read it: the PassGraph, and what tagging reads beside it.
struct DynamoGraph {
  PassGraph graph;
  std::vector<uint32_t> holders;                            // per node: its graph's holder, or PassGraph::kMade
  std::vector<std::pair<ValueId, uint32_t>> nested_inputs;  // values a nested graph receives, and its holder
  size_t user_inputs = 0;                                   // graph.graph_inputs' first ones
};

class DynamoSession {
 public:
  DynamoSession(ModuleTable modules, ExportOptions options);

  DynamoStage stage() const { return stage_; }
  const ModuleTable& modules() const { return modules_; }
  const ExportOptions& options() const { return options_; }
  const std::vector<ModuleCallRecord>& calls() const { return calls_; }
  const std::vector<OwnerLoan>& loans() const { return loans_; }

  // kCapture. A call of module `module` begins, inside the call under way
  // (if any); returns its number, the owner of what it makes.
  int EnterCall(int module);
  // kCapture. The call under way ends (returned or raised).
  void ExitCall();
  // The call under way, or -1.
  int current_call() const { return stack_.empty() ? -1 : stack_.back(); }

  // kCapture/kTagged -> kObserving. The graph as torch translated it: each
  // node's owner the call its FX node was made in, or kNoOwner.
  void Translated(DynamoGraph graph);
  // The graph last noted: the next one pairs its nodes with it.
  const DynamoGraph& graph() const { return graph_; }

  // kObserving. Pass `pass` ran; `after` is the graph after it, each node
  // paired with graph()'s (PassGraph::Node::before) and owning what it owned
  // there, each node the pass made owning what the hooks read of it. Records
  // what it rewrote across calls (RewriteClassifier) and notes `after`.
  void Observe(const std::string& pass, DynamoGraph after);
  // Where the classification's debug lines go (none by default).
  void set_debug_log(RewriteDebugLog log) { debug_log_ = std::move(log); }

  // kObserving/kTagged -> kTagged. Tags the graph last noted.
  PassGraphTagging Tag(CallTags& call_tags);

  // Raises the injected failure (HIERTAG_INJECT_FAILURE, tests only) when `step` is it.
  void MaybeFailAt(std::string_view step) const;

  // Where hiertag's own work goes, as the report line breaks it down.
  enum class Work { kSetUp, kCapture, kTranslation, kPasses, kTagging, kEntries, kCount };
  void AddOwnWork(Work work, std::chrono::steady_clock::duration time) { own_time_[static_cast<int>(work)] += time; }
  // The passes part broken down: reading onnx_ir's graph (the hooks), and
  // comparing and classifying (Observe).
  void AddReadTime(std::chrono::steady_clock::duration time) { read_time_ += time; }
  // The HIERTAG_REPORT line (with newline) of the session's last tagging.
  std::string ReportLine(const PassGraphTagging& tagging) const;

 private:
  void Expect(std::initializer_list<DynamoStage> allowed, const char* step) const;
  void Apply(PassRewrites rewrites, const std::string& pass, PassGraph& after);

  ModuleTable modules_;
  ExportOptions options_;
  DynamoStage stage_ = DynamoStage::kCapture;
  std::vector<ModuleCallRecord> calls_;
  std::vector<int> stack_;
  DynamoGraph graph_;
  std::vector<OwnerLoan> loans_;
  std::vector<PassRecord> records_;
  RewriteClassifier classifier_;
  RewriteDebugLog debug_log_;
  int observed_passes_ = 0;
  int changed_passes_ = 0;
  int fused_ = 0;
  int merged_ = 0;
  std::chrono::steady_clock::duration own_time_[static_cast<int>(Work::kCount)] = {};
  std::chrono::steady_clock::duration read_time_{};
  std::chrono::steady_clock::duration classify_time_{};
};

}  // namespace hiertag
