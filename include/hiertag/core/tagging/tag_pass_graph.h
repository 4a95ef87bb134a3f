// TagPassGraph: tags every node of a final graph whose owners are the module
// calls an export recorded, or loans of them (the dynamo path: each ONNX node
// made from an FX node owns that node's call, recorded when the FX node was
// created; the observers of the optimizer's passes lend the nodes they
// rewrote, classify_rewrites.h). Does not change the graph. No torch, no
// Python.
//
// Owners: [0, calls.size()) are the calls, in the order they ran;
// calls.size() + k is loans[k]. A call's tag is its caller's tag extended by
// its module (CallTags::Call: a filtered torch.nn module adds no level, so its
// call is its caller's). Rules, in order (a node takes the first that applies):
//   recorded    its owner's call (a loan: the loan's recorded call; a loan with
//               spans or shared_with as call_tagging.h's TakeLoan says);
//   enclosing, consumers, neighbours, root  (placement_rules.h), for nodes no
//               record owns: a node in a nested graph takes its holder's tag;
//               a constant the common ancestor of its readers'; any other node
//               the common ancestor of its producers' and readers' (user inputs
//               and graph outputs count as the root; initializers do not).
// Then, as for every tagged export (call_tagging.h): a rule-placed node of a
// tag called several times joins a reader's call, a shared constant stays
// shared only with the calls reading it, the records become the file's
// rewrite records, and containers that never ran are marked.
//
//   calls: 0 root (module 0), 1 block (module 1, caller 0)
//   nodes: MatMul owner 1, Constant no owner read by the MatMul
//   -> MatMul /Net/Block (recorded), Constant /Net/Block (consumers)
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/rewrites/classify_rewrites.h"
#include "hiertag/core/tagging/call_tagging.h"

namespace hiertag {

// A module call as it ran: its module, and the call it ran in (-1: none, the root's call).
struct ModuleCallRecord {
  int module = -1;
  int caller = -1;
};

// A rewrite record of a pass.
struct PassRecord {
  std::string pass;
  OwnerRewrite record;
};

struct PassGraphTagging {
  HierarchyTagging tagging;
  // Per entry of tagging.nodes, the node's index in the graph (its returns are not tagged).
  std::vector<uint32_t> graph_index;
};

struct TaggedGraph {
  const PassGraph& graph;
  // Per node: the index of the node holding its graph, or PassGraph::kMade for the main graph's.
  const std::vector<uint32_t>& holders;
  // The values a nested graph receives (made by no node, no graph input): by whom they are held.
  const std::vector<std::pair<ValueId, uint32_t>>& nested_inputs;
  size_t user_inputs = 0;  // graph.graph_inputs' first ones; the rest are initializers
};

PassGraphTagging TagPassGraph(const TaggedGraph& graph, const std::vector<ModuleCallRecord>& calls,
                              const std::vector<OwnerLoan>& loans, const std::vector<PassRecord>& records,
                              const ModuleTable& modules, CallTags& call_tags);

}  // namespace hiertag
