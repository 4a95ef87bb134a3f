// ModuleCalls: direct scopes, call order and tracer aliases of a traced export.
#include "hiertag/passes/module_calls.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_set>

#include "hiertag/core/export/scope_names.h"

namespace hiertag {

using torch::jit::ScopePtr;

namespace {

// The value the tracer holds for `tensor`, or nullptr. TracingState::getValue
// also names a value it returns from the Python frame active at that moment;
// torch names each value at its first use by torch's own code, and a look-up
// from here would give the graph other names than an untagged export's. So the
// naming function is switched off around the look-up.
torch::jit::Value* TracedValue(torch::jit::tracer::TracingState& state, const at::Tensor& tensor) {
  c10::IValue value(tensor);
  if (!tensor.defined() || !state.hasValue(value)) return nullptr;
  struct NamingOff {
    explicit NamingOff(torch::jit::tracer::TracingState& state)
        : state(state), lookup(std::move(state.lookup_var_name_fn)) {
      state.lookup_var_name_fn = [](const at::Tensor&) { return std::string(); };
    }
    ~NamingOff() { state.lookup_var_name_fn = std::move(lookup); }
    torch::jit::tracer::TracingState& state;
    std::function<std::string(const at::Tensor&)> lookup;
  } naming_off(state);
  return state.getValue(value);
}

}  // namespace

ModuleCalls::Entered ModuleCalls::Enter(int module, const std::string& scope_name, std::vector<at::Tensor> inputs) {
  Entered entered;
  std::shared_ptr<torch::jit::tracer::TracingState> state = torch::jit::tracer::getTracingState();
  if (!state) return entered;
  entered.recorded = true;
  torch::jit::Graph& graph = *state->graph;
  ScopePtr current = graph.current_scope();
  bool through_call = !current->isRoot() && current->name().toUnqualString() == scope_name;
  if (!through_call) {
    graph.push_scope(MarkDirectScopeName(module, scope_name));
    entered.pushed = true;
    ++direct_calls_;
  }
  calls_.push_back({module, graph.current_scope()});
  entered.last_before = graph.insertPoint()->prev();
  for (at::Tensor& input : inputs) {
    torch::jit::Value* traced = TracedValue(*state, input);
    if (traced == nullptr) continue;
    entered.versions.push_back(input._version());
    entered.inputs.emplace_back(std::move(input), traced);
  }
  return entered;
}

void ModuleCalls::Exit(Entered& entered, bool completed, const std::vector<at::Tensor>& returned,
                       BorrowedScopes& borrowed) {
  std::shared_ptr<torch::jit::tracer::TracingState> state = torch::jit::tracer::getTracingState();
  if (!entered.recorded || !state) return;
  torch::jit::Graph& graph = *state->graph;
  ScopePtr call = graph.current_scope();
  ScopePtr caller = call->parent();
  if (completed) {
    for (size_t i = 0; i < entered.inputs.size(); ++i) {
      const auto& [tensor, before] = entered.inputs[i];
      torch::jit::Value* after = TracedValue(*state, tensor);
      if (after == nullptr || after == before || tensor._version() != entered.versions[i]) continue;
      bool is_result = std::any_of(returned.begin(), returned.end(),
                                   [&](const at::Tensor& result) { return result.is_same(tensor); });
      if (is_result) {
        GRAPH_DEBUG("hiertag: ", *after->node(), " aliases an input the call returned: the module's result");
        continue;
      }
      for (torch::jit::Node* node : AliasChain(before, after, entered.last_before)) {
        GRAPH_UPDATE("hiertag: ", *node, " aliases an input of the call: shared with its caller");
        borrowed.ShareWith(node, caller);
      }
      ++aliases_;
    }
  }
  if (entered.pushed) graph.pop_scope();
}

std::vector<torch::jit::Node*> AliasChain(torch::jit::Value* before, torch::jit::Value* after,
                                          torch::jit::Node* last_before) {
  torch::jit::Node* end = after->node();
  // The trace nests each module call's nodes in a block of its own
  // (prim::TracedModuleForward, inlined later); the call's nodes are those after
  // `last_before` in its block, and everything nested in them.
  torch::jit::Block* call_block = last_before ? last_before->owningBlock() : end->owningBlock();
  bool whole_block = last_before == nullptr || last_before->kind() == c10::prim::Param;
  auto made_in_call = [&](torch::jit::Node* node) {
    if (node->kind() == c10::prim::Param) return false;
    torch::jit::Node* level = node;
    while (level != nullptr && level->owningBlock() != call_block) level = level->owningBlock()->owningNode();
    return level != nullptr && (whole_block || level->isAfter(last_before));
  };
  // Nodes made during the call from which `after` is reached.
  std::unordered_set<torch::jit::Node*> upstream;
  std::vector<torch::jit::Node*> work = {end};
  while (!work.empty()) {
    torch::jit::Node* node = work.back();
    work.pop_back();
    if (!made_in_call(node) || !upstream.insert(node).second) continue;
    for (torch::jit::Value* input : node->inputs()) work.push_back(input->node());
  }
  std::vector<torch::jit::Node*> ordered(upstream.begin(), upstream.end());
  std::sort(ordered.begin(), ordered.end(), [](torch::jit::Node* a, torch::jit::Node* b) { return b->isAfter(a); });
  // Of those, the ones reached from `before`.
  std::unordered_set<const torch::jit::Value*> reached = {before};
  std::vector<torch::jit::Node*> chain;
  for (torch::jit::Node* node : ordered) {
    bool on_chain = std::any_of(node->inputs().begin(), node->inputs().end(),
                                [&](const torch::jit::Value* input) { return reached.count(input) > 0; });
    if (!on_chain) continue;
    chain.push_back(node);
    reached.insert(node->outputs().begin(), node->outputs().end());
  }
  if (std::find(chain.begin(), chain.end(), end) == chain.end()) {
    GRAPH_DEBUG("hiertag: no data path from %", before->debugName(), " to %", after->debugName(),
                " in the call; only its last link is shared");
    return {end};
  }
  return chain;
}

namespace {

class TorchScopes {
 public:
  // The scope without direct levels; `scope` itself when it has none.
  ScopePtr Of(const ScopePtr& scope) {
    if (!scope || scope->isRoot()) return scope;
    auto cached = memo_.find(scope.get());
    if (cached != memo_.end()) return cached->second;
    ScopePtr parent = Of(scope->parent());
    ScopePtr restored;
    auto parsed = ParseScopeName(scope->name().toUnqualString());
    if (parsed && parsed->direct) {
      restored = parent;
    } else if (parent == scope->parent()) {
      restored = scope;
    } else {
      restored = parent->push(scope->name());
    }
    memo_.emplace(scope.get(), restored);
    keep_.push_back(scope);
    return restored;
  }

 private:
  std::unordered_map<const torch::jit::Scope*, ScopePtr> memo_;
  std::vector<ScopePtr> keep_;  // keys stay alive, so no address is reused
};

int Restore(torch::jit::Block* block, TorchScopes& scopes) {
  int changed = 0;
  for (torch::jit::Node* node : block->nodes()) {
    ScopePtr restored = scopes.Of(node->scope());
    if (restored != node->scope()) {
      node->setScope(restored);
      ++changed;
    }
    for (torch::jit::Block* nested : node->blocks()) changed += Restore(nested, scopes);
  }
  return changed;
}

}  // namespace

int RestoreTorchScopes(torch::jit::Block* block) {
  TorchScopes scopes;
  return Restore(block, scopes);
}

}  // namespace hiertag
