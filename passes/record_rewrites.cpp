// RecordRewrites: classifies the nodes a pass removed by what replaced them.
#include "hiertag/passes/record_rewrites.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "hiertag/passes/graph_walk.h"

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::ScopePtr;
using torch::jit::Value;

struct Use {
  Node* user;
  size_t index;
};

struct NodeBefore {
  c10::Symbol kind;
  ScopePtr scope;
  std::vector<Value*> inputs;
  size_t attributes = 0;     // hash of the attribute values
  std::vector<Use> uses;     // every use of any output
  bool scalar_outputs = true;  // every output a number or a 0-d tensor
};

// A number, or a tensor of rank 0: every layout op is the identity on it.
bool IsScalarLike(const Value* value) {
  auto tensor = value->type()->cast<c10::TensorType>();
  return !tensor || tensor->dim() == 0;
}

size_t HashAttributes(Node* node) {
  size_t hash = 0;
  auto mix = [&hash](size_t value) { hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2); };
  for (c10::Symbol name : node->attributeNames()) {
    mix(std::hash<std::string>()(name.toQualString()));
    switch (node->kindOf(name)) {
      case torch::jit::AttributeKind::i: mix(std::hash<int64_t>()(node->i(name))); break;
      case torch::jit::AttributeKind::f: mix(std::hash<double>()(node->f(name))); break;
      case torch::jit::AttributeKind::s: mix(std::hash<std::string>()(node->s(name))); break;
      case torch::jit::AttributeKind::is:
        for (int64_t v : node->is(name)) mix(std::hash<int64_t>()(v));
        break;
      case torch::jit::AttributeKind::fs:
        for (double v : node->fs(name)) mix(std::hash<double>()(v));
        break;
      case torch::jit::AttributeKind::t: mix(std::hash<const void*>()(node->t(name).unsafeGetTensorImpl())); break;
      case torch::jit::AttributeKind::g: mix(std::hash<const void*>()(node->g(name).get())); break;
      default: mix(static_cast<size_t>(node->kindOf(name)));
    }
  }
  return hash;
}


class Observer {
 public:
  Observer(torch::jit::Graph& graph, std::string pass, BorrowedScopes& borrowed, RewriteLog& log)
      : graph_(graph), pass_(std::move(pass)), borrowed_(borrowed), log_(log) {}

  void Before() {
    std::vector<Node*> nodes;
    CollectNodesAndReturns(graph_.block(), &nodes);
    for (Node* node : nodes) {
      position_[node] = order_.size();
      order_.push_back(node);
      NodeBefore& entry = before_[node];
      entry.kind = node->kind();
      entry.scope = node->scope();
      entry.inputs.assign(node->inputs().begin(), node->inputs().end());
      entry.attributes = HashAttributes(node);
      for (Value* output : node->outputs()) {
        entry.scalar_outputs &= IsScalarLike(output);
        for (const torch::jit::Use& use : output->uses()) entry.uses.push_back({use.user, use.offset});
      }
    }
    for (Value* input : graph_.inputs()) inputs_before_.insert(input);
  }

  void After() {
    std::vector<Node*> nodes;
    CollectNodesAndReturns(graph_.block(), &nodes);
    for (Node* node : nodes) {
      auto found = before_.find(node);
      // The same address with another kind or scope is a new node in a freed slot.
      if (found != before_.end() && found->second.kind == node->kind() && found->second.scope == node->scope()) {
        alive_.insert(node);
        if (found->second.inputs != std::vector<Value*>(node->inputs().begin(), node->inputs().end()) ||
            found->second.attributes != HashAttributes(node)) {
          changed_.insert(node);
        }
      } else {
        created_.insert(node);
        created_order_.push_back(node);
        created_scope_[node] = node->scope();
        made_in_scope_[node->scope().get()].push_back(created_order_.size() - 1);
      }
    }
    for (Value* input : graph_.inputs()) {
      if (!inputs_before_.count(input)) new_inputs_.insert(input);
    }
    for (Node* node : order_) {
      if (!alive_.count(node) && !grouped_.count(node)) Classify(Group(node));
    }
    for (Node* node : order_) {
      if (changed_.count(node)) ClassifyReadsPastKeptNodes(node);
    }
  }

