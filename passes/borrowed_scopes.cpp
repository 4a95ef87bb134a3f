// Borrowed scopes: lending and restoring scopes around torch's passes.
#include "hiertag/passes/borrowed_scopes.h"

#include <algorithm>

#include "hiertag/core/export/scope_names.h"

namespace hiertag {

using torch::jit::ScopePtr;

namespace {

// The name of every scope lent, interned once.
c10::Symbol BorrowedSymbol() {
  static const c10::Symbol symbol = c10::Symbol::scope(std::string(kBorrowedScopeName));
  return symbol;
}

}  // namespace

std::pmr::memory_resource* BorrowedScopes::Pool() {
  if (!pool_) {
    pool_ = std::make_unique<std::pmr::unsynchronized_pool_resource>(std::pmr::pool_options{0, size_t{1} << 16},
                                                                     MappedMemory());
  }
  return pool_.get();
}

BorrowedScopes::Loan BorrowedScopes::NewLoan(ScopePtr recorded, ScopePtr original) {
  std::pmr::memory_resource* pool = Pool();
  return Loan{std::move(recorded), std::move(original), Scopes(pool), Scopes(pool), {}, Scopes(pool)};
}

torch::jit::ScopePtr BorrowedScopes::Lend(Loan loan) {
  ScopePtr lent = loan.recorded->push(BorrowedSymbol());
  loans_.push_back(std::move(loan));
  lent_.push_back(lent);
  ids_.emplace(lent.get(), loans_.size() - 1);  // last: no entry for a loan not kept
  return lent;
}

bool BorrowedScopes::ShareWith(torch::jit::Node* node, const ScopePtr& other) {
  ScopePtr scope = node->scope();
  Loan* existing = FindMutable(scope);
  const ScopePtr& recorded = existing ? existing->recorded : scope;
  if (!recorded || recorded->isRoot() || recorded->isBlank() || other == recorded) return false;
  if (existing &&
      std::find(existing->shared_with.begin(), existing->shared_with.end(), other) != existing->shared_with.end()) {
    return false;
  }
  // A loan only this node holds (its scope is referenced by the node, by
  // `scope` here and by lent_ alone) grows in place: sharing a node with N
  // calls one at a time then costs N entries, not N loans of 1..N entries.
  if (existing && scope.use_count() == 3) {
    existing->shared_with.push_back(other);
    return true;
  }
  Loan loan = NewLoan(scope, scope);
  if (existing) loan = *existing;
  loan.shared_with.push_back(other);
  node->setScope(Lend(std::move(loan)));
  return true;
}

const BorrowedScopes::Loan* BorrowedScopes::Find(const ScopePtr& scope) const {
  if (!scope || scope->isRoot() || scope->name() != BorrowedSymbol()) return nullptr;
  auto found = ids_.find(scope.get());
  return found == ids_.end() ? nullptr : &loans_[found->second];
}

BorrowedScopes::Loan* BorrowedScopes::FindMutable(const ScopePtr& scope) { return const_cast<Loan*>(Find(scope)); }

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
