// RecordCseSharing: runs torch's common subexpression elimination and records
// which nodes it kept on behalf of other modules.
//
// Measured: _jit_pass_cse merges identical nodes recorded in different module
// calls and keeps the first one's scope (a decoder whose layers all take
// size(0) of one shared tensor ends with one Shape -> Gather -> Unsqueeze chain in
// layer 0's scope, consumed by layer 1 too). The kept node computes a value for
// every merged module; tagging it with the first alone would make layer 1 consume
// a tensor it never received.
//
// Around the pass (given as `run_cse`): before it, every node's scope and the
// uses of its outputs are noted; after it, each removed node B is traced to the
// node A now feeding B's former users (A replaced B). Where B's scope differs
// from A's, A is lent (BorrowedScopes) a scope that keeps A's own as the record
// and lists B's. AssignHierarchyTags turns that list into the node's
// `hiertag.shared_with` tags; the graph and its node names stay torch's own.
//
// Precondition: the aten graph at the point the exporter runs _jit_pass_cse.
//
// Before:  %a = aten::size(%pos, 0)   scope: .../layers.0/attn
//          %b = aten::size(%pos, 0)   scope: .../layers.1/attn
// After:   %a = aten::size(%pos, 0)   scope: .../layers.0/attn/hiertag.borrowed::
//          (its loan: recorded layers.0/attn, shared with layers.1/attn)
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <functional>

#include "hiertag/passes/borrowed_scopes.h"

namespace hiertag {

// Returns the number of kept nodes that were lent a shared scope.
int RecordCseSharing(torch::jit::Graph& graph, BorrowedScopes& borrowed, const std::function<void()>& run_cse);

}  // namespace hiertag