 private:
  // The removed nodes connected to `start` through values.
  std::vector<Node*> Group(Node* start) {
    std::vector<Node*> group;
    std::vector<Node*> work = {start};
    grouped_.insert(start);
    while (!work.empty()) {
      Node* node = work.back();
      work.pop_back();
      group.push_back(node);
      const NodeBefore& entry = before_.at(node);
      auto visit = [&](Node* other) {
        if (before_.count(other) && !alive_.count(other) && grouped_.insert(other).second) work.push_back(other);
      };
      for (const Use& use : entry.uses) visit(use.user);
      for (Value* input : entry.inputs) {
        for (Node* producer : ProducersOf(input)) visit(producer);
      }
    }
    std::sort(group.begin(), group.end(), [&](Node* a, Node* b) { return position_.at(a) < position_.at(b); });
    return group;
  }

  // The producer of a value as it was before the pass, found through the uses
  // noted then (a removed producer's pointer is never dereferenced).
  std::vector<Node*> ProducersOf(Value* value) {
    if (producers_.empty()) {
      for (const auto& [node, entry] : before_) {
        for (const Use& use : entry.uses) {
          auto user = before_.find(use.user);
          if (user != before_.end() && use.index < user->second.inputs.size()) {
            producers_[user->second.inputs[use.index]] = node;
          }
        }
      }
    }
    auto found = producers_.find(value);
    return found == producers_.end() ? std::vector<Node*>{} : std::vector<Node*>{found->second};
  }

  void Classify(const std::vector<Node*>& group) {
    std::unordered_set<Node*> members(group.begin(), group.end());
    std::unordered_set<const Value*> upstream;  // values the group read from outside it
    for (Node* node : group) {
      for (Value* input : before_.at(node).inputs) upstream.insert(input);
    }
    std::vector<ScopePtr> scopes;
    for (Node* node : group) {
      const ScopePtr& scope = before_.at(node).scope;
      if (!IsBlankScope(scope) && std::find(scopes.begin(), scopes.end(), scope) == scopes.end()) {
        scopes.push_back(scope);
      }
    }
    if (scopes.empty()) return;
    std::vector<Node*> absorbers;
    std::vector<Node*> mergers;
    std::vector<std::pair<Use, Value*>> rewired;  // a use and what it reads now
    bool bypassed = false;
    for (Node* node : group) {
      for (const Use& use : before_.at(node).uses) {
        if (members.count(use.user) || !(alive_.count(use.user) || created_.count(use.user))) continue;
        if (changed_.count(use.user) && before_.at(use.user).attributes != HashAttributes(use.user)) {
          absorbers.push_back(use.user);
          continue;
        }
        if (use.index >= use.user->inputs().size()) continue;
        Value* now = use.user->input(use.index);
        Node* producer = now->node();
        if (new_inputs_.count(now)) {
          log_.records.push_back({RewriteRecord::Kind::kFolded, pass_, scopes, now->unique(), nullptr, nullptr, {}, -1});
        } else if (Absorbing(producer)) {
          if (producer->inputs().empty()) {
            FoldInto(producer, scopes);
          } else {
            absorbers.push_back(producer);
          }
        } else if (IsConstant(producer)) {
          // An older constant holds what the group computed (torch 2.8's shape
          // inference makes constants for static shapes before constant folding
          // reuses them): folded into it, as into a new one. A constant is
          // nobody's data, so no boundary is cut.
          FoldInto(producer, scopes);
        } else if (upstream.count(now) || ComputedFrom(group, now)) {
          GRAPH_DEBUG("hiertag: ", pass_, ": ", *use.user, " reads %", now->debugName(), " from before the group");
          bypassed = true;
          rewired.emplace_back(use, now);
        } else if (alive_.count(producer)) {
          mergers.push_back(producer);
        }
      }
    }
    // Every node the pass made from the group's nodes took them over too, also
    // one only another made node reads (conv1+bn1 fused before conv2+bn2).
    std::unordered_map<Node*, std::vector<Node*>> anchors;
    std::unordered_set<Node*> linked;  // made nodes computing from what the group read
    for (Node* made : MadeInScopesOf(group)) {
      if (made->inputs().empty()) continue;
      // A scope holds much besides the group (the caller's Concat of shape
      // values made from a removed ListConstruct): only a node computing from
      // what the group read, or from another such made node, was made from it.
      bool from_group = std::any_of(made->inputs().begin(), made->inputs().end(), [&](Value* input) {
        return linked.count(input->node()) || (upstream.count(input) && Existed(input));
      });
      if (!from_group) continue;
      linked.insert(made);
      // What it was made from: torch copies the replaced node's metadata, and
      // the replacement is mostly of the same kind (a Conv for a Conv).
      std::vector<Node*> made_from, same_scope;
      for (Node* node : group) {
        if (before_.at(node).scope != created_scope_.at(made)) continue;
        same_scope.push_back(node);
        if (before_.at(node).kind == made->kind()) made_from.push_back(node);
      }
      if (made_from.empty()) made_from = std::move(same_scope);
      if (made_from.empty()) continue;
      anchors[made] = std::move(made_from);
      if (std::find(absorbers.begin(), absorbers.end(), made) == absorbers.end()) absorbers.push_back(made);
    }
    for (Node* absorber : absorbers) Absorb(absorber, ScopesOf(Absorbed(absorber, group, anchors)));
    for (Node* merger : mergers) {
      bool lent = false;
      for (const ScopePtr& scope : scopes) lent |= borrowed_.ShareWith(merger, scope);
      log_.merged += lent;
    }
    if (bypassed && scopes.size() > 1 && CrossesWithTensor(group)) {
      GRAPH_UPDATE("hiertag: ", pass_, " removed ", group.size(), " nodes of ", scopes.size(), " module calls");
      log_.records.push_back({RewriteRecord::Kind::kRemoved, pass_, scopes, 0, nullptr, nullptr, {}, -1});
    } else {
      for (const auto& [use, now] : rewired) RecordRewired(use, now);
    }
  }

