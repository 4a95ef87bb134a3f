// Scope resolution: scope chain -> module instance -> tagged module.
#include "hiertag/passes/scope_resolution.h"

#include <torch/csrc/jit/jit_log.h>

#include <vector>

#include "hiertag/core/export/scope_names.h"

namespace hiertag {

using torch::jit::ScopePtr;

void InstanceScopeSymbols::Add(int module, const std::string& instance_name) {
  auto symbol = static_cast<uint32_t>(c10::Symbol::scope(instance_name));
  if (modules_.empty()) {
    base_ = symbol;
  } else if (symbol < base_) {
    modules_.insert(modules_.begin(), base_ - symbol, -1);
    base_ = symbol;
  }
  if (symbol - base_ >= modules_.size()) modules_.resize(symbol - base_ + 1, -1);
  modules_[symbol - base_] = module;
}

ResolvedScope ScopeResolver::Resolve(const ScopePtr& scope) {
  int number = -1;
  return Resolve(scope, &number);
}

ResolvedScope ScopeResolver::Resolve(const ScopePtr& scope, int* number) {
  *number = -1;
  if (!scope || scope->isRoot() || scope->isBlank()) return {};
  const Walk& walk = WalkTo(scope.get());
  *number = walk.number;
  return walk.resolved;
}

const ScopeResolver::Walk& ScopeResolver::WalkTo(torch::jit::Scope* scope) {
  auto cached = walks_.find(scope);
  if (cached != walks_.end()) return cached->second;
  // The levels not walked yet, innermost first; then each from its parent's walk.
  std::vector<torch::jit::Scope*>& pending = pending_;  // kept: no allocation per scope
  pending.assign(1, scope);
  const Walk* walked = nullptr;
  static const Walk kStart;
  for (torch::jit::Scope* level = scope->parent().get(); walked == nullptr;) {
    if (level->isRoot()) {
      walked = &kStart;
    } else if (auto found = walks_.find(level); found != walks_.end()) {
      walked = &found->second;
    } else {
      pending.push_back(level);
      level = level->parent().get();
    }
  }
  Walk walk = *walked;
  const Walk* last = walked;
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    walk = Step(walk, *it);
    walk.number = static_cast<int>(walks_.size());
    last = &walks_.emplace(*it, walk).first->second;
  }
  return *last;  // `scope`'s: the last emplaced (pending is never empty here)
}

ScopeResolver::Walk ScopeResolver::Step(const Walk& parent, torch::jit::Scope* level) {
  if (parent.ended) return parent;
  Walk ended{parent.resolved, true};
  const ResolvedScope& above = parent.resolved;
  int module = symbols_ ? symbols_->Find(level->name()) : -1;
  if (module < 0) {
    // torch's interned string, read in place: valid until a symbol is
    // interned (a short name lives inside torch's table, which then may
    // move), and nothing below interns one.
    std::string_view name = level->name().toUnqualString();
    if (name == kBorrowedScopeName) return ended;  // borrowed leaf: the chain above it is the record
    auto parsed = ParseScopeName(name);
    if (!parsed) {
      ++unresolved_levels_;
      GRAPH_DEBUG("hiertag: scope level '", name, "' has no '::'; stopping there");
      return ended;
    }
    if (parsed->module_index) {
      module = *parsed->module_index < modules_.size() ? *parsed->module_index : -1;
    } else if (above.module < 0) {
      module = 0;  // the outermost recorded call is the root module's
    } else {
      module = MatchChild(above.module, parsed->variable_part);
    }
    if (module < 0) {
      ++unresolved_levels_;
      GRAPH_DEBUG("hiertag: scope level '", name, "' matches no module; stopping there");
      return ended;
    }
  } else if (module >= modules_.size()) {
    ++unresolved_levels_;
    return ended;
  }
  Walk walk;
  walk.resolved.module = module;
  if (above.module < 0) {
    walk.resolved.tag = CallTags::kRoot;  // the chain's first level is the root call
  } else {
    walk.resolved.tag = call_tags_.Call(above.tag, module);
    walk.resolved.call_scope = modules_.at(module).has_segment ? level : above.call_scope;
  }
  return walk;
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
  ResolvedScope resolved = names_modules ? FromChain(chain) : ResolvedScope{};
  callstack_cache_.emplace(key, resolved);
  return resolved.module >= 0 ? resolved : Resolve(scope);
}

int ScopeResolver::MatchChild(int parent, std::string_view variable, std::string_view class_name) const {
  const std::string& parent_path = modules_.at(parent).path;
  std::string path = parent_path.empty() ? std::string(variable) : parent_path + "." + std::string(variable);
  int exact = modules_.FindByPath(path);
  if (exact >= 0 && (class_name.empty() || modules_.at(exact).class_name == class_name)) return exact;
  // A container that pushed no scope sits between parent and child.
  std::string suffix(1, '.');  // not "." + std::string(...): GCC 12 warns falsely of that (-Wrestrict)
  suffix += variable;
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

ResolvedScope ScopeResolver::FromChain(const std::vector<int>& chain) const {
  if (chain.empty()) return {};
  return {chain.back(), call_tags_.FromChain(chain), nullptr};
}

}  // namespace hiertag
