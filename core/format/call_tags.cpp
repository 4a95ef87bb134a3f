// Call tags: the call tree's tags, disambiguated among siblings.
#include "hiertag/core/format/call_tags.h"

#include <set>
#include <stdexcept>

#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

std::string_view RelativePath(std::string_view path, std::string_view ancestor_path) {
  if (ancestor_path.empty()) return path;
  return path.substr(ancestor_path.size() + 1);
}

}  // namespace

CallTags::CallTags(const ModuleTable& modules) : modules_(modules), first_call_(modules.size(), {-1, -1}) {
  entries_.push_back({0, -1, 0, {}, {}});
}

void CallTags::MarkRan(int module) {
  if (ran_.empty()) ran_.assign(modules_.size(), false);
  ran_.at(module) = true;
}

int CallTags::Call(int caller, int module) {
  if (module == 0 && caller == kRoot) return kRoot;
  if (!modules_.at(module).has_segment) return caller;
  int caller_module = entries_.at(caller).module;
  if (module != caller_module && modules_.IsModuleAncestorOrSelf(caller_module, module)) {
    std::vector<int> between;
    for (int m = modules_.at(module).parent; m >= 0 && m != caller_module; m = modules_.at(m).parent) {
      if (modules_.at(m).has_segment && (ran_.empty() || !ran_[m])) between.push_back(m);
    }
    for (auto it = between.rbegin(); it != between.rend(); ++it) caller = Intern(caller, *it);
  }
  return Intern(caller, module);
}

int CallTags::Intern(int caller, int module) {
  std::pair<int, int>& first = first_call_.at(module);
  if (first.first == caller) return first.second;
  if (first.first >= 0) {
    auto found = by_caller_and_module_.find({caller, module});
    if (found != by_caller_and_module_.end()) return found->second;
  }
  if (settled_) throw std::logic_error("CallTags: a call added after the tags were settled");
  int id = size();
  if (first.first < 0) {
    first = {caller, id};
  } else {
    by_caller_and_module_.emplace(std::make_pair(caller, module), id);
  }
  entries_.push_back({module, caller, entries_.at(caller).depth + 1, {}, {}});
  entries_.at(caller).children.push_back(id);
  return id;
}

int CallTags::FromChain(const std::vector<int>& chain) {
  int id = kRoot;
  for (size_t i = 1; i < chain.size(); ++i) id = Call(id, chain[i]);
  return id;
}

bool CallTags::IsAncestorOrSelf(int ancestor, int id) const {
  for (int current = id; current >= 0; current = entries_.at(current).parent) {
    if (current == ancestor) return true;
  }
  return false;
}

int CallTags::CommonAncestor(int a, int b) const {
  while (entries_.at(a).depth > entries_.at(b).depth) a = entries_[a].parent;
  while (entries_.at(b).depth > entries_.at(a).depth) b = entries_[b].parent;
  while (a != b) {
    a = entries_[a].parent;
    b = entries_[b].parent;
  }
  return a;
}

const std::string& CallTags::Tag(int id) {
  if (!settled_) Settle();
  return entries_.at(id).tag;
}

void CallTags::Settle() {
  settled_ = true;
  entries_[kRoot].tag = modules_.at(0).tag;
  // Parents are added before their children, so one sweep settles every tag.
  for (int id = 0; id < size(); ++id) {
    Entry& caller = entries_[id];
    int caller_module = caller.module;
    // The plain segments a callee must not take: its siblings' and those of
    // the caller's own tag-tree children (so owned calls keep ModuleTable tags).
    std::multiset<std::string> taken;
    for (int index : modules_.TagChildren(caller_module)) {
      taken.insert(modules_.PlainSegment(index));
      taken.insert(std::string(modules_.OwnSegment(index)));
    }
    for (int child : caller.children) {
      int module = entries_[child].module;
      if (modules_.TagParent(module) == caller_module) {
        entries_[child].tag = caller.tag + "/" + std::string(modules_.OwnSegment(module));
      }
    }
    std::multiset<std::string> plain_of_others;
    for (int child : caller.children) {
      int module = entries_[child].module;
      if (modules_.TagParent(module) != caller_module) plain_of_others.insert(modules_.PlainSegment(module));
    }
    for (int child : caller.children) {
      int module = entries_[child].module;
      if (modules_.TagParent(module) == caller_module) continue;
      std::string plain = modules_.PlainSegment(module);
      std::string segment = plain;
      if (taken.count(plain) > 0 || plain_of_others.count(plain) > 1) {
        const ModuleRecord& record = modules_.at(module);
        const std::string& caller_path = modules_.at(caller_module).path;
        std::string qualifier = modules_.IsModuleAncestorOrSelf(caller_module, module)
                                    ? EscapeQualifier(RelativePath(record.path, caller_path))
                                    : "~" + EscapeQualifier(record.path);
        segment = FormatSegment({record.short_class, std::nullopt, std::nullopt}) + "[" + qualifier + "]";
      }
      entries_[child].tag = caller.tag + "/" + segment;
    }
  }
}

}  // namespace hiertag