  // The nodes the pass made in the scope of one of the group's nodes, in
  // graph order: only they can have been made from the group (a made node
  // has the scope of what it replaces). Looked up by scope, so a pass that
  // folds N groups into N constants does not compare every pair.
  std::vector<Node*> MadeInScopesOf(const std::vector<Node*>& group) const {
    std::vector<size_t> indices;
    std::unordered_set<const torch::jit::Scope*> scopes;
    for (Node* node : group) {
      const torch::jit::Scope* scope = before_.at(node).scope.get();
      if (!scopes.insert(scope).second) continue;
      auto made = made_in_scope_.find(scope);
      if (made != made_in_scope_.end()) indices.insert(indices.end(), made->second.begin(), made->second.end());
    }
    std::sort(indices.begin(), indices.end());
    std::vector<Node*> made;
    for (size_t index : indices) made.push_back(created_order_[index]);
    return made;
  }

  // Whether the group's nodes were computed from `value` (through nodes that
  // are gone or alive alike). Nodes before `value`'s producer in graph order
  // cannot have read it: the walk stops there.
  bool ComputedFrom(const std::vector<Node*>& group, const Value* value) {
    size_t earliest = 0;
    std::vector<Node*> maker = ProducersOf(const_cast<Value*>(value));
    if (!maker.empty()) earliest = position_.at(maker.front());
    std::unordered_set<Node*> seen;
    std::vector<Node*> work(group.begin(), group.end());
    while (!work.empty()) {
      Node* node = work.back();
      work.pop_back();
      if (position_.at(node) < earliest || !seen.insert(node).second) continue;
      for (Value* input : before_.at(node).inputs) {
        if (input == value) return true;
        for (Node* producer : ProducersOf(input)) work.push_back(producer);
      }
    }
    return false;
  }

