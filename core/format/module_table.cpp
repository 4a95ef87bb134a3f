// Module table: tag assignment with sibling disambiguation, and its JSON form.
#include "hiertag/core/format/module_table.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <stdexcept>

#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

std::string_view LastAtom(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

bool IsListIndex(std::string_view atom) {
  if (atom.empty() || atom.size() > 18) return false;
  return std::all_of(atom.begin(), atom.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::string_view RelativePath(std::string_view path, std::string_view ancestor_path) {
  if (ancestor_path.empty()) return path;
  return path.substr(ancestor_path.size() + 1);
}

}  // namespace

int ModuleTable::Add(std::string path, std::string class_name, std::string short_class, bool has_segment) {
  if (finalized_) throw std::logic_error("ModuleTable::Add after Finalize");
  ModuleRecord record;
  record.class_name = std::move(class_name);
  record.short_class = std::move(short_class);
  if (records_.empty()) {
    if (!path.empty()) throw std::invalid_argument("the first module must be the root (path '')");
    record.has_segment = true;
  } else {
    if (path.empty()) {
      throw std::invalid_argument("hiertag: a module of class " + Printable(record.class_name) +
                                  " below the root has the empty name in named_modules(): the module table "
                                  "names every module by its qualified name");
    }
    record.has_segment = has_segment;
    std::string_view parent_path = path;
    record.parent = 0;
    while (true) {
      size_t dot = parent_path.rfind('.');
      if (dot == std::string_view::npos) break;
      parent_path = parent_path.substr(0, dot);
      int found = FindByPath(parent_path);
      if (found >= 0) {
        record.parent = found;
        break;
      }
    }
  }
  if (record.has_segment && record.short_class.empty()) {
    throw std::invalid_argument("hiertag: module '" + Printable(path) + "' has a class with an empty name (" +
                                Printable(record.class_name) + "): its tag segment needs one");
  }
  record.path = std::move(path);
  int index = static_cast<int>(records_.size());
  if (!index_by_path_.emplace(record.path, index).second) {
    throw std::invalid_argument("hiertag: two modules have the qualified name '" + Printable(record.path) +
                                "' in named_modules() (an attribute name holding '.'): the module table "
                                "names every module by its qualified name");
  }
  records_.push_back(std::move(record));
  return index;
}

void ModuleTable::Finalize() {
  if (records_.empty()) throw std::logic_error("ModuleTable::Finalize on an empty table");
  // Parents precede children, so one forward sweep settles owners and depths.
  for (size_t i = 0; i < records_.size(); ++i) {
    ModuleRecord& record = records_[i];
    if (record.parent < 0) {
      record.tag_owner = static_cast<int>(i);
      record.tag_depth = 0;
      continue;
    }
    const ModuleRecord& parent = records_[record.parent];
    if (record.has_segment) {
      record.tag_owner = static_cast<int>(i);
      record.tag_depth = records_[parent.tag_owner].tag_depth + 1;
    } else {
      record.tag_owner = parent.tag_owner;
      record.tag_depth = parent.tag_depth;
    }
  }
  tag_children_.assign(records_.size(), {});
  for (size_t i = 1; i < records_.size(); ++i) {
    if (records_[i].has_segment) tag_children_[TagParent(static_cast<int>(i))].push_back(static_cast<int>(i));
  }
  // Group tagged modules by tag-tree parent and plain segment.
  std::map<std::pair<int, std::string>, std::vector<int>> siblings;
  std::vector<std::string> plain(records_.size());
  for (size_t i = 1; i < records_.size(); ++i) {
    const ModuleRecord& record = records_[i];
    if (!record.has_segment) continue;
    plain[i] = PlainSegment(static_cast<int>(i));
    siblings[{records_[record.parent].tag_owner, plain[i]}].push_back(static_cast<int>(i));
  }
  records_[0].tag = "/" + FormatSegment({records_[0].short_class, std::nullopt, std::nullopt});
  for (size_t i = 1; i < records_.size(); ++i) {
    ModuleRecord& record = records_[i];
    if (!record.has_segment) continue;
    const ModuleRecord& tag_parent = records_[records_[record.parent].tag_owner];
    std::string segment = plain[i];
    if (siblings[{records_[record.parent].tag_owner, plain[i]}].size() > 1) {
      segment =
          FormatSegment({record.short_class, std::nullopt, std::string(RelativePath(record.path, tag_parent.path))});
    }
    record.tag = tag_parent.tag + "/" + segment;
  }
  finalized_ = true;
}

std::string ModuleTable::PlainSegment(int index) const {
  const ModuleRecord& record = records_.at(index);
  TagSegment segment{record.short_class, std::nullopt, std::nullopt};
  std::string_view atom = LastAtom(record.path);
  if (index > 0 && IsListIndex(atom)) segment.index = std::stoll(std::string(atom));
  return FormatSegment(segment);
}

std::string_view ModuleTable::OwnSegment(int tagged) const {
  std::string_view tag = records_.at(tagged).tag;
  return tag.substr(tag.rfind('/') + 1);
}

int ModuleTable::FindByPath(std::string_view path) const {
  auto it = index_by_path_.find(path);
  return it == index_by_path_.end() ? -1 : it->second;
}

int ModuleTable::FindOwnerOfMember(std::string_view member_name) const {
  std::string_view prefix = member_name;
  while (true) {
    size_t dot = prefix.rfind('.');
    if (dot == std::string_view::npos) return records_.empty() ? -1 : 0;
    prefix = prefix.substr(0, dot);
    int found = FindByPath(prefix);
    if (found >= 0) return found;
  }
}

bool ModuleTable::IsModuleAncestorOrSelf(int ancestor, int index) const {
  for (int current = index; current >= 0; current = records_[current].parent) {
    if (current == ancestor) return true;
  }
  return false;
}

int ModuleTable::TagParent(int tagged) const {
  int parent = records_.at(tagged).parent;
  return parent < 0 ? -1 : records_[parent].tag_owner;
}

}  // namespace hiertag
