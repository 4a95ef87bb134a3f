// hiertag validate: tags against the grammar, the module table and the rewrites.
//
// The tag tree is the call tree: a module called by one it does not belong to
// sits under its caller, and a module called by two callers has two tags; only
// one caller cannot hold it twice. Files of format 1 (hiertag.format_version
// "1", written before call tags) are held to the module tree: a tag's path lies
// inside its parent's, and no two tags name one module path. Format 3, the one
// written, is format 2 with call references; both are checked alike.
#include <algorithm>
#include <functional>
#include <map>
#include <ostream>
#include <set>
#include <unordered_map>

#include "hiertag/core/file/file_commands.h"
#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/external_data.h"

namespace hiertag {
namespace {

constexpr const char* kTableSubject = "module table";

// True when module path `child` lies strictly inside module path `parent`.
bool IsPathInside(const std::string& child, const std::string& parent) {
  if (parent.empty()) return !child.empty();
  return child.size() > parent.size() && child.compare(0, parent.size(), parent) == 0 && child[parent.size()] == '.';
}

// The module path a disambiguated segment names: a relative qualifier is
// relative to the parent tag's module path.
std::string PathOfQualifier(const TagSegment& segment, const std::string& parent_path) {
  if (segment.absolute || parent_path.empty()) return *segment.qualifier;
  return parent_path + "." + *segment.qualifier;
}

using Problem = ValidationProblem;

class Validator {
 public:
  explicit Validator(const TaggedFile& file) : file_(file) {
    for (const ModuleEntry& entry : file.modules) listed_.insert(entry.tag);
    auto version = file.model.metadata.find(std::string(kFormatVersionKey));
    module_tree_ = version != file.model.metadata.end() && version->second == "1";
    const OnnxGraph& main = file.model.graphs.at(0);
    for (const OnnxInitializer& initializer : main.initializers) folded_values_.insert(initializer.name);
    for (int index : main.nodes) {
      const OnnxNode& node = file.model.nodes[index];
      if (node.op_type == "Constant") folded_values_.insert(node.outputs.begin(), node.outputs.end());
    }
    for (const OnnxNode& node : file.model.nodes) node_names_.emplace(node.name);
  }

  std::vector<Problem> Run() {
    CheckTable();
    CheckRewrites();
    CheckExternalData();
    for (const OnnxNode& node : file_.model.nodes) CheckNode(node);
    return std::move(problems_);
  }

 private:
  void Add(const OnnxNode* node, std::string text) {
    problems_.push_back({node, node ? "" : kTableSubject, std::move(text)});
  }
  void AddRewriteProblem(size_t record, const std::string& text) {
    problems_.push_back({nullptr, std::string(kRewritesKey), "record " + std::to_string(record) + " " + text});
  }

  // Initializers kept in external data files: the location stays inside the
  // model's folder and the file holds the bytes the tensor needs.
  void CheckExternalData() {
    for (const OnnxGraph& graph : file_.model.graphs) {
      for (const OnnxInitializer& initializer : graph.initializers) {
        if (!initializer.external) continue;
        std::string reason;
        std::optional<uint64_t> size = ExternalDataSize(file_.model.directory, *initializer.external, &reason);
        if (size && initializer.bytes > 0 && *size != static_cast<uint64_t>(initializer.bytes)) {
          reason = "external data of '" + initializer.external->location + "' is " + std::to_string(*size) +
                   " bytes, the tensor needs " + std::to_string(initializer.bytes);
        } else if (size) {
          continue;
        }
        problems_.push_back({nullptr, "initializer '" + initializer.name + "'", reason});
      }
    }
  }

