// Scope resolution: scope chain -> module instance -> tagged module.
#include "hiertag/scope_resolution.h"

#include <torch/csrc/jit/jit_log.h>

#include <vector>

#include "hiertag/scope_names.h"

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

int ScopeResolver::MatchChild(int parent, std::string_view variable) const {
  const std::string& parent_path = modules_.at(parent).path;
  std::string path = parent_path.empty() ? std::string(variable)
                                         : parent_path + "." + std::string(variable);
  int exact = modules_.FindByPath(path);
  if (exact >= 0) return exact;
  // A container that pushed no scope sits between parent and child.
  std::string suffix = "." + std::string(variable);
  int match = -1;
  for (int i = 0; i < modules_.size(); ++i) {
    const std::string& candidate = modules_.at(i).path;
    if (candidate.size() <= suffix.size() ||
        candidate.compare(candidate.size() - suffix.size(), suffix.size(), suffix) != 0 ||
        !modules_.IsModuleAncestorOrSelf(parent, i) || i == parent) {
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
  }
  if (chain.empty()) return {};
  ResolvedScope resolved;
  resolved.module = chain.back();
  int enclosing = 0;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    if (modules_.at(*it).has_segment) {
      enclosing = *it;
      break;
    }
  }
  int owner = modules_.TagOwner(resolved.module);
  resolved.tag_module = modules_.IsModuleAncestorOrSelf(enclosing, owner) ? owner : enclosing;
  return resolved;
}

}  // namespace hiertag