  // A node the pass rewired to read, in place of a value that still exists
  // (kept for other readers, or left for dead code elimination), a value that
  // one was computed from: the nodes in between are bypassed, not removed, so
  // no group shows it. With attributes of its own changed, the node took their
  // computation over (the attention's Transpose composed with the caller's
  // Transpose, which stays for the keys the caller hands out): it spans their
  // scopes, as if they were removed. Else it reads the same value from further
  // up: rewired.
  void ClassifyReadsPastKeptNodes(Node* node) {
    const NodeBefore& entry = before_.at(node);
    if (entry.inputs.size() != node->inputs().size()) {
      GRAPH_DEBUG("hiertag: ", pass_, " added or dropped inputs of ", *node, ": no index pairs them, not classified");
      return;
    }
    bool own_changed = entry.attributes != HashAttributes(node);
    for (size_t index = 0; index < entry.inputs.size(); ++index) {
      Value* now = node->input(index);
      if (entry.inputs[index] == now || !Existed(now)) continue;
      std::vector<Node*> maker = ProducersOf(entry.inputs[index]);
      if (maker.empty() || !alive_.count(maker.front())) continue;  // a removed maker: its group says what happened
      std::vector<Node*> bypassed = Between(now, maker.front());
      if (bypassed.empty()) continue;
      if (own_changed) {
        Absorb(node, ScopesOf(bypassed));
      } else {
        RecordRewired({node, index}, now);
      }
    }
  }

  // Whether `value` existed before the pass (a node made it that is still
  // there, or it is a graph input): only then can a pointer noted before the
  // pass be compared with it (a freed value's address can be reused).
  bool Existed(Value* value) const {
    return inputs_before_.count(value) || alive_.count(value->node());
  }

  // The nodes, before the pass, on a path from `from` to `to` (`to` included),
  // in graph order; empty when `to` was not computed from `from`. Nodes before
  // `from`'s producer cannot have read it: the walk stops there.
  std::vector<Node*> Between(Value* from, Node* to) {
    size_t earliest = 0;
    if (!inputs_before_.count(from)) earliest = position_.at(from->node());
    std::vector<Node*> ancestors;
    std::unordered_set<Node*> seen;
    bool reached = false;
    std::vector<Node*> work = {to};
    while (!work.empty()) {
      Node* node = work.back();
      work.pop_back();
      if (position_.at(node) < earliest || !seen.insert(node).second) continue;
      ancestors.push_back(node);
      for (Value* input : before_.at(node).inputs) {
        if (input == from) {
          reached = true;
          continue;
        }
        for (Node* producer : ProducersOf(input)) work.push_back(producer);
      }
    }
    if (!reached) return {};
    std::sort(ancestors.begin(), ancestors.end(), [&](Node* a, Node* b) { return position_.at(a) < position_.at(b); });
    std::unordered_set<Node*> on_path;
    std::vector<Node*> path;
    for (Node* node : ancestors) {
      const std::vector<Value*>& inputs = before_.at(node).inputs;
      bool reads_path = std::any_of(inputs.begin(), inputs.end(), [&](Value* input) {
        if (input == from) return true;
        std::vector<Node*> producer = ProducersOf(input);
        return !producer.empty() && on_path.count(producer.front()) > 0;
      });
      if (!reads_path) continue;
      on_path.insert(node);
      path.push_back(node);
    }
    return path;
  }