  void CheckTable() {
    std::map<std::string, std::string> path_of;
    // Each tag's entry: the table is an ordered_json object, whose lookup by key
    // compares it with every member in turn.
    std::unordered_map<std::string, const Json*> entry_of;
    // Format 1: one tag per module path. Later formats: one per path and caller.
    std::map<std::pair<std::string, std::string>, std::string> tag_of_path;
    for (const std::string& tag : file_.repeated_tags) Add(nullptr, "tag '" + tag + "' is listed twice");
    for (const auto& [tag, entry] : file_.table.items()) {
      const ModuleEntry* read = file_.FindModule(tag);
      if (read == nullptr) {
        Add(nullptr, "tag '" + tag + "' has no string \"path\" and \"class\"");
        continue;
      }
      std::string reason;
      if (!ParseTag(tag, &reason)) Add(nullptr, "tag '" + tag + "' does not parse: " + reason);
      path_of.emplace(tag, read->path);
      entry_of.emplace(tag, &entry);
      std::string caller = module_tree_ ? "" : std::string(ParentTag(tag));
      auto [other, inserted] = tag_of_path.emplace(std::pair{caller, read->path}, tag);
      if (!inserted) {
        Add(nullptr, "tags '" + other->second + "' and '" + tag + "' both name module path '" + read->path + "'");
      }
      CheckTableFields(tag, entry);
    }
    for (const auto& [tag, path] : path_of) {
      std::string_view parent = ParentTag(tag);
      if (parent.empty()) {
        if (!path.empty()) Add(nullptr, "root tag '" + tag + "' names path '" + path + "', not the root ''");
        if (FindMember(*entry_of.at(tag), "parent_calls")) {
          Add(nullptr, "root tag '" + tag + "' has \"parent_calls\", but no parent");
        }
        continue;
      }
      auto found = path_of.find(std::string(parent));
      if (found == path_of.end()) {
        Add(nullptr, "tag '" + tag + "': its ancestor '" + std::string(parent) + "' is not in the table");
        continue;
      }
      if (module_tree_ && !IsPathInside(path, found->second)) {
        Add(nullptr,
            "tag '" + tag + "' names path '" + path + "', which is not inside its parent's '" + found->second + "'");
      }
      CheckQualifier(tag, path, found->second);
      CheckParentCalls(tag, *entry_of.at(tag), found->first);
    }
  }

  // A disambiguated segment's qualifier must give the entry's own path.
  void CheckQualifier(const std::string& tag, const std::string& path, const std::string& parent_path) {
    std::optional<std::vector<TagSegment>> segments = ParseTag(tag);
    if (!segments || !segments->back().qualifier) return;
    std::string named = PathOfQualifier(segments->back(), parent_path);
    if (named != path) {
      Add(nullptr, "tag '" + tag + "' names path '" + path + "', but its qualifier names '" + named + "'");
    }
  }

  // "calls", "ran" and "folded_into"; "parent_calls" once every tag's call count is known.
  void CheckTableFields(const std::string& tag, const Json& entry) {
    if (const Json* calls = FindMember(entry, "calls")) {
      std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*calls);
      if (!ordinals || ordinals->empty()) {
        Add(nullptr, "tag '" + tag + "': \"calls\" is not a non-empty array of whole numbers >= 0");
      } else if (std::adjacent_find(ordinals->begin(), ordinals->end(), std::greater_equal<>()) != ordinals->end()) {
        Add(nullptr, "tag '" + tag + "': \"calls\" is not increasing (the calls in the order they ran)");
      }
    }
    const Json* ran = FindMember(entry, "ran");
    if (ran != nullptr && !ran->is_boolean()) {
      Add(nullptr, "tag '" + tag + "': \"ran\" is not true or false");
    }
    const Json* folded_into = FindMember(entry, "folded_into");
    if (folded_into == nullptr) return;
    std::optional<std::vector<std::string>> names = ReadStrings(*folded_into);
    if (!names) {
      Add(nullptr, "tag '" + tag + "': \"folded_into\" is not an array of initializer names");
      return;
    }
    for (const std::string& name : *names) {
      if (folded_values_.count(name) == 0) {
        Add(nullptr, "tag '" + tag + "': \"folded_into\" names '" + name +
                         "', which is neither an initializer nor a Constant of the main graph");
      }
    }
  }

