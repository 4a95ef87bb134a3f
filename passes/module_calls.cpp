// ModuleCalls: direct scopes, call order and tracer aliases of a traced export.
#include "hiertag/passes/module_calls.h"

#include <torch/csrc/jit/jit_log.h>

#include "hiertag/core/scope_names.h"

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

ModuleCalls::Entered ModuleCalls::Enter(int module, const std::string& scope_name,
                                        std::vector<at::Tensor> inputs) {
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
  for (at::Tensor& input : inputs) {
    torch::jit::Value* traced = TracedValue(*state, input);
    if (traced == nullptr) continue;
    entered.versions.push_back(input._version());
    entered.inputs.emplace_back(std::move(input), traced);
  }
  return entered;
}

void ModuleCalls::Exit(Entered& entered, bool completed, BorrowedScopes& borrowed) {
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
      GRAPH_UPDATE("hiertag: ", *after->node(), " aliases an input of the call: shared with its caller");
      borrowed.ShareWith(after->node(), caller);
      ++aliases_;
    }
  }
  if (entered.pushed) graph.pop_scope();
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
