// Borrowed scopes: lending and restoring scopes around torch's passes.
#include "hiertag/passes/borrowed_scopes.h"

#include <algorithm>

#include "hiertag/core/scope_names.h"

namespace hiertag {

using torch::jit::ScopePtr;

torch::jit::ScopePtr BorrowedScopes::Lend(Loan loan) {
  int id = static_cast<int>(loans_.size());
  ScopePtr recorded = loan.recorded;
  loans_.push_back(std::move(loan));
  return recorded->push(c10::Symbol::scope(BorrowedScopeName(id)));
}

bool BorrowedScopes::ShareWith(torch::jit::Node* node, const ScopePtr& other) {
  Loan loan{node->scope(), node->scope(), {}, {}, {}, {}};
  if (const Loan* existing = Find(node->scope())) loan = *existing;
  if (!loan.recorded || loan.recorded->isRoot() || loan.recorded->isBlank() || other == loan.recorded ||
      std::find(loan.shared_with.begin(), loan.shared_with.end(), other) != loan.shared_with.end()) {
    return false;
  }
  loan.shared_with.push_back(other);
  node->setScope(Lend(std::move(loan)));
  return true;
}

const BorrowedScopes::Loan* BorrowedScopes::Find(const ScopePtr& scope) const {
  if (!scope || scope->isRoot()) return nullptr;
  auto id = ParseBorrowedScopeName(scope->name().toUnqualString());
  if (!id || *id >= static_cast<int>(loans_.size())) return nullptr;
  return &loans_[*id];
}

int BorrowedScopes::Restore(torch::jit::Block* block) const {
  int restored = 0;
  for (torch::jit::Node* node : block->nodes()) {
    if (const Loan* loan = Find(node->scope())) {
      node->setScope(loan->original);
      ++restored;
    }
    for (torch::jit::Block* nested : node->blocks()) restored += Restore(nested);
  }
  return restored;
}

}  // namespace hiertag