  // `user` reads `now` instead of what it read before: a value of rank > 0
  // that is data (not a constant) is recorded with who made and read it before.
  void RecordRewired(const Use& use, Value* now) {
    Node* user = use.user;
    if (IsScalarLike(now) || now->node()->kind() == c10::onnx::Constant ||
        now->node()->kind() == c10::prim::Constant) {
      return;
    }
    const NodeBefore& read_before = before_.at(user);
    std::vector<Node*> replaced = ProducersOf(read_before.inputs.at(use.index));
    if (replaced.empty()) return;
    RewriteRecord record{RewriteRecord::Kind::kRewired, pass_, {}, 0, read_before.scope,
                         before_.at(replaced.front()).scope, {}, -1};
    if (now->node()->kind() == c10::prim::Param && now->node()->owningBlock() == graph_.block()) {
      record.graph_input = static_cast<int>(now->offset());
    } else if (auto made = before_.find(now->node()); made != before_.end()) {
      record.value_scopes.push_back(made->second.scope);
    }
    if (readers_.empty()) {
      for (Node* node : order_) {
        for (Value* input : before_.at(node).inputs) readers_[input].push_back(node);
      }
    }
    for (Node* reader : readers_[now]) record.value_scopes.push_back(before_.at(reader).scope);
    if (IsBlankScope(record.reader) || IsBlankScope(record.replaced)) return;
    GRAPH_UPDATE("hiertag: ", pass_, " rewired ", *user, " to read %", now->debugName());
    log_.records.push_back(std::move(record));
  }

  // Whether a value of rank > 0 passed between two module calls inside the
  // group. A removed group as a whole computes its input again; a number
  // handed from one call to the next (NumToTensor in one, Int in the other, a
  // pair the peephole drops) is still the same number, while a tensor between
  // them (a permute and its inverse) had another layout than what is read now.
  bool CrossesWithTensor(const std::vector<Node*>& group) const {
    std::unordered_set<Node*> members(group.begin(), group.end());
    for (Node* node : group) {
      const NodeBefore& entry = before_.at(node);
      if (entry.scalar_outputs) continue;
      for (const Use& use : entry.uses) {
        if (members.count(use.user) && before_.at(use.user).scope != entry.scope) return true;
      }
    }
    return false;
  }

  std::vector<ScopePtr> ScopesOf(const std::vector<Node*>& nodes) const {
    std::vector<ScopePtr> scopes;
    for (Node* node : nodes) {
      const ScopePtr& scope = before_.at(node).scope;
      if (!IsBlankScope(scope) && std::find(scopes.begin(), scopes.end(), scope) == scopes.end()) {
        scopes.push_back(scope);
      }
    }
    return scopes;
  }

  // The removed nodes of `group` that `absorber` took over. A node the pass
  // made was made from the removed nodes whose scope (and kind) it copied and
  // took over those downstream of them; a node
  // the pass changed took over its removed neighbours, upstream and downstream.
  // Either walk stops at the nodes another made node was made from, so two
  // fusions side by side (Conv+BN, then the next layer's Conv+BN) stay apart.
  // The whole group when nothing anchors the walk.
  std::vector<Node*> Absorbed(Node* absorber, const std::vector<Node*>& group,
                              const std::unordered_map<Node*, std::vector<Node*>>& anchors) {
    std::unordered_set<Node*> members(group.begin(), group.end());
    std::unordered_set<Node*> others;
    for (const auto& [made, from] : anchors) {
      if (made != absorber) others.insert(from.begin(), from.end());
    }
    std::vector<std::pair<Node*, bool>> work;  // node, walking downstream
    if (created_.count(absorber)) {
      auto made_from = anchors.find(absorber);
      if (made_from == anchors.end()) return group;
      for (Node* node : made_from->second) work.emplace_back(node, true);
    } else {
      for (Value* input : before_.at(absorber).inputs) {
        for (Node* producer : ProducersOf(input)) {
          if (members.count(producer)) work.emplace_back(producer, false);
        }
      }
      for (const Use& use : before_.at(absorber).uses) {
        if (members.count(use.user)) work.emplace_back(use.user, true);
      }
    }
    if (work.empty()) return group;
    std::unordered_set<Node*> taken;
    while (!work.empty()) {
      auto [node, downstream] = work.back();
      work.pop_back();
      if (others.count(node) || !taken.insert(node).second) continue;
      const NodeBefore& entry = before_.at(node);
      if (downstream) {
        for (const Use& use : entry.uses) {
          if (members.count(use.user)) work.emplace_back(use.user, true);
        }
      } else {
        for (Value* input : entry.inputs) {
          for (Node* producer : ProducersOf(input)) {
            if (members.count(producer)) work.emplace_back(producer, false);
          }
        }
      }
    }
    std::vector<Node*> absorbed(taken.begin(), taken.end());
    std::sort(absorbed.begin(), absorbed.end(), [&](Node* a, Node* b) { return position_.at(a) < position_.at(b); });
    return absorbed;
  }

