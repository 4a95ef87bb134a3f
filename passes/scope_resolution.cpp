// Scope resolution: scope chain -> module instance -> tagged module.
#include "hiertag/passes/scope_resolution.h"

#include <torch/csrc/jit/jit_log.h>

#include <vector>

#include "hiertag/core/scope_names.h"

namespace hiertag {

using torch::jit::ScopePtr;

ResolvedScope ScopeResolver::Resolve(const ScopePtr& scope) {
  if (!scope || scope->isRoot() || scope->isBlank()) return {};
  auto cached = cache_.find(scope.get());
  if (cached != cache_.end()) return cached->second;
  ResolvedScope resolved = ResolveUncached(scope);
  cache_.emplace(scope.get(), resolved);
  return resolved;
}

ResolvedScope ScopeResolver::Resolve(const ScopePtr& scope,
                                     const std::optional<torch::jit::InlinedCallStackPtr>& callstack) {
  if (!callstack || !*callstack) return Resolve(scope);
  const torch::jit::InlinedCallStack* key = callstack->get();
  auto cached = callstack_cache_.find(key);
  if (cached != callstack_cache_.end()) {
    return cached->second.module >= 0 ? cached->second : Resolve(scope);
  }
  std::vector<int> chain = {0};
  bool names_modules = false;
  for (const auto& frame : (*callstack)->vec()) {
    const std::optional<torch::jit::ModuleInstanceInfo>& info = std::get<2>(frame);
    if (!info) continue;  // a function call, not a module's
    names_modules = true;
    std::string class_name =
        info->class_type() ? UnmangleTorchScriptTypeName(info->class_type()->name()->qualifiedName()) : "";
    int module = MatchChild(chain.back(), info->instance_name(), class_name);
    if (module < 0) {
      ++unresolved_levels_;
      GRAPH_DEBUG("hiertag: call-stack frame '", info->instance_name(), "' matches no module; stopping there");
      break;
    }
    chain.push_back(module);
  }
  // Every frame is a forward that ran (a whole scripted model records no
  // module calls while tracing: its call stacks are the record).
  if (names_modules) {
    for (int module : chain) call_tags_.MarkRan(module);
  }
  ResolvedScope resolved = names_modules ? FromChain(chain, {}) : ResolvedScope{};
  callstack_cache_.emplace(key, resolved);
  return resolved.module >= 0 ? resolved : Resolve(scope);
}

int ScopeResolver::MatchChild(int parent, std::string_view variable, std::string_view class_name) const {
  const std::string& parent_path = modules_.at(parent).path;
  std::string path = parent_path.empty() ? std::string(variable)
                                         : parent_path + "." + std::string(variable);
  int exact = modules_.FindByPath(path);
  if (exact >= 0 && (class_name.empty() || modules_.at(exact).class_name == class_name)) return exact;
  // A container that pushed no scope sits between parent and child.
  std::string suffix = "." + std::string(variable);
  int match = -1;
  for (int i = 0; i < modules_.size(); ++i) {
    const std::string& candidate = modules_.at(i).path;
    if (candidate.size() <= suffix.size() ||
        candidate.compare(candidate.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        !modules_.IsModuleAncestorOrSelf(parent, i) || i == parent ||
        (!class_name.empty() && modules_.at(i).class_name != class_name)) {
      continue;
    }
    if (match >= 0) return -1;  // ambiguous: stop rather than guess
    match = i;
  }
  return match;
}

ResolvedScope ScopeResolver::ResolveUncached(const ScopePtr& scope) {
  std::vector<torch::jit::Scope*> levels;
  for (torch::jit::Scope* s = scope.get(); s != nullptr && !s->isRoot();
       s = s->parent().get()) {
    levels.push_back(s);
  }
  std::vector<int> chain;  // module instances from the root call inwards
  std::vector<const torch::jit::Scope*> chain_scopes;
  for (auto it = levels.rbegin(); it != levels.rend(); ++it) {
    std::string name = (*it)->name().toUnqualString();
    if (ParseBorrowedScopeName(name)) break;  // borrowed leaf: the chain above it is the record
    auto parsed = ParseScopeName(name);
    if (!parsed) {
      ++unresolved_levels_;
      GRAPH_DEBUG("hiertag: scope level '", name, "' has no '::'; stopping there");
      break;
    }
    int module = -1;
    if (parsed->module_index) {
      module = *parsed->module_index < modules_.size() ? *parsed->module_index : -1;
    } else if (chain.empty()) {
      module = 0;  // the outermost recorded call is the root module's
    } else {
      module = MatchChild(chain.back(), parsed->variable_part);
    }
    if (module < 0) {
      ++unresolved_levels_;
      GRAPH_DEBUG("hiertag: scope level '", name, "' matches no module; stopping there");
      break;
    }
    chain.push_back(module);
    chain_scopes.push_back(*it);
  }
  return FromChain(chain, chain_scopes);
}

ResolvedScope ScopeResolver::FromChain(const std::vector<int>& chain,
                                       const std::vector<const torch::jit::Scope*>& scopes) const {
  if (chain.empty()) return {};
  ResolvedScope resolved;
  resolved.module = chain.back();
  resolved.tag = call_tags_.FromChain(chain);
  for (size_t i = chain.size(); i-- > 1;) {
    if (modules_.at(chain[i]).has_segment) {
      if (i < scopes.size()) resolved.call_scope = scopes[i];
      break;
    }
  }
  return resolved;
}

}  // namespace hiertag
