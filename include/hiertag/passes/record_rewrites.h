// RecordRewrites: runs one of torch's export passes and records what it
// rewrote across module boundaries.
//
// Measured (torch 2.13, ../shared/notes section 9): the ONNX peephole fuses a
// Transpose of one module into the next module's Transpose (or Gemm), cancels a
// permute and its inverse in two modules outright, and the eval peephole fuses a
// Conv of one module with a BatchNorm of another; constant folding turns whole
// modules into initializers. So every graph pass of the export is observed: the
// graph is noted before it, and after a pass that changed it both graphs are
// handed to the core's classification (core/rewrites/classify_rewrites.h, the
// rules, shared with the dynamo path's observer) as PassGraphs whose owners are
// the nodes' scopes. Its result is applied here: a node lent spans (fused) or
// folded_from (a constant) gets a borrowed scope carrying them; a merged node is
// shared with the group's scopes (as after CSE); removed, folded and rewired
// records keep their scopes.
//
// Scopes are resolved to tags only at tagging time (AssignHierarchyTags),
// which also widens a removed record and a fused node's spans from the calls
// whose nodes were involved to every call between them (a permute cancelled
// between a norm deep in the last layer and the encoder's final permute cuts
// the norm's, its output block's and the layer's boundaries).
//
// Precondition: any graph stage of the export; a pass that returns a new graph
// (the aten -> ONNX conversion, canonicalize) is not observed (torch copies
// scopes there one to one).
//
// Before:  %t1 = onnx::Transpose[perm=[0,2,3,1]](%x)   scope: .../to_last
//          %t2 = onnx::Transpose[perm=[0,3,1,2]](%t1)  scope: .../to_first
//          %y  = onnx::Mul(%t2, %scale)                scope: .../to_first
// After:   %y  = onnx::Mul(%x, %scale)
//          log: removed {to_last, to_first} by _jit_pass_onnx_peephole
//
// Before:  %k  = onnx::Transpose[perm=[0,2,1,3]](%r)   scope: .../layers.0 (also handed out)
//          %kt = onnx::Transpose[perm=[0,1,3,2]](%k)   scope: .../layers.0/attention
// After:   %k  = onnx::Transpose[perm=[0,2,1,3]](%r)
//          %kt = onnx::Transpose[perm=[0,2,3,1]](%r)   lent: attention, spans {layers.0}
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hiertag/core/tagging/call_tagging.h"
#include "hiertag/passes/borrowed_scopes.h"

namespace hiertag {

struct RewriteRecord {
  using Kind = RewriteKind;
  Kind kind = Kind::kRemoved;
  std::string pass;
  std::vector<torch::jit::ScopePtr> scopes;  // removed, folded: scopes of the nodes it removed
  size_t initializer = 0;                    // folded: the initializer value's unique()
  // rewired: the reading node's scope; the scope of the node whose value it
  // read before; the scopes that made and read the value it reads now, before
  // the pass; that value's graph input offset, or -1.
  torch::jit::ScopePtr reader;
  torch::jit::ScopePtr replaced;
  std::vector<torch::jit::ScopePtr> value_scopes;
  int graph_input = -1;
};

struct RewriteLog {
  std::vector<RewriteRecord> records;
  int fused = 0;   // nodes lent spans
  int merged = 0;  // nodes shared with merged groups
};

// Where observing the passes spent its time, summed over the passes
// (HIERTAG_REPORT prints it): the walk noting the graph before each pass (and
// letting go of the scopes it held after the pass); the walk telling whether
// the pass changed it; after a pass that did, pairing the nodes before with
// the nodes after (indexing, then a walk over the graph); and classifying what
// it removed, bypassed and made (loans lent included).
struct RewriteTimes {
  std::chrono::steady_clock::duration snapshot{};
  std::chrono::steady_clock::duration check{};
  std::chrono::steady_clock::duration matching{};
  std::chrono::steady_clock::duration classify{};
};

// Observes the export's passes one after another, recording into `log`. It
// keeps its per-node arrays from one pass to the next: once they have grown
// to the graph, observing a pass allocates nothing in proportion to it.
class RewriteRecorder {
 public:
  RewriteRecorder(BorrowedScopes& borrowed, RewriteLog& log);
  ~RewriteRecorder();
  RewriteRecorder(const RewriteRecorder&) = delete;
  RewriteRecorder& operator=(const RewriteRecorder&) = delete;

  // Runs `run_pass` on `graph` (which it changes in place) and records what it rewrote.
  void Observe(torch::jit::Graph& graph, const std::string& pass, const std::function<void()>& run_pass);

  const RewriteTimes& times() const { return times_; }

  // Lets go of the arrays kept between passes (the export is over); a later
  // Observe makes them anew.
  void Release();

  struct Arrays;  // defined where it is used (record_rewrites.cpp)

 private:
  BorrowedScopes& borrowed_;
  RewriteLog& log_;
  std::unique_ptr<Arrays> arrays_;
  RewriteTimes times_;
};

// Observes one pass: runs `run_pass` on `graph` (which it changes in place)
// and records into `log`.
void RecordRewrites(torch::jit::Graph& graph, const std::string& pass, BorrowedScopes& borrowed, RewriteLog& log,
                    const std::function<void()>& run_pass);

}  // namespace hiertag