  // Whether the pass made `node`, or changed it beyond rewiring it to older
  // values: other attributes, or a value the pass made among its inputs.
  // A node that computes from nothing: a constant (not a graph input).
  static bool IsConstant(const Node* node) {
    return node->inputs().empty() && node->blocks().empty() && node->kind() != torch::jit::prim::Param;
  }

  bool Absorbing(Node* node) const {
    if (created_.count(node)) return true;
    if (!changed_.count(node)) return false;
    if (before_.at(node).attributes != HashAttributes(node)) return true;
    return std::any_of(node->inputs().begin(), node->inputs().end(), [&](Value* input) {
      return new_inputs_.count(input) || created_.count(input->node());
    });
  }

  void FoldInto(Node* constant, const std::vector<ScopePtr>& scopes) {
    BorrowedScopes::Loan loan{constant->scope(), constant->scope(), {}, {}, {}, {}};
    if (const BorrowedScopes::Loan* existing = borrowed_.Find(constant->scope())) loan = *existing;
    if (IsBlankScope(loan.recorded)) loan.recorded = scopes.front();
    size_t before = loan.folded_from.size();
    for (const ScopePtr& scope : scopes) {
      if (std::find(loan.folded_from.begin(), loan.folded_from.end(), scope) == loan.folded_from.end()) {
        loan.folded_from.push_back(scope);
      }
    }
    if (loan.folded_from.size() == before) return;
    constant->setScope(borrowed_.Lend(std::move(loan)));
  }

  void Absorb(Node* absorber, const std::vector<ScopePtr>& scopes) {
    if (scopes.empty()) return;
    BorrowedScopes::Loan loan{absorber->scope(), absorber->scope(), {}, {}, pass_, {}};
    if (const BorrowedScopes::Loan* existing = borrowed_.Find(absorber->scope())) loan = *existing;
    if (IsBlankScope(loan.recorded)) loan.recorded = scopes.front();
    for (const ScopePtr& scope : scopes) {
      if (scope != loan.recorded && std::find(loan.spans.begin(), loan.spans.end(), scope) == loan.spans.end()) {
        loan.spans.push_back(scope);
      }
    }
    if (loan.spans.empty()) return;
    if (absorbed_.insert(absorber).second) ++log_.fused;
    if (loan.rewrite.empty()) loan.rewrite = pass_;
    GRAPH_UPDATE("hiertag: ", pass_, " fused ", loan.spans.size(), " other scopes into ", *absorber);
    absorber->setScope(borrowed_.Lend(std::move(loan)));
  }

  torch::jit::Graph& graph_;
  std::string pass_;
  BorrowedScopes& borrowed_;
  RewriteLog& log_;
  std::unordered_map<Node*, NodeBefore> before_;
  std::unordered_set<Value*> inputs_before_;
  std::unordered_set<Node*> alive_, changed_, created_, grouped_, absorbed_;
  std::unordered_set<Value*> new_inputs_;
  std::unordered_map<Node*, ScopePtr> created_scope_;  // a made node's scope before any loan
  std::vector<Node*> created_order_;                  // made nodes, in graph order
  std::unordered_map<const torch::jit::Scope*, std::vector<size_t>> made_in_scope_;  // scope -> created_order_ indices
  std::vector<Node*> order_;                          // nodes before the pass, in graph order
  std::unordered_map<Node*, size_t> position_;
  std::unordered_map<Value*, Node*> producers_;
  std::unordered_map<const Value*, std::vector<Node*>> readers_;  // before the pass
};

}  // namespace

void RecordRewrites(torch::jit::Graph& graph, const std::string& pass, BorrowedScopes& borrowed,
                    RewriteLog& log, const std::function<void()>& run_pass) {
  Observer observer(graph, pass, borrowed, log);
  observer.Before();
  run_pass();
  observer.After();
}

}  // namespace hiertag
