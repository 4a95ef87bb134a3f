// ExportSession: one tagged export, as the sequence of stages torch's
// TorchScript-based exporter goes through (torch 2.13,
// torch/onnx/_internal/torchscript_exporter/utils.py).
//
//   stage        entered by (hook in plugin/torchscript_hooks.cpp) hiertag's work
//   kTracing     _setup_trace_module_map                            module table, instance
//                                                                   scopes, module calls
//   kOptimizing  the first graph pass after the trace               MarkInlinedCalls after
//                (_jit_pass_onnx_function_substitution, CSE, ...)    function substitution;
//                                                                   RecordCseSharing,
//                                                                   RecordRewrites
//   kTagged      _jit_pass_onnx_assign_scoped_names_for_node_and_value
//                                                                   AssignHierarchyTags, then
//                                                                   torch names the nodes
//   kPlanned     Graph._export_onnx                                 the tagged file planned
//                                                                   against torch's bytes
//   kWritten     onnx_proto_utils._export_file                      the planned chunks written
//
// Each step checks that the session is in a stage it may follow, so a hook
// called out of order (a torch whose exporter changed) stops the export with
// an error naming both stages instead of writing a wrongly tagged file. The
// session ends with _reset_trace_module_map (torch's finally), after a failed
// export too. Knows nothing about Python.
#pragma once

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir.h>

#include <array>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "hiertag/core/export/export_options.h"
#include "hiertag/core/export/export_report.h"
#include "hiertag/core/export/proto_tagging.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/passes/borrowed_scopes.h"
#include "hiertag/passes/module_calls.h"
#include "hiertag/passes/record_rewrites.h"
#include "hiertag/passes/tagged_model_entries.h"

namespace hiertag {

enum class ExportStage { kTracing, kOptimizing, kTagged, kPlanned, kWritten };
const char* ExportStageName(ExportStage stage);

class ExportSession {
 public:
  // `modules`: finalized; `member_names`: qualified names of the model's
  // parameters and buffers; `scope_symbols`: the modules' instance scope
  // names (none for an export that gives modules no scope names of their own).
  ExportSession(ModuleTable modules, std::unordered_set<std::string> member_names, ExportOptions options,
                InstanceScopeSymbols scope_symbols = {});

  ExportStage stage() const { return stage_; }
  const ModuleTable& modules() const { return modules_; }
  const ExportOptions& options() const { return options_; }
  ModuleCalls& calls() { return calls_; }
  BorrowedScopes& borrowed() { return borrowed_; }

  // kTracing. Before torch inlines the script functions called while tracing:
  // notes the calls whose result a caller reads as its own variable (a tracer
  // alias: the function returned its argument).
  void BeforeFunctionSubstitution(torch::jit::Graph& graph);
  // kTracing/kOptimizing -> kOptimizing. After torch inlined them: lends the
  // call sites' scopes to the inlined nodes (MarkInlinedCalls), and an alias
  // call's sharing to the inlined nodes that now make its result.
  void AfterFunctionSubstitution(torch::jit::Graph& graph);
  // kTracing/kOptimizing -> kOptimizing. Runs torch's pass `pass` (by `run`)
  // and records what it removed or merged across modules (RecordRewrites;
  // RecordCseSharing for CSE).
  void ObservePass(torch::jit::Graph& graph, const char* pass, const std::function<void()>& run);
  void ObserveCse(torch::jit::Graph& graph, const std::function<void()>& run);
  // kOptimizing. torch's final parameter list has `initializer_count` entries:
  // the trailing graph inputs.
  void NoteInitializers(const torch::jit::Graph& graph, size_t initializer_count);
  // kOptimizing -> kTagged. Tags the final graph, gives torch its scopes back,
  // lets torch name the nodes (`name_nodes`), then describes the tagged file.
  void TagFinalGraph(torch::jit::Graph& graph, const std::function<void()>& name_nodes);
  // kTagged/kPlanned -> kPlanned. Plans the tagged file against torch's
  // serialized model, which must stay alive until written; throws (nothing
  // written) when its nodes do not match the tags one to one.
  void PlanFile(std::string_view serialized);
  // kPlanned -> kWritten. Hands the tagged file's chunks to `sink`, in order,
  // then lets go of the plan.
  void WriteFile(const std::function<void(std::string_view)>& sink);

  // Lets go of everything the export recorded (loans, module calls, rewrite
  // records, the file's tags, the observers' arrays) and counts the time as
  // hiertag's own work (`release`): freeing them is a cost of tagging too.
  // At the session's end; the report line stays available.
  void Release();

  // The HIERTAG_REPORT line (with newline) once written; "" otherwise.
  std::string ReportLine() const;

  // Raises the injected failure (HIERTAG_INJECT_FAILURE) when `step` is it.
  void MaybeFailAt(std::string_view step) const;

  // Where hiertag's own work goes, as the report line breaks it down.
  enum class Work { kSetUp, kInlining, kPasses, kCse, kTagging, kEntries, kPlan, kRelease, kCount };

  // Counts `time` as hiertag's own work of kind `work` (the session's set-up
  // and end, timed by the session's maker).
  void AddOwnWork(Work work, std::chrono::steady_clock::duration time) { own_time_[static_cast<int>(work)] += time; }

  // Adds the time until it goes out of scope, less the time spent in
  // RunTorch, to hiertag's own work of kind `work`; however the scope ends:
  // torch goes on exporting after some of its passes throw (shape inference).
  class OwnWork {
   public:
    OwnWork(ExportSession& session, Work work)
        : session_(session), work_(work), start_(std::chrono::steady_clock::now()) {}
    ~OwnWork() {
      session_.own_time_[static_cast<int>(work_)] += std::chrono::steady_clock::now() - start_ - torch_time_;
    }
    OwnWork(const OwnWork&) = delete;
    OwnWork& operator=(const OwnWork&) = delete;

    // Runs torch's work, keeping its time out of hiertag's own.
    void RunTorch(const std::function<void()>& run);

    // Counts the time so far as `work` and what follows as `next`: one scope
    // over both, so what the first part made and the second lets go of is
    // freed inside it.
    void Then(Work next);

   private:
    ExportSession& session_;
    Work work_;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::duration torch_time_{};
  };

 private:
  // Throws unless the session is in one of `allowed`; `step` names the hook.
  void Expect(std::initializer_list<ExportStage> allowed, const char* step) const;

  ModuleTable modules_;
  std::unordered_set<std::string> member_names_;
  InstanceScopeSymbols scope_symbols_;
  ExportOptions options_;
  ExportStage stage_ = ExportStage::kTracing;
  // Alias calls about to be inlined: where their results were read, and with whom they are shared.
  struct InlinedAlias {
    std::vector<std::pair<torch::jit::Node*, size_t>> uses;
    std::vector<torch::jit::ScopePtr> shared_with;
  };
  std::vector<InlinedAlias> inlined_aliases_;
  ska::flat_hash_set<torch::jit::Node*> before_inlining_;
  int user_input_count_ = -1;  // leading graph inputs that are not initializers
  BorrowedScopes borrowed_;
  ModuleCalls calls_;
  RewriteLog rewrites_;
  RewriteRecorder recorder_{borrowed_, rewrites_};  // observes every graph pass into rewrites_
  TaggedModelEntries entries_;                      // the file's tags and tables, once tagged
  TaggedModelPlan plan_;
  ExportReport report_;  // filled when tagged (the times when written)
  std::array<std::chrono::steady_clock::duration, static_cast<int>(Work::kCount)> own_time_{};
  int observed_passes_ = 0;
  std::chrono::steady_clock::duration write_time_{};
};

}  // namespace hiertag
