// MarkInlinedCalls: nodes inlined from a torch.jit.script function get the
// scope of the module call that called the function.
//
// Measured (torch 2.13): a script function called from a traced module is
// recorded by the tracer as a prim::CallFunction in the calling module's scope;
// _jit_pass_onnx_function_substitution, which the exporter runs right after the
// trace, inlines it, and the inlined nodes (a data-dependent loop's prim::Loop
// among them) carry a blank scope: torch no longer knows which module called.
//
// While tracing, the plugin brackets each script-function call with two marker
// nodes (InsertCallMarker); a marker is created in the tracer's current scope,
// the calling module's. Right after the inlining, MarkInlinedCalls lends that scope
// (BorrowedScopes) to every blank-scoped node between the markers, nested blocks
// included, and removes the markers. Nodes that already have a scope keep it.
//
// Precondition: the traced graph, right after _jit_pass_onnx_function_substitution.
// Idempotent (no markers left).
//
// Before:  hiertag::call_begin()            scope: .../Layer::layers.1
//          %y = prim::Loop(%n, %c, %x)      scope: <blank>
//          hiertag::call_end()              scope: .../Layer::layers.1
// After:   %y = prim::Loop(%n, %c, %x)      scope: .../Layer::layers.1/hiertag.borrowed::
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include "hiertag/passes/borrowed_scopes.h"

namespace hiertag {

enum class CallMarker { kBegin, kEnd };

// Appends a marker at the graph's insertion point (the end of the trace).
void InsertCallMarker(torch::jit::Graph& graph, CallMarker marker);

// Returns the number of nodes that were lent a call-site scope.
int MarkInlinedCalls(torch::jit::Graph& graph, BorrowedScopes& borrowed);

}  // namespace hiertag