  void CheckParentCalls(const std::string& tag, const Json& table_entry, const std::string& parent) {
    const ModuleEntry* entry = file_.FindModule(tag);
    const ModuleEntry* parent_entry = file_.FindModule(parent);
    const Json* parent_calls = FindMember(table_entry, "parent_calls");
    if (entry == nullptr || parent_entry == nullptr || parent_calls == nullptr) return;
    std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*parent_calls);
    if (!ordinals) {
      Add(nullptr, "tag '" + tag + "': \"parent_calls\" is not an array of whole numbers >= 0");
      return;
    }
    if (static_cast<int64_t>(ordinals->size()) != entry->call_count()) {
      Add(nullptr, "tag '" + tag + "': \"parent_calls\" has " + std::to_string(ordinals->size()) + " elements for " +
                       std::to_string(entry->call_count()) + " calls");
      return;
    }
    for (size_t call = 0; call < ordinals->size(); ++call) {
      if ((*ordinals)[call] >= parent_entry->call_count()) {
        Add(nullptr, "tag '" + tag + "': \"parent_calls\" puts call " + std::to_string(call) + " in call " +
                         std::to_string((*ordinals)[call]) + " of '" + parent + "', which has " +
                         std::to_string(parent_entry->call_count()) + " calls");
      }
    }
  }

  void CheckRewrites() {
    auto text = file_.model.metadata.find(std::string(kRewritesKey));
    if (text == file_.model.metadata.end()) return;
    std::string reason;
    std::optional<Json> records = ParseJson(text->second, &reason);
    if (!records || !records->is_array()) {
      problems_.push_back({nullptr, std::string(kRewritesKey), "is not a JSON array of records"});
      return;
    }
    for (size_t i = 0; i < records->size(); ++i) {
      const Json& record = (*records)[i];
      if (!record.is_object()) {
        AddRewriteProblem(i, "is not a JSON object");
        continue;
      }
      const Json* pass = FindMember(record, "pass");
      if (pass == nullptr || !pass->is_string() || pass->get_ref<const std::string&>().empty()) {
        AddRewriteProblem(i, "has no \"pass\" name");
      }
      const Json* kind = FindMember(record, "kind");
      if (kind == nullptr || !kind->is_string() ||
          (*kind != "fused" && *kind != "removed" && *kind != "folded" && *kind != "rewired")) {
        AddRewriteProblem(i, "has no \"kind\" fused, removed, folded or rewired");
      }
      const Json* reason = FindMember(record, "reason");
      if (reason != nullptr && !reason->is_string()) AddRewriteProblem(i, "has a \"reason\" that is no string");
      const Json* node = FindMember(record, "node");
      if (node == nullptr || !node->is_string()) {
        AddRewriteProblem(i, "has no \"node\" string");
      } else if (const std::string& name = node->get_ref<const std::string&>();
                 !name.empty() && node_names_.count(name) == 0) {
        AddRewriteProblem(i, "names node '" + name + "', which is not in the model");
      }
      const Json* modules = FindMember(record, "modules");
      std::optional<std::vector<std::string>> tags = modules ? ReadStrings(*modules) : std::nullopt;
      if (!tags || tags->empty()) {
        AddRewriteProblem(i, "has no \"modules\" array of tags");
        continue;
      }
      for (const std::string& tag : *tags) CheckRef(nullptr, tag, "tag", i);
    }
  }

  // True when `tag` parses and is listed; otherwise reports it as `what`.
  bool CheckTagged(const OnnxNode& node, const std::string& tag, const char* what) {
    std::string reason;
    if (!ParseTag(tag, &reason)) {
      Add(&node, std::string(what) + " '" + tag + "' does not parse: " + reason);
      return false;
    }
    if (listed_.count(tag) == 0) {
      Add(&node, std::string(what) + " '" + tag + "' is not in the module table");
      return false;
    }
    return true;
  }

  // A call reference ("TAG" or "TAG#K"): its tag parses and is listed, and K is
  // one of its calls. Returns the tag when it is listed.
  std::optional<std::string> CheckRef(const OnnxNode* node, const std::string& text, const char* what,
                                      size_t record = 0) {
    std::optional<CallRef> ref = ParseCallRef(text);
    auto add = [&](const std::string& problem) {
      if (node != nullptr) {
        Add(node, problem);
      } else {
        AddRewriteProblem(record, problem);
      }
    };
    if (!ref) {
      add(std::string(what) + " '" + text + "' has a call number that is not a decimal ordinal");
      return std::nullopt;
    }
    std::string reason;
    if (!ParseTag(ref->tag, &reason)) {
      add(std::string(what) + " '" + ref->tag + "' does not parse: " + reason);
      return std::nullopt;
    }
    const ModuleEntry* entry = file_.FindModule(ref->tag);
    if (listed_.count(ref->tag) == 0 || entry == nullptr) {
      add(std::string(what) + " '" + ref->tag + "' is not in the module table");
      return std::nullopt;
    }
    if (ref->call && *ref->call >= entry->call_count()) {
      add(std::string(what) + " '" + text + "' names call " + std::to_string(*ref->call) + ", but '" + ref->tag +
          "' has " + std::to_string(entry->call_count()) + " calls");
    }
    return ref->tag;
  }

