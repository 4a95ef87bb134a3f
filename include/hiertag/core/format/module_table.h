// Module table: the model's module instances, their tags and the JSON table.
//
// Built once per export from `model.named_modules()` (one record per module
// instance, in that order; the root first), then finalized, which computes every
// instance's tag. Pure C++: no torch, no Python, so the tool and the tests link it.
//
// Tag rule (contract "Tags"): a module with a segment ("tagged": not filtered
// by HIERTAG_TORCH_MODULES) gets   parent_tag + "/" + segment,   where parent_tag
// is the tag of its nearest tagged ancestor and segment is
//   Class        or  Class.N       (attribute name is the list index N)
// Siblings in the tag tree whose segments would be equal (GPT-2's Conv1D
// c_attn/c_proj; ResNet's Bottleneck layer1.0/layer2.0 whose Sequential parents
// are filtered) all get the disambiguated form Class[relative.path] instead,
// where relative.path is the qualified name relative to the tag-tree parent.
// So two instances never share a tag, and the common case stays HF-style.
//
// Example: named_modules() of a GPT-2 attention block
//   h.0.attn        GPT2Attention   -> /GPT2Model/GPT2Block.0/GPT2Attention
//   h.0.attn.c_attn Conv1D          -> /GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]
//   h.0.attn.c_proj Conv1D          -> /GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_proj]
//   h.0.ln_1        LayerNorm       -> filtered: its nodes carry /GPT2Model/GPT2Block.0
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hiertag {

struct ModuleRecord {
  std::string path;         // qualified name as in named_modules(); "" for the root
  std::string class_name;   // fully qualified class name (torch.typename)
  std::string short_class;  // the class name used in the tag segment
  bool has_segment = true;  // false: a filtered torch.nn module
  int parent = -1;          // module-tree parent; -1 for the root
  int tag_owner = -1;       // nearest ancestor-or-self with a segment (after Finalize)
  int tag_depth = 0;        // depth of tag_owner in the tag tree (root = 0)
  std::string tag;          // set for modules with a segment (after Finalize)
};

class ModuleTable {
 public:
  // Appends a module; the first call adds the root (path ""), which always gets
  // a segment. Parents must be added before their children. Returns its index.
  int Add(std::string path, std::string class_name, std::string short_class, bool has_segment);

  // Computes tag_owner, tag_depth and tags. Call once, after the last Add.
  void Finalize();

  int size() const { return static_cast<int>(records_.size()); }
  const ModuleRecord& at(int index) const { return records_.at(index); }

  // Index of the module with this qualified path, or -1.
  int FindByPath(std::string_view path) const;

  // Index of the module that owns a parameter or buffer with this qualified
  // name (the longest module path that prefixes it), or -1 when none does.
  int FindOwnerOfMember(std::string_view member_name) const;

  // The tag-tree node (a module with a segment) that tags the nodes of `index`.
  int TagOwner(int index) const { return records_.at(index).tag_owner; }
  const std::string& TagOf(int index) const { return records_.at(TagOwner(index)).tag; }

  // True when module `ancestor` is `index` or one of its module-tree ancestors.
  bool IsModuleAncestorOrSelf(int ancestor, int index) const;

  // The tag-tree parent of a tagged module; -1 for the root.
  int TagParent(int tagged) const;
  // The tagged modules whose TagParent is `index`, in index order (after
  // Finalize; empty for a module without a segment).
  const std::vector<int>& TagChildren(int index) const { return tag_children_.at(index); }

  // A module's segment without disambiguation: Class, or Class.N when its
  // attribute name is the list index N.
  std::string PlainSegment(int index) const;
  // The last segment of a tagged module's tag.
  std::string_view OwnSegment(int tagged) const;

 private:
  std::vector<ModuleRecord> records_;
  std::vector<std::vector<int>> tag_children_;
  // Hashes a path given as a string_view without making a std::string of it
  // (FindByPath runs per prefix of every deduplicated parameter's name).
  struct PathHash : std::hash<std::string_view> {
    using is_transparent = void;
  };
  std::unordered_map<std::string, int, PathHash, std::equal_to<>> index_by_path_;
  bool finalized_ = false;
};

}  // namespace hiertag
