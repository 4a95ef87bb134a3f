// Graph walk helpers shared by the passes that observe a torch pass.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <vector>

namespace hiertag {

// Every node, nested blocks included, and every block's return node (a use by
// a graph or body output is a use too), in pre-order.
inline void CollectNodesAndReturns(torch::jit::Block* block, std::vector<torch::jit::Node*>* nodes) {
  for (torch::jit::Node* node : block->nodes()) {
    nodes->push_back(node);
    for (torch::jit::Block* nested : node->blocks()) CollectNodesAndReturns(nested, nodes);
  }
  nodes->push_back(block->return_node());
}

// True for a scope that records no module call.
inline bool IsBlankScope(const torch::jit::ScopePtr& scope) { return !scope || scope->isRoot() || scope->isBlank(); }

}  // namespace hiertag
