// AssignHierarchyTags: gives every node of the final ONNX graph its module tag.
//
// Precondition: the graph torch is about to serialize (after
// _jit_pass_onnx_deduplicate_initializers, before
// _jit_pass_onnx_assign_scoped_names_for_node_and_value), with the scopes torch
// recorded when each node was created, and borrowed scopes still in place.
// Does not change the graph. Deterministic; idempotent.
//
// Tags are call tags (call_tags.h): the tag tree is the call tree.
//
// Rules, in order (a node takes the first that applies):
//   recorded        its scope (or the scope lent to it, BorrowedScopes) resolves
//                   to a module call: that call's tag (ScopeResolver). A node an
//                   export pass fused other modules' nodes into (a loan with
//                   spans, RecordRewrites) gets the common ancestor of all their
//                   tags and lists them in `spans`; a node without inputs (a later
//                   pass folded the fused node into a constant) keeps its tag and
//                   lists them in `folded_from`: no value crosses a boundary there.
//   parameter-owner an Identity with no recorded scope whose input is a graph
//                   input and whose output carries a parameter or buffer name
//                   (torch's _jit_pass_onnx_deduplicate_initializers writes one
//                   per deduplicated initializer): the call tag of the tagged
//                   module owning it, when that module has exactly one.
// enclosing, consumers, neighbours and root are core/format/placement_rules.h's
// (PlaceByRules), shared with import-dynamo:
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
// Shared nodes (RecordCseSharing, tracer aliases of ModuleCalls) also list the
// other calls they compute for in `shared_with` (another call of their own tag
// too: CSE merging the same computation of a layer applied twice); fused nodes
// list in `spans`, and rewrite records in `refs`, the calls they cross: the calls
// whose nodes were fused or removed, and every call on the way between them
// (each call one of those ran in but not all of them did). With the recorded
// module calls (ModuleCalls), every tag that was called is used, nodes or not,
// and each tag's calls are numbered in the order they ran: `call` is the
// node's call of its tag.
//
// Before (scopes):   %5 = onnx::Relu(%4)   scope: hiertag.m0|Net::/hiertag.m2|Layer::layers.0
// After (result):    {op_type: "Relu", tag: "/Net/Layer.0"}
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "hiertag/core/export/proto_tagging.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/placement_rules.h"
#include "hiertag/core/tagging/call_tagging.h"
#include "hiertag/passes/borrowed_scopes.h"
#include "hiertag/passes/module_calls.h"
#include "hiertag/passes/record_rewrites.h"
#include "hiertag/passes/scope_resolution.h"

namespace hiertag {

// The records a node is tagged by, and the tagging's result, are the core's
// (core/tagging/call_tagging.h); TaggedNode::node is the torch::jit::Node.
inline torch::jit::Node* JitNode(const TaggedNode& tagged) {
  return static_cast<torch::jit::Node*>(const_cast<void*>(tagged.node));
}

// `member_names`: qualified names of the model's parameters and buffers.
// `user_input_count`: how many leading graph inputs are user inputs; the rest
// are initializers (torch's own convention, including initializers its passes
// made under names of their own). -1: unknown, then an input is a user input
// when its name is not in `member_names`.
// `calls`: the module calls recorded while tracing, or nullptr; `rewrites`: the
// export passes' rewrites (RecordRewrites), or nullptr; `symbols`: the
// instance scope names by symbol (scope_resolution.h), or nullptr.
HierarchyTagging AssignHierarchyTags(torch::jit::Graph& graph, const ModuleTable& modules, CallTags& call_tags,
                                     const BorrowedScopes& borrowed,
                                     const std::unordered_set<std::string>& member_names, int user_input_count = -1,
                                     const ModuleCalls* calls = nullptr, const RewriteLog* rewrites = nullptr,
                                     const InstanceScopeSymbols* symbols = nullptr);

}  // namespace hiertag
