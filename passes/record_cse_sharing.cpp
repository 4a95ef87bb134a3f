// RecordCseSharing: which node replaced which, across torch's CSE.
#include "hiertag/passes/record_cse_sharing.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hiertag/passes/graph_walk.h"

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::ScopePtr;

struct InputSlot {
  Node* user;
  size_t index;
};

struct NodeBefore {
  ScopePtr scope;
  std::vector<InputSlot> uses;  // every use of any output
};


class ReplacementFinder {
 public:
  ReplacementFinder(const std::unordered_map<Node*, NodeBefore>& before,
                    const std::unordered_set<Node*>& alive)
      : before_(before), alive_(alive) {}

  // The alive node that took over `removed`'s outputs, or nullptr. Only
  // pointers of alive nodes are dereferenced.
  Node* Find(Node* removed, int depth = 0) {
    auto memo = memo_.find(removed);
    if (memo != memo_.end()) return memo->second;
    Node* found = nullptr;
    if (depth < 256) {
      for (const InputSlot& slot : before_.at(removed).uses) {
        Node* user = alive_.count(slot.user) ? slot.user : nullptr;
        if (user == nullptr && before_.count(slot.user)) user = Find(slot.user, depth + 1);
        if (user != nullptr && slot.index < user->inputs().size()) {
          found = user->input(slot.index)->node();
          break;
        }
      }
    }
    memo_[removed] = found;
    return found;
  }

 private:
  const std::unordered_map<Node*, NodeBefore>& before_;
  const std::unordered_set<Node*>& alive_;
  std::unordered_map<Node*, Node*> memo_;
};

}  // namespace

int RecordCseSharing(torch::jit::Graph& graph, BorrowedScopes& borrowed,
                     const std::function<void()>& run_cse) {
  std::vector<Node*> nodes_before;
  CollectNodesAndReturns(graph.block(), &nodes_before);
  std::unordered_map<Node*, NodeBefore> before;
  for (Node* node : nodes_before) {
    NodeBefore& entry = before[node];
    entry.scope = node->scope();
    for (torch::jit::Value* output : node->outputs()) {
      for (const torch::jit::Use& use : output->uses()) entry.uses.push_back({use.user, use.offset});
    }
  }

  run_cse();

  std::vector<Node*> nodes_after;
  CollectNodesAndReturns(graph.block(), &nodes_after);
  std::unordered_set<Node*> alive(nodes_after.begin(), nodes_after.end());
  ReplacementFinder finder(before, alive);
  // Kept node -> scopes of the duplicates merged into it, in graph order.
  std::map<size_t, std::vector<ScopePtr>> shared_by_position;
  std::unordered_map<Node*, size_t> position;
  for (size_t i = 0; i < nodes_after.size(); ++i) position[nodes_after[i]] = i;
  for (Node* node : nodes_before) {
    if (alive.count(node)) continue;
    Node* kept = finder.Find(node);
    if (kept == nullptr || !alive.count(kept)) continue;
    std::vector<ScopePtr> merged;
    if (const BorrowedScopes::Loan* loan = borrowed.Find(before.at(node).scope)) {
      merged.push_back(loan->recorded);
      merged.insert(merged.end(), loan->shared_with.begin(), loan->shared_with.end());
    } else {
      merged.push_back(before.at(node).scope);
    }
    for (const ScopePtr& scope : merged) {
      if (!IsBlankScope(scope) && scope != kept->scope()) shared_by_position[position[kept]].push_back(scope);
    }
  }
  int lent = 0;
  for (auto& [index, scopes] : shared_by_position) {
    Node* kept = nodes_after[index];
    BorrowedScopes::Loan loan{kept->scope(), kept->scope(), {}, {}, {}, {}};
    if (const BorrowedScopes::Loan* existing = borrowed.Find(kept->scope())) loan = *existing;
    if (IsBlankScope(loan.recorded)) continue;
    for (const ScopePtr& scope : scopes) {
      if (scope != loan.recorded &&
          std::find(loan.shared_with.begin(), loan.shared_with.end(), scope) == loan.shared_with.end()) {
        loan.shared_with.push_back(scope);
      }
    }
    if (loan.shared_with.empty()) continue;
    kept->setScope(borrowed.Lend(std::move(loan)));
    ++lent;
  }
  GRAPH_DEBUG("hiertag: CSE kept ", lent, " nodes for several modules");
  return lent;
}

}  // namespace hiertag
