// Module boundaries: the module-boundary rule (module_calls_in_file.h, README
// "Module boundaries") applied to a tagged file's main graph. The one
// implementation: `hiertag extract` cuts by it, and the Python package's
// verifier, carry, compare and tests ask it through hiertag._core.
//
//   members  the main graph's nodes a reference of which lies within the call
//            (CallsInFile::Place not kOutside), weight nodes aside; a module
//            none of whose nodes is more than a weight node (a position table
//            computed from buffers) is a constant module: its members are its
//            weight nodes whose own reference lies within the call (each call of
//            a table computed twice, a rotary embedding's per layer, has its
//            own), and its boundary has outputs and no inputs.
//   inputs   the values the members read (their If/Loop bodies' outer reads
//            included) that no member makes and that are no weights
//            (initializers, and outputs of weight nodes), in node order.
//   outputs  the values members make that leave the call (Leaves), or that are
//            model outputs not read by another of the maker's references, in
//            node order; a weight's value only for a constant module, and not
//            for a read by another call of that module (the buffer the tracer
//            records once, in the first call: weight data that call copies in,
//            be it a constant call too or one reading its argument's shape).
//
// Weight nodes: Constants without inputs and nodes that read weights alone (the
// Identity torch writes for a deduplicated parameter): data of no call.
//
// Example (a two-layer MLP's second Linear, x -> fc1 -> relu -> fc2 -> y):
//   members {MatMul_3, Add_4}   inputs {relu_out}   outputs {y}
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hiertag/core/file/module_calls_in_file.h"
#include "hiertag/core/file/tagged_file.h"

namespace hiertag {

struct ModuleBoundary {
  std::set<int> members;  // indices into the model's nodes (main graph), in order
  // Every main-graph node a reference of which lies within the call, weight
  // nodes too: the nodes the file gives the call (a call has none when
  // it left no node).
  std::set<int> nodes;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};

// Values a node of `model` reads: its inputs, and the outer values its If/Loop
// bodies read or hand out as they are (at any depth); views of the model's bytes.
std::vector<std::string_view> NodeReads(const OnnxModel& model, int node);

// The main graph's weight nodes (indices into model.nodes), given each main-graph
// node's reads: Constants without inputs and nodes that read weights alone.
std::set<int> WeightNodes(const OnnxModel& model, const std::unordered_map<int, std::vector<std::string_view>>& reads);

// The main graph indexed once (reads, references, producers, consumers,
// weights) for any number of boundary questions. Holds a reference to `file`.
class MainGraphIndex {
 public:
  explicit MainGraphIndex(const TaggedFile& file);

  // The boundary of `target`; std::nullopt with a one-line reason when a node
  // whose tag lies within the target has malformed references (hiertag.call,
  // hiertag.shared_with).
  std::optional<ModuleBoundary> BoundaryOf(const ModuleCall& target, std::string* error) const;

  // The nodes of every call, found in one walk: each node is handed to each
  // ancestor-or-self of its references' tags (every call of it, as a module
  // with one call is asked, and each call the reference ran in), so the cost
  // is the nodes times the tag depth, not the nodes times the calls. What
  // BoundaryOf's scan of the graph selects, for all targets at once.
  struct EveryCallsNodes {
    std::map<std::pair<std::string, std::optional<int64_t>>, std::vector<int>> nodes;  // by (tag, call)
    std::unordered_map<std::string, std::vector<int>> weights_under;  // weight nodes by each ancestor of their tag
  };
  EveryCallsNodes NodesOfEveryCall() const;
  bool HasMalformedRefs() const { return !ref_errors_.empty(); }

  // The boundary of `target`, its candidate nodes given (`nodes`: those with a
  // reference within it; `weights_under`: weight nodes whose own tag lies within
  // its module, any call: the target's own are picked from them).
  ModuleBoundary BoundaryOfNodes(const ModuleCall& target, const std::vector<int>& nodes,
                                 const std::vector<int>& weights_under) const;

  // Whether the edge from `producer` (in `selection`, the target's nodes) to
  // `user` leaves the target: `user` is outside the selection and does not read
  // the value as another module the producer was kept for (hiertag.shared_with):
  // that module's own copy of the computation.
  bool Leaves(int producer, int user, const std::set<int>& selection, const ModuleCall& target) const;

  const std::vector<std::string_view>& Reads(int node) const { return reads_.at(node); }
  bool IsWeight(int node) const { return weight_nodes_.count(node) > 0; }
  bool IsInitializer(std::string_view name) const { return initializers_.count(name) > 0; }
  // The main-graph node making `value`, or -1.
  int Producer(std::string_view value) const;
  // The main-graph nodes reading `value` (empty when none).
  const std::vector<int>& Consumers(std::string_view value) const;

 private:
  // Whether the reader with reference `reader` belongs to one of `producer`'s
  // references that lies outside `target`.
  bool IsOtherSharersRead(int producer, const CallRef& reader, const ModuleCall& target) const;

  const TaggedFile& file_;
  CallsInFile calls_;
  CallRef root_;  // the root's call 0: the reader of the model's outputs
  // Value names are views of the file's bytes (OnnxModel::bytes).
  std::set<std::string_view> initializers_;
  std::set<std::string_view> model_outputs_;
  std::unordered_map<int, std::vector<std::string_view>> reads_;
  std::unordered_map<int, std::vector<CallRef>> refs_;  // its own reference first, then hiertag.shared_with's
  std::unordered_map<int, std::string> ref_errors_;     // nodes with malformed references: why
  std::unordered_map<std::string_view, int> producer_;
  std::unordered_map<std::string_view, std::vector<int>> consumers_;
  std::set<int> weight_nodes_;
};

// Why the file says an export pass (or hiertag carry) removed the boundary of
// `target`: the first rewrite (TaggedFile::rewrites' order) listing a call
// within the target and one outside it (a call listed partly within counts
// as both), or a "rewired" record listing the target itself. One clause:
//   "PASS fused its computation with 'T1', 'T2' into node 'n' (Op)"
//   "PASS removed its boundary with 'T' (nodes of both removed together)"
//   "PASS folded its computation with 'T' into initializers"
//   "PASS rewired it: node 'n' (Op) now reads a value it never received"
//   "PASS: REASON" (a rewired record that names its cause: hiertag carry's)
// std::nullopt when no rewrite cuts it. `hiertag extract` refuses such a call;
// the verifier does not check it.
std::optional<std::string> CutBy(const TaggedFile& file, const CallsInFile& calls, const ModuleCall& target);

// Every call of every module of the table: ((tag, call ordinal), boundary),
// in table order, calls in order; a module with one call is asked as a whole
// (every call). Each is handed to `visit` as it is found, to keep or let go:
// a call's sets list the nodes of every call inside it, so a caller need not
// hold every call's at once. False with the reason as BoundaryOf gives it,
// `visit` having had the calls before the first it concerns.
struct CallBoundary {
  std::string tag;
  int64_t call = 0;
  ModuleBoundary boundary;
};
bool ForEachModuleBoundary(const TaggedFile& file, const std::function<void(CallBoundary&&)>& visit,
                           std::string* error);

// Every call of every module whose boundary a rewrite removed (CutBy), in the
// order of ForEachModuleBoundary: ((tag, call ordinal), why).
struct CutCall {
  std::string tag;
  int64_t call = 0;
  std::string why;
};
std::vector<CutCall> AllCutCalls(const TaggedFile& file);

}  // namespace hiertag