  // The node's metadata value `key` as a JSON array of strings; reports anything else.
  std::optional<std::vector<std::string>> TagList(const OnnxNode& node, std::string_view key) {
    auto found = node.metadata.find(std::string(key));
    if (found == node.metadata.end()) return std::nullopt;
    std::optional<std::vector<std::string>> tags = NodeTagList(node, key);
    if (!tags) Add(&node, std::string(key) + " is not a JSON array of tags");
    return tags;
  }

  void CheckNode(const OnnxNode& node) {
    const std::string_view* tag_view = NodeTag(node);
    if (tag_view == nullptr) {
      Add(&node, "has no " + std::string(kHierarchyTagKey));
      return;
    }
    const std::string tag(*tag_view);
    bool tag_listed = CheckTagged(node, tag, "tag");
    if (std::optional<std::vector<std::string>> shared = TagList(node, kSharedWithKey)) {
      for (const std::string& item : *shared) CheckRef(&node, item, "shared tag");
    }
    auto call = node.metadata.find(std::string(kCallKey));
    if (call != node.metadata.end()) {
      std::optional<int64_t> ordinal = ParseOrdinal(call->second);
      const ModuleEntry* entry = file_.FindModule(tag);
      if (!ordinal) {
        Add(&node, std::string(kCallKey) + " '" + std::string(call->second) + "' is not a decimal call ordinal");
      } else if (tag_listed && entry != nullptr && *ordinal >= entry->call_count()) {
        Add(&node, std::string(kCallKey) + " " + std::string(call->second) + " is out of range: tag '" + tag +
                       "' has " + std::to_string(entry->call_count()) + " calls");
      }
    }
    CheckSpans(node, tag, tag_listed);
  }

  void CheckSpans(const OnnxNode& node, const std::string& tag, bool tag_listed) {
    bool has_spans = node.metadata.count(std::string(kSpansKey)) > 0;
    bool has_rewrite = node.metadata.count(std::string(kRewriteKey)) > 0;
    if (has_spans != has_rewrite) {
      Add(&node, "has " + std::string(has_spans ? kSpansKey : kRewriteKey) + " but no " +
                     std::string(has_spans ? kRewriteKey : kSpansKey));
    }
    std::optional<std::vector<std::string>> spans = TagList(node, kSpansKey);
    if (!spans) return;
    for (const std::string& spanned : *spans) {
      std::optional<std::string> spanned_tag = CheckRef(&node, spanned, "spanned tag");
      if (spanned_tag && tag_listed && !IsTagAncestorOrSelf(tag, *spanned_tag)) {
        Add(&node, "tag '" + tag + "' is not an ancestor of its spanned tag '" + spanned + "'");
      }
    }
  }

  const TaggedFile& file_;
  bool module_tree_ = false;  // format 1
  std::set<std::string> listed_;
  // Where constant folding leaves its results: initializers, and Constant nodes
  // (the plugin records a folded value read through a new constant too).
  std::set<std::string> folded_values_;
  std::set<std::string> node_names_;
  std::vector<Problem> problems_;
};

}  // namespace

std::vector<ValidationProblem> Validate(const TaggedFile& file) { return Validator(file).Run(); }

Json ValidationJson(const TaggedFile& file, const std::string& path, const std::vector<ValidationProblem>& problems) {
  Json listed = Json::array();
  for (const ValidationProblem& problem : problems) {
    Json item = Json::object();
    if (problem.node != nullptr) {
      item["node"] = problem.node->name;
      item["op_type"] = problem.node->op_type;
    } else {
      item["subject"] = problem.subject;
    }
    item["problem"] = problem.text;
    listed.push_back(std::move(item));
  }
  return {{"file", path},
          {"valid", problems.empty()},
          {"nodes", file.model.nodes.size()},
          {"modules", file.table.size()},
          {"problems", std::move(listed)}};
}

}  // namespace hiertag
