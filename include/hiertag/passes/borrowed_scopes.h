// Borrowed scopes: carry a node's module through torch's passes where torch
// itself records no scope for it, without changing what torch writes.
//
// torch copies a node's scope to every node converted or cloned from it, so a
// scope is the one record that survives the whole export pipeline. Two kinds of
// nodes lack the scope they belong to:
//   inlined call   nodes of a torch.jit.script function called from a traced
//                  module: the tracer inlines them with a blank scope; they are
//                  lent a child of the call site's scope (MarkInlinedCalls);
//   shared node    a node common subexpression elimination kept for several
//                  modules: it is lent a child of its own scope that also lists
//                  the scopes of the merged duplicates (RecordCseSharing);
//   alias          a node whose output torch's tracer bound to a caller's
//                  variable (ModuleCalls): it also lists the caller's scope;
//   fused node     a node an export pass fused other modules' nodes into: it
//                  lists their scopes as spans (RecordRewrites);
//   folded constant  a constant a pass folded other nodes into: it lists their
//                  scopes as folded_from (RecordRewrites).
// Before torch names the nodes, Restore() gives every node back exactly the scope
// torch gave it (blank for inlined calls, the primary scope for shared nodes), so
// node names and the written file are those of an untagged export.
#pragma once

#include <torch/csrc/jit/ir/ir.h>

#include <memory>
#include <memory_resource>
#include <string>
#include <vector>

#include "hiertag/passes/mapped_arrays.h"

namespace hiertag {

class BorrowedScopes {
 public:
  // A loan's lists are made and grown while torch's passes run, so they are
  // polymorphic: NewLoan's draw on this BorrowedScopes' pool of mapped pages
  // (mapped_arrays.h says why); a loan made otherwise uses the heap.
  using Scopes = std::pmr::vector<torch::jit::ScopePtr>;
  struct Loan {
    torch::jit::ScopePtr recorded;  // the scope the node belongs to (call site / primary)
    torch::jit::ScopePtr original;  // what torch gave the node: restored by Restore()
    Scopes shared_with;             // shared node: the merged duplicates' scopes
    Scopes spans;                   // fused node: scopes of the nodes fused into it
    std::string rewrite;            // fused node: the pass that fused them
    Scopes folded_from;             // constant: scopes of the nodes folded into it
  };

  BorrowedScopes() = default;
  BorrowedScopes(BorrowedScopes&&) = default;
  // Not assignable: the pool would go before the loans that give their lists back to it.
  BorrowedScopes& operator=(BorrowedScopes&&) = delete;

  // An empty loan of `recorded` to nodes whose scope is `original`, its lists
  // in the pool. Assigning a loan to it copies that loan's lists there.
  Loan NewLoan(torch::jit::ScopePtr recorded, torch::jit::ScopePtr original);

  // Lends `loan.recorded` (wrapped in a fresh child scope that carries the
  // loan) to nodes whose scope is `loan.original`; set the result with setScope.
  // Every such child is named kBorrowedScopeName (scope_names.h) and is
  // known by its address, which it keeps: this holds it until the end.
  torch::jit::ScopePtr Lend(Loan loan);

  // Lends `node` a scope that keeps what it records and also lists `other`
  // (merged into the node's existing loan, if any). No-op for a node without
  // a recorded scope, or when `other` is already its record or listed.
  // Returns whether it lent a scope.
  bool ShareWith(torch::jit::Node* node, const torch::jit::ScopePtr& other);

  // The loan behind `scope`, or nullptr when `scope` is not a borrowed scope.
  const Loan* Find(const torch::jit::ScopePtr& scope) const;

  // Gives every node (nested blocks included) whose scope is borrowed its
  // original scope back. Returns the number of nodes restored. Idempotent.
  int Restore(torch::jit::Block* block) const;

  bool empty() const { return loans_.empty(); }

 private:
  Loan* FindMutable(const torch::jit::ScopePtr& scope);

  std::pmr::memory_resource* Pool();

  // The loans' lists. First, so it goes last: the loans return their lists to it.
  std::unique_ptr<std::pmr::unsynchronized_pool_resource> pool_;
  // Lent while torch's passes run, so in mapped pages (mapped_arrays.h).
  MappedArray<Loan> loans_ = MakeMappedArray<Loan>();
  // Per loan, the scope lent: held, so no other scope takes its address.
  MappedArray<torch::jit::ScopePtr> lent_ = MakeMappedArray<torch::jit::ScopePtr>();
  MappedMap<const torch::jit::Scope*, size_t> ids_ = MakeMappedMap<const torch::jit::Scope*, size_t>();  // -> loans_
};

}  // namespace hiertag
