// hiertag validate: tags against the grammar and the module table.
#include <map>
#include <ostream>
#include <set>

#include "hiertag/tag_format.h"
#include "hiertag/tool_commands.h"
#include "tagged_file.h"

namespace hiertag {
namespace {

// True when module path `child` lies strictly inside module path `parent`.
bool IsPathInside(const std::string& child, const std::string& parent) {
  if (parent.empty()) return !child.empty();
  return child.size() > parent.size() && child.compare(0, parent.size(), parent) == 0 &&
         child[parent.size()] == '.';
}

struct Problem {
  const OnnxNode* node = nullptr;  // nullptr: a problem of the module table
  std::string text;
};

class Validator {
 public:
  explicit Validator(const TaggedFile& file) : file_(file) {
    for (const ModuleEntry& entry : file.modules) listed_.insert(entry.tag);
  }

  std::vector<Problem> Run() {
    CheckTable();
    for (const OnnxNode& node : file_.model.nodes) CheckNode(node);
    return std::move(problems_);
  }

 private:
  void Add(const OnnxNode* node, std::string text) { problems_.push_back({node, std::move(text)}); }

  void CheckTable() {
    std::map<std::string, std::string> path_of;
    std::map<std::string, std::string> tag_of_path;
    for (const auto& [tag, entry] : file_.table.members) {
      const Json* path = entry.Find("path");
      const Json* class_name = entry.Find("class");
      if (path == nullptr || path->kind != Json::Kind::kString || class_name == nullptr ||
          class_name->kind != Json::Kind::kString) {
        Add(nullptr, "tag '" + tag + "' has no string \"path\" and \"class\"");
        continue;
      }
      std::string reason;
      if (!ParseTag(tag, &reason)) Add(nullptr, "tag '" + tag + "' does not parse: " + reason);
      if (!path_of.emplace(tag, path->text).second) {
        Add(nullptr, "tag '" + tag + "' is listed twice");
        continue;
      }
      auto [other, inserted] = tag_of_path.emplace(path->text, tag);
      if (!inserted) {
        Add(nullptr, "tags '" + other->second + "' and '" + tag + "' both name module path '" +
                         path->text + "'");
      }
    }
    for (const auto& [tag, path] : path_of) {
      std::string_view parent = ParentTag(tag);
      if (parent.empty()) {
        if (!path.empty()) Add(nullptr, "root tag '" + tag + "' names path '" + path + "', not the root ''");
        continue;
      }
      auto found = path_of.find(std::string(parent));
      if (found == path_of.end()) {
        Add(nullptr, "tag '" + tag + "': its ancestor '" + std::string(parent) + "' is not in the table");
      } else if (!IsPathInside(path, found->second)) {
        Add(nullptr, "tag '" + tag + "' names path '" + path + "', which is not inside its parent's '" +
                         found->second + "'");
      }
    }
  }

  void CheckTagged(const OnnxNode& node, const std::string& tag, const char* what) {
    std::string reason;
    if (!ParseTag(tag, &reason)) {
      Add(&node, std::string(what) + " '" + tag + "' does not parse: " + reason);
    } else if (listed_.count(tag) == 0) {
      Add(&node, std::string(what) + " '" + tag + "' is not in the module table");
    }
  }

  void CheckNode(const OnnxNode& node) {
    const std::string* tag = NodeTag(node);
    if (tag == nullptr) {
      Add(&node, "has no " + std::string(kHierarchyTagKey));
      return;
    }
    CheckTagged(node, *tag, "tag");
    auto shared = node.metadata.find(std::string(kSharedWithKey));
    if (shared == node.metadata.end()) return;
    std::string reason;
    std::optional<Json> list = ParseJson(shared->second, &reason);
    if (!list || list->kind != Json::Kind::kArray) {
      Add(&node, std::string(kSharedWithKey) + " is not a JSON array of tags");
      return;
    }
    for (const Json& item : list->items) {
      if (item.kind != Json::Kind::kString) {
        Add(&node, std::string(kSharedWithKey) + " holds a non-string");
      } else {
        CheckTagged(node, item.text, "shared tag");
      }
    }
  }

  const TaggedFile& file_;
  std::set<std::string> listed_;
  std::vector<Problem> problems_;
};

}  // namespace

int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err) {
  std::string error;
  std::optional<TaggedFile> file = LoadTaggedFile(path, &error);
  if (!file) {
    err << error << "\n";
    return 2;
  }
  std::vector<Problem> problems = Validator(*file).Run();
  size_t nodes = file->model.nodes.size();
  size_t modules = file->table.members.size();
  if (json) {
    out << "{\"file\":" << JsonQuote(path) << ",\"valid\":" << (problems.empty() ? "true" : "false")
        << ",\"nodes\":" << nodes << ",\"modules\":" << modules << ",\"problems\":[";
    for (size_t i = 0; i < problems.size(); ++i) {
      const Problem& problem = problems[i];
      out << (i ? "," : "") << "{";
      if (problem.node != nullptr) {
        out << "\"node\":" << JsonQuote(problem.node->name) << ",\"op_type\":" << JsonQuote(problem.node->op_type)
            << ",";
      }
      out << "\"problem\":" << JsonQuote(problem.text) << "}";
    }
    out << "]}\n";
  } else {
    for (const Problem& problem : problems) {
      out << path << ": " << (problem.node ? "node " + DescribeNode(*problem.node) : std::string("module table"))
          << ": " << problem.text << "\n";
    }
    if (problems.empty()) {
      out << path << ": valid: " << nodes << " nodes tagged, " << modules << " modules\n";
    } else {
      out << path << ": invalid: " << problems.size() << " problems (" << nodes << " nodes, " << modules
          << " modules)\n";
    }
  }
  return problems.empty() ? 0 : 1;
}

}  // namespace hiertag
