// Graph walk helpers shared by the passes that observe a torch pass.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace hiertag {

// Calls visit(node) for every node, nested blocks included, and every block's
// return node (a use by a graph or body output is a use too), in pre-order,
// reading each node once as the walk reaches it. Stops, returning false, at
// the first node visit returns false for.
template <typename Visit>
bool VisitNodesAndReturns(torch::jit::Block* block, Visit&& visit) {
  for (torch::jit::Node* node : block->nodes()) {
    if (!visit(node)) return false;
    for (torch::jit::Block* nested : node->blocks()) {
      if (!VisitNodesAndReturns(nested, visit)) return false;
    }
  }
  return visit(block->return_node());
}

// Every node and block return, in VisitNodesAndReturns' order.
inline void CollectNodesAndReturns(torch::jit::Block* block, std::vector<torch::jit::Node*>* nodes) {
  VisitNodesAndReturns(block, [nodes](torch::jit::Node* node) {
    nodes->push_back(node);
    return true;
  });
}

// True for a scope that records no module call.
inline bool IsBlankScope(const torch::jit::ScopePtr& scope) { return !scope || scope->isRoot() || scope->isBlank(); }

}  // namespace hiertag
