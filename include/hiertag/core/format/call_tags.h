// Call tags: the tag tree is the call tree.
//
// A node's tag names the chain of module calls that was running when torch
// recorded it: the innermost tagged module, under the tagged module that called
// it, up to the root. Where every module is called by the module that owns it
// (HuggingFace code), the call tree is the module tree and each call tag is the
// module's tag from the ModuleTable. Third-party code also calls a module from
// inside another one's forward (the Annotated Transformer's
// `self.sublayer[0](x, lambda x: self.self_attn(x, x, x, mask))`): the call tag
// puts self_attn under the SublayerConnection whose forward ran it, because that
// is whose computation it is; the module table maps the tag back to the owning
// instance's path. A module called from two callers has two tags; a module
// called several times by one caller has one tag and several calls.
//
// Segments (README "Tag grammar"): a module its caller owns keeps its
// ModuleTable segment when the ModuleTable tag-parent is the caller; any other
// callee takes its plain segment (Class, Class.N) unless that collides with a
// sibling's, then Class[relative.path] for a module inside the caller and
// Class[~full.path] for one outside it. No two instances share a tag.
//
//   layers.0.sublayer.0  SublayerConnection  /Net/EncoderLayer.0/SublayerConnection.0
//   layers.0.self_attn   Attention           /Net/EncoderLayer.0/SublayerConnection.0/Attention
// No torch dependency.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hiertag/core/format/module_table.h"

namespace hiertag {

class CallTags {
 public:
  static constexpr int kRoot = 0;

  // Starts with the root call tag (module 0). `modules` must be finalized.
  explicit CallTags(const ModuleTable& modules);

  // The call tag of module `module` (tagged or not) called from call tag
  // `caller`: a filtered torch.nn module adds no level (returns `caller`). A
  // module inside the caller's module keeps the tagged containers between them
  // that never ran themselves (a ModuleList, or any container whose forward
  // the code bypasses), so owned calls keep their ModuleTable tags.
  int Call(int caller, int module);

  // Records that module `module`'s forward ran. Without any record, every
  // container counts as never run.
  void MarkRan(int module);
  bool Ran(int module) const { return !ran_.empty() && ran_.at(module); }

  // Follows a chain of module instances from the root call inwards.
  int FromChain(const std::vector<int>& chain);

  int size() const { return static_cast<int>(entries_.size()); }
  int Module(int id) const { return entries_.at(id).module; }
  int Parent(int id) const { return entries_.at(id).parent; }
  bool IsAncestorOrSelf(int ancestor, int id) const;
  int CommonAncestor(int a, int b) const;

  // The tag string. Segments are settled on first use: add every call first.
  const std::string& Tag(int id);

 private:
  struct Entry {
    int module = -1;
    int parent = -1;
    int depth = 0;
    std::vector<int> children;
    std::string tag;
  };
  void Settle();

  const ModuleTable& modules_;
  std::vector<Entry> entries_;
  int Intern(int caller, int module);

  // Per module, the caller and call tag of its first call tag ({-1, -1}:
  // none yet); the map holds the others (a module called from several
  // callers). Most modules have one caller: one array read, where a map of
  // every call was a tenth of AssignHierarchyTags on a deep graph.
  std::vector<std::pair<int, int>> first_call_;
  std::map<std::pair<int, int>, int> by_caller_and_module_;
  std::vector<bool> ran_;
  bool settled_ = false;
};

}  // namespace hiertag
