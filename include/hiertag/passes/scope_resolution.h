// Scope resolution: from a node's recorded scope to the module instance that
// was running and to the module whose tag the node gets.
//
// Input: a torch Scope chain, e.g. (traced export, instance scopes)
//   hiertag.m0|Net:: / hiertag.m3|Layer::layers.1 / hiertag.m5|torch.nn...LayerNorm::ln
// Each level names its module instance exactly (index into the ModuleTable), so
// repeated blocks whose children share variable names, ModuleList / ModuleDict /
// Sequential containers that push no scope, and children called through
// `.forward()` directly (which push nothing) never get confused.
// A whole scripted model has no instance scopes; its nodes carry inlined call
// stacks whose frames name each called module by attribute name and type
// (measured, torch 2.13: the scopes torch rebuilds from them drop a level for the
// second instance of a type, and a scripted class's second export in a process
// has none at all, while the call stacks are exact every time). A node whose call
// stack names modules is resolved from it; otherwise scopes without instance ids
// are matched by their "Class::attr" variable parts. Either way each level is
// matched against the module tree: parent path + "." + name; when a container
// that records no call sits in between (ModuleList), the unique descendant whose
// path ends in ".<name>" (and, for call stacks, whose class matches) is taken.
// A level that matches nothing ends the walk there (counted in
// `unresolved_levels`, once per such level), so the result is the deepest
// module known for sure, never a guess. A scope is resolved once, from its
// parent's resolution and its own level: linear in the number of scopes.
//
// The tag: the call chain's tagged modules, as a call tag (call_tags.h); a
// filtered torch.nn module adds no level, so its nodes belong to the tagged
// module that called it. Direct scopes (a forward entered without __call__,
// module_calls.h) count as calls.
#pragma once

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/ir/ir.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"

namespace hiertag {

struct ResolvedScope {
  int module = -1;  // innermost module instance of the chain; -1: no module recorded
  int tag = -1;     // the call tag (CallTags) the node gets; -1: no module recorded
  // The scope of the tagged call (the level of the chain the tag ends at);
  // nullptr when resolved from a call stack or for the root.
  const torch::jit::Scope* call_scope = nullptr;
};

// The module each instance scope name (MarkInstanceScopeName) was made for,
// by the name's symbol: torch interns every scope name it pushes
// (Symbol::scope), so a scope holds its name as a symbol. Listed when the
// names are made (the session's set-up), it lets ScopeResolver read a scope's
// symbol instead of its name's characters, a cold string per scope (a sixth
// of AssignHierarchyTags on a 950k-node graph, perf). A listed scope resolves
// to the module its name was made for, which is the index the name holds; a
// scope not listed is resolved from its name.
class InstanceScopeSymbols {
 public:
  // Interns `instance_name` as a scope name, as torch's tracer does when it
  // pushes it, and lists it as module `module`'s.
  void Add(int module, const std::string& instance_name);

  // The module `name` was listed for; -1 when it is not listed.
  int Find(c10::Symbol name) const {
    uint32_t offset = static_cast<uint32_t>(name) - base_;  // wraps around below base_
    return offset < modules_.size() ? modules_[offset] : -1;
  }

 private:
  // Symbols count up as torch interns strings, and a set-up interns its names
  // in one go (or an earlier export of the model did): by symbol - base_, an
  // array over their span, a read near the last one's for each scope. A span
  // holding strings interned between is bounded by torch's own table of them.
  uint32_t base_ = 0;
  std::vector<int> modules_;
};

class ScopeResolver {
 public:
  // `symbols`: the instance scope names known by symbol (may be nullptr).
  ScopeResolver(const ModuleTable& modules, CallTags& call_tags, const InstanceScopeSymbols* symbols = nullptr)
      : modules_(modules), call_tags_(call_tags), symbols_(symbols) {}

  // Resolves a scope; blank and root scopes resolve to {-1, -1}. Cached per scope.
  ResolvedScope Resolve(const torch::jit::ScopePtr& scope);

  // Resolve(scope), and sets `*number` to the scope's number in this
  // resolver: 0, 1, 2, ... in the order scopes are first walked (a scope's
  // ancestors first), -1 for a blank or root scope. A caller keeping
  // something per scope keeps it in an array indexed by it (a second hash map
  // keyed by scope, beside this one's, was a tenth of AssignHierarchyTags).
  ResolvedScope Resolve(const torch::jit::ScopePtr& scope, int* number);
  // The number the next scope walked gets: every number so far is below it.
  int scope_count() const { return static_cast<int>(walks_.size()); }

  // Resolves a node's record: its inlined call stack when that names module
  // instances, else its scope. Cached per call stack. The modules a call stack
  // names are marked as run (CallTags::MarkRan): each frame is a forward call.
  ResolvedScope Resolve(const torch::jit::ScopePtr& scope,
                        const std::optional<torch::jit::InlinedCallStackPtr>& callstack);

  int unresolved_levels() const { return unresolved_levels_; }

 private:
  // The walk's state after a scope's level.
  struct Walk {
    ResolvedScope resolved;
    bool ended = false;  // a level at or above it ended the walk
    int number = -1;     // Resolve(scope, number)
  };
  const Walk& WalkTo(torch::jit::Scope* scope);
  Walk Step(const Walk& parent, torch::jit::Scope* level);
  ResolvedScope FromChain(const std::vector<int>& chain) const;
  // `class_name` empty: any class.
  int MatchChild(int parent, std::string_view variable, std::string_view class_name = {}) const;

  const ModuleTable& modules_;
  CallTags& call_tags_;
  const InstanceScopeSymbols* symbols_;
  ska::flat_hash_map<const torch::jit::Scope*, Walk> walks_;
  ska::flat_hash_map<const torch::jit::InlinedCallStack*, ResolvedScope> callstack_cache_;
  std::vector<torch::jit::Scope*> pending_;  // WalkTo's levels to walk
  int unresolved_levels_ = 0;
};

}  // namespace hiertag
