// Shared by the pass tests: scopes named as the plugin names them, and a
// fixture holding a graph parsed from IR text with its value map.
#pragma once

#include <gtest/gtest.h>
#include <torch/csrc/jit/ir/irparser.h>

#include <memory>
#include <string>
#include <unordered_map>

#include "hiertag/core/export/scope_names.h"
#include "hiertag/passes/borrowed_scopes.h"

namespace hiertag::testing {

inline torch::jit::ScopePtr PushScope(const torch::jit::ScopePtr& parent, const std::string& name) {
  return parent->push(c10::Symbol::scope(name));
}

// The scope the tracer records for module `module_index` of the module table.
inline torch::jit::ScopePtr InstanceScope(const torch::jit::ScopePtr& parent, int module_index,
                                          const std::string& torch_name) {
  return PushScope(parent, MarkInstanceScopeName(module_index, torch_name));
}

// How many nodes of `kind` a block holds, nested blocks included.
inline int CountKind(torch::jit::Block* block, c10::Symbol kind) {
  int count = 0;
  for (torch::jit::Node* node : block->nodes()) {
    if (node->kind() == kind) ++count;
    for (torch::jit::Block* nested : node->blocks()) count += CountKind(nested, kind);
  }
  return count;
}

class GraphTest : public ::testing::Test {
 protected:
  // The IR parser reads no scopes (attach them with SetScope) and names only
  // graph inputs; every value gets its IR name, as rules read output names.
  void Parse(const std::string& ir) {
    graph_ = std::make_shared<torch::jit::Graph>();
    vmap_.clear();
    torch::jit::parseIR(ir, graph_.get(), vmap_, /*parse_tensor_constants=*/true);
    for (const auto& [name, value] : vmap_) {
      if (value->debugName() != name) value->setDebugName(name);
    }
  }

  torch::jit::Node* NodeOf(const std::string& value_name) { return vmap_.at(value_name)->node(); }

  void SetScope(const std::string& value_name, const torch::jit::ScopePtr& scope) {
    NodeOf(value_name)->setScope(scope);
  }

  int Restore() {
    int restored = borrowed_.Restore(graph_->block());
    graph_->lint();
    return restored;
  }

  // The loan behind the scope of the node producing `value_name`, or nullptr.
  const BorrowedScopes::Loan* LoanOf(const std::string& value_name) {
    return borrowed_.Find(NodeOf(value_name)->scope());
  }

  std::shared_ptr<torch::jit::Graph> graph_;
  std::unordered_map<std::string, torch::jit::Value*> vmap_;
  BorrowedScopes borrowed_;
};

}  // namespace hiertag::testing
