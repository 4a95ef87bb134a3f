// AssignHierarchyTags: gives every node of the final ONNX graph its module tag.
//
// Precondition: the graph torch is about to serialize (after
// _jit_pass_onnx_deduplicate_initializers, before
// _jit_pass_onnx_assign_scoped_names_for_node_and_value), with the scopes torch
// recorded when each node was created, and borrowed scopes still in place.
// Does not change the graph. Deterministic; idempotent.
//
// Rules, in order (a node takes the first that applies):
//   recorded        its scope (or the scope lent to it, BorrowedScopes) resolves
//                   to a module call: that call's tagged module (ScopeResolver).
//   parameter-owner an Identity with no recorded scope whose input is a graph
//                   input and whose output carries a parameter or buffer name
//                   (torch's _jit_pass_onnx_deduplicate_initializers writes one
//                   per deduplicated initializer): the tagged module owning it.
//   enclosing       a node inside an If/Loop body or a graph attribute: the tag
//                   of the node that holds the body.
//   consumers       a node without inputs (Constant): the common tag-tree
//                   ancestor of the tags of its consumers (a graph output counts
//                   as the root; a body output as the node holding the body).
//   neighbours      any other node (made by a later pass): the common tag-tree
//                   ancestor of the tags of the nodes producing its inputs and
//                   consuming its outputs (user inputs and graph outputs count
//                   as the root; initializers, e.g. the biases torch makes when
//                   it fuses Conv and BatchNorm, do not count).
//   root            nothing above applies (an unscoped node with no neighbours at all).
// consumers / neighbours are settled in pre-order sweeps until nothing changes;
// while some neighbour is itself unsettled the node waits, and only when no
// sweep settles anything does the first waiting node settle on the neighbours
// known so far. Every rule result is an ancestor-or-self of each module whose
// data the node touches, so a rule never moves a node into a sibling's subtree.
//
// Shared nodes (RecordCseSharing) also list the tags of the
// merged duplicates' modules (minus their own tag) in `shared_with`.
//
// Before (scopes):   %5 = onnx::Relu(%4)   scope: hiertag.m0|Net::/hiertag.m2|Layer::layers.0
// After (result):    {op_type: "Relu", tag: "/Net/Layer.0"}
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "hiertag/borrowed_scopes.h"
#include "hiertag/module_table.h"
#include "hiertag/proto_tagging.h"

namespace hiertag {

enum class TagRule { kRecorded, kParameterOwner, kEnclosing, kConsumers, kNeighbours, kRoot };
inline constexpr int kTagRuleCount = 6;
const char* TagRuleName(TagRule rule);

struct TaggedNode {
  torch::jit::Node* node = nullptr;
  int tag_module = -1;                 // index into the ModuleTable (has a segment)
  std::vector<int> shared_with;        // tag modules of merged duplicates
  TagRule rule = TagRule::kRoot;
};

struct HierarchyTagging {
  std::vector<TaggedNode> nodes;        // serialization pre-order (see proto_tagging.h)
  int rule_counts[kTagRuleCount] = {};
  int unresolved_scope_levels = 0;

  // The per-node list proto tagging consumes.
  std::vector<SerializedNodeTag> ToSerialized(const ModuleTable& modules) const;
  // Every tag module used by a node (tag or shared_with), ascending.
  std::vector<int> UsedTagModules() const;
};

// `member_names`: qualified names of the model's parameters and buffers.
// `user_input_count`: how many leading graph inputs are user inputs; the rest
// are initializers (torch's own convention, including initializers its passes
// made under names of their own). -1: unknown, then an input is a user input
// when its name is not in `member_names`.
HierarchyTagging AssignHierarchyTags(torch::jit::Graph& graph, const ModuleTable& modules,
                                     const BorrowedScopes& borrowed,
                                     const std::unordered_set<std::string>& member_names,
                                     int user_input_count = -1);

}  // namespace hiertag
