// RecordCseSharing: which node replaced which, across torch's CSE.
#include "hiertag/passes/record_cse_sharing.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <vector>

#include "hiertag/passes/graph_walk.h"
#include "hiertag/passes/mapped_arrays.h"

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::ScopePtr;

struct InputSlot {
  Node* user;
  size_t index;
};

// Every node's scope and the uses of its outputs before the pass, in flat
// arrays (one allocation each, not one per node): node i's uses are
// uses[use_begin[i] .. use_begin[i + 1]). They and the rest of what
// observing CSE makes per node are in mapped pages (mapped_arrays.h says why).
struct GraphBefore {
  MappedArray<Node*> nodes;
  MappedArray<ScopePtr> scopes;
  MappedArray<uint32_t> use_begin;
  MappedArray<InputSlot> uses;

  // Reads each node in the walk that reaches it (its scope and uses while the
  // node is in cache), not in a loop over a collected list. The scopes' and
  // uses' arrays are sized by a first walk: grown step by step, right after
  // the trace freed many small objects, they cost as much again (the
  // 200-layer decoder's 58k nodes: 37 ms grown, 23 ms counted and sized; that
  // was on glibc's heap, now they are in the caller's arena). The first walk
  // notes the nodes (a list of pointers grown in the arena), which the second
  // one prefetches ahead of its links.
  GraphBefore(Block* block, std::pmr::memory_resource* memory)
      : nodes(memory), scopes(memory), use_begin(memory), uses(memory) {
    size_t use_count = 0;
    VisitNodesAndReturns(block, [&](Node* node) {
      nodes.push_back(node);
      for (torch::jit::Value* output : node->outputs()) use_count += output->uses().size();
      return true;
    });
    scopes.reserve(nodes.size());
    use_begin.reserve(nodes.size() + 1);
    uses.reserve(use_count);
    VisitNodesAndReturns(
        block,
        [this](Node* node) {
          scopes.push_back(node->scope());
          use_begin.push_back(static_cast<uint32_t>(uses.size()));
          for (torch::jit::Value* output : node->outputs()) {
            for (const torch::jit::Use& use : output->uses()) uses.push_back({use.user, use.offset});
          }
          return true;
        },
        nodes);
    use_begin.push_back(static_cast<uint32_t>(uses.size()));
  }
};

// The nodes of `before` the pass removed: a flag per index of before.nodes,
// and each removed node's index by node (a user of a node before is looked up
// there). CSE only destroys nodes, so the nodes after are the nodes before
// less the removed ones, in the same order: one merge finds them, no lookup
// per node. Should the order ever differ, every node after is looked up instead.
struct RemovedNodes {
  MappedArray<uint8_t> flags;
  MappedMap<Node*, size_t> index;

  RemovedNodes(const GraphBefore& before, const MappedArray<Node*>& after, std::pmr::memory_resource* memory)
      : flags(before.nodes.size(), 0, memory), index(MakeMappedMap<Node*, size_t>(memory)) {
    size_t j = 0;
    for (size_t i = 0; i < before.nodes.size(); ++i) {
      if (j < after.size() && after[j] == before.nodes[i]) {
        ++j;
      } else {
        flags[i] = 1;
      }
    }
    if (j != after.size()) {
      MappedArray<Node*> alive(after.begin(), after.end(), flags.get_allocator());
      std::sort(alive.begin(), alive.end());
      for (size_t i = 0; i < before.nodes.size(); ++i) {
        flags[i] = std::binary_search(alive.begin(), alive.end(), before.nodes[i]) ? 0 : 1;
      }
    }
    index.reserve(std::count(flags.begin(), flags.end(), 1));
    for (size_t i = 0; i < before.nodes.size(); ++i) {
      if (flags[i]) index.emplace(before.nodes[i], i);
    }
  }

  bool empty() const { return index.empty(); }
  bool count(Node* node) const { return index.count(node) != 0; }
};

class ReplacementFinder {
 public:
  ReplacementFinder(const GraphBefore& before, const RemovedNodes& removed, std::pmr::memory_resource* memory)
      : before_(before), removed_(removed), memo_(before.nodes.size(), memory) {}

  // The node that took over the outputs of removed node `i` (an index of
  // before.nodes), or nullptr. Only nodes that were not removed are
  // dereferenced; every user of a node before is a node before.
  Node* Find(size_t i, int depth = 0) {
    if (memo_[i]) return *memo_[i];
    Node* found = nullptr;
    if (depth < 256) {
      for (uint32_t k = before_.use_begin[i]; k < before_.use_begin[i + 1]; ++k) {
        const InputSlot& slot = before_.uses[k];
        auto user_removed = removed_.index.find(slot.user);
        Node* user = user_removed == removed_.index.end() ? slot.user : Find(user_removed->second, depth + 1);
        if (user != nullptr && slot.index < user->inputs().size()) {
          found = user->input(slot.index)->node();
          break;
        }
      }
    }
    memo_[i] = found;
    return found;
  }

 private:
  const GraphBefore& before_;
  const RemovedNodes& removed_;
  MappedArray<std::optional<Node*>> memo_;  // per index of before.nodes: Find's answer, once looked for
};

}  // namespace

int RecordCseSharing(torch::jit::Graph& graph, BorrowedScopes& borrowed, const std::function<void()>& run_cse) {
  std::pmr::monotonic_buffer_resource memory(MappedMemory());
  GraphBefore before(graph.block(), &memory);

  run_cse();

  MappedArray<Node*> nodes_after(&memory);
  nodes_after.reserve(before.nodes.size());
  // CSE only removes nodes: the rest are met in the order noted before, each
  // at or after the last one met there, so one cursor finds each (it runs to
  // the end once should the order ever differ) and the node noted a few after
  // it is asked for ahead of the walk. (Ahead of a position instead would
  // fall behind the walk once CSE removed that many nodes.)
  size_t cursor = 0;
  VisitNodesAndReturns(graph.block(), [&](Node* node) {
    nodes_after.push_back(node);
    while (cursor < before.nodes.size() && before.nodes[cursor] != node) ++cursor;
    PrefetchExpectedAfter(node, before.nodes, cursor);
    return true;
  });
  RemovedNodes removed(before, nodes_after, &memory);
  if (removed.empty()) return 0;
  ReplacementFinder finder(before, removed, &memory);
  // (kept node, order found, a scope of a duplicate merged into it), sorted:
  // each kept node's scopes side by side, in the order found.
  struct Share {
    Node* kept;
    uint32_t order;
    ScopePtr scope;
  };
  MappedArray<Share> shares(&memory);
  auto share = [&](Node* kept, const ScopePtr& scope) {
    if (!IsBlankScope(scope) && scope != kept->scope()) {
      shares.push_back({kept, static_cast<uint32_t>(shares.size()), scope});
    }
  };
  for (size_t i = 0; i < before.nodes.size(); ++i) {
    if (!removed.flags[i]) continue;
    Node* kept = finder.Find(i);
    if (kept == nullptr || removed.count(kept)) continue;
    if (const BorrowedScopes::Loan* loan = borrowed.Find(before.scopes[i])) {
      share(kept, loan->recorded);
      for (const ScopePtr& scope : loan->shared_with) share(kept, scope);
    } else {
      share(kept, before.scopes[i]);
    }
  }
  std::sort(shares.begin(), shares.end(), [](const Share& a, const Share& b) {
    return a.kept != b.kept ? std::less<Node*>()(a.kept, b.kept) : a.order < b.order;
  });
  auto first_share = MakeMappedMap<Node*, size_t>(&memory);  // kept node -> its first entry in shares
  first_share.reserve(shares.size());
  for (size_t k = 0; k < shares.size(); ++k) first_share.emplace(shares[k].kept, k);
  // In graph order (a node the graph no longer holds, such as a graph input's
  // Param, is not lent anything), so the loans are made in the same order every time.
  int lent = 0;
  for (Node* kept : nodes_after) {
    auto entry = first_share.find(kept);
    if (entry == first_share.end()) continue;
    BorrowedScopes::Loan loan = borrowed.NewLoan(kept->scope(), kept->scope());
    if (const BorrowedScopes::Loan* existing = borrowed.Find(kept->scope())) loan = *existing;
    if (IsBlankScope(loan.recorded)) continue;
    for (size_t k = entry->second; k < shares.size() && shares[k].kept == kept; ++k) {
      const ScopePtr& scope = shares[k].scope;
      if (scope != loan.recorded &&
          std::find(loan.shared_with.begin(), loan.shared_with.end(), scope) == loan.shared_with.end()) {
        loan.shared_with.push_back(scope);
      }
    }
    if (loan.shared_with.empty()) continue;
    kept->setScope(borrowed.Lend(std::move(loan)));
    ++lent;
  }
  if (JitLogging()) GRAPH_DEBUG("hiertag: CSE kept ", lent, " nodes for several modules");
  return lent;
}

}  // namespace hiertag
