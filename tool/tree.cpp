// hiertag tree: the module tree (format 2: the call tree) with node, op-type and
// parameter counts, calls, folded initializers and rewrites across boundaries,
// as text, JSON or CSV.
#include <algorithm>
#include <iomanip>
#include <map>
#include <set>
#include <ostream>
#include <sstream>

#include "hiertag/core/printable.h"
#include "hiertag/core/tag_format.h"
#include "hiertag/tool/tool_commands.h"
#include "hiertag/tool/tagged_file.h"

namespace hiertag {
namespace {

struct ModuleStats {
  const ModuleEntry* entry = nullptr;
  int depth = 0;
  size_t first_node = SIZE_MAX;  // pre-order index of its first node reading computed data,
                                 // descendants included (orders children as they run)
  int64_t own_nodes = 0, total_nodes = 0;
  int64_t own_params = 0, total_params = 0;
  int64_t own_bytes = 0, total_bytes = 0;
  std::map<std::string, int64_t> ops;  // own nodes by op type
  std::vector<std::string> children;
  std::vector<const Rewrite*> rewrites;  // the rewrites listing this module
};

// "" when they have none (a tag that does not start with "/" has no ancestor in common with another).
std::string CommonAncestor(std::string a, std::string_view b) {
  while (!a.empty() && !IsTagAncestorOrSelf(a, b)) a = std::string(ParentTag(a));
  return a;
}

// Levels below the root: the tag's ancestors. A tag outside the grammar ("Net",
// no leading "/") is a root too.
int TagDepth(std::string_view tag) {
  int depth = 0;
  for (std::string_view up = ParentTag(tag); !up.empty(); up = ParentTag(up)) ++depth;
  return depth;
}

class TreeBuilder {
 public:
  explicit TreeBuilder(const TaggedFile& file) : file_(file) {}

  std::map<std::string, ModuleStats> Build() {
    for (const ModuleEntry& entry : file_.modules) {
      ModuleStats& stats = modules_[entry.tag];
      stats.entry = &entry;
      stats.depth = TagDepth(entry.tag);
    }
    for (const OnnxGraph& graph : file_.model.graphs) {
      for (const OnnxInitializer& initializer : graph.initializers) initializers_.insert(initializer.name);
    }
    for (size_t i = 0; i < file_.model.nodes.size(); ++i) CountNode(i);
    CountParameters();
    for (const Rewrite& rewrite : file_.rewrites) {
      std::set<std::string> listed(rewrite.modules.begin(), rewrite.modules.end());
      for (const std::string& tag : listed) {
        auto module = modules_.find(tag);
        if (module != modules_.end()) module->second.rewrites.push_back(&rewrite);
      }
    }
    for (auto& [tag, stats] : modules_) {
      std::string parent(ParentTag(tag));
      if (modules_.count(parent)) modules_[parent].children.push_back(tag);
    }
    return std::move(modules_);
  }

 private:
  void CountNode(size_t index) {
    const OnnxNode& node = file_.model.nodes[index];
    const std::string* tag = NodeTag(node);
    if (tag == nullptr || modules_.count(*tag) == 0) return;
    ModuleStats& stats = modules_[*tag];
    ++stats.own_nodes;
    ++stats.ops[node.op_type];
    // Constants and the Identity nodes of deduplicated initializers sit at the
    // top of the graph; the first node reading computed data shows where a module runs.
    bool reads_data = std::any_of(node.inputs.begin(), node.inputs.end(), [&](const std::string& input) {
      return !input.empty() && initializers_.count(input) == 0;
    });
    for (std::string up = *tag; !up.empty(); up = std::string(ParentTag(up))) {
      auto found = modules_.find(up);
      if (found == modules_.end()) continue;
      ++found->second.total_nodes;
      if (reads_data) found->second.first_node = std::min(found->second.first_node, index);
    }
  }

  // An initializer belongs to the common ancestor of its consumers' tags.
  void CountParameters() {
    std::map<std::string, std::string> owner;  // initializer name -> tag
    for (const OnnxNode& node : file_.model.nodes) {
      const std::string* tag = NodeTag(node);
      if (tag == nullptr) continue;
      for (const std::string& input : node.inputs) {
        auto [it, inserted] = owner.emplace(input, *tag);
        if (!inserted) it->second = CommonAncestor(it->second, *tag);
      }
    }
    for (const OnnxGraph& graph : file_.model.graphs) {
      for (const OnnxInitializer& initializer : graph.initializers) {
        auto found = owner.find(initializer.name);
        if (found == owner.end() || modules_.count(found->second) == 0) continue;
        modules_[found->second].own_params += initializer.elements;
        modules_[found->second].own_bytes += initializer.bytes;
        for (std::string up = found->second; !up.empty(); up = std::string(ParentTag(up))) {
          auto module = modules_.find(up);
          if (module == modules_.end()) continue;
          module->second.total_params += initializer.elements;
          module->second.total_bytes += initializer.bytes;
        }
      }
    }
  }

  const TaggedFile& file_;
  std::set<std::string> initializers_;
  std::map<std::string, ModuleStats> modules_;
};

std::string Thousands(int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

// One CSV field (RFC 4180): quoted when it holds a comma, a quote or a line
// break, quotes inside doubled. Class names and qualifiers in tags may hold any of them.
std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c;
  }
  return quoted + "\"";
}

constexpr const char* kCsvHeader =
    "tag,class,path,depth,nodes_own,nodes_total,params_own,params_total,bytes_own,bytes_total,calls,ran\n";

std::string HumanBytes(int64_t bytes) {
  std::ostringstream text;
  text << std::fixed << std::setprecision(1);
  if (bytes >= (1 << 20)) {
    text << bytes / double(1 << 20) << " MiB";
  } else if (bytes >= (1 << 10)) {
    text << bytes / double(1 << 10) << " KiB";
  } else {
    text << bytes << " B";
  }
  return text.str();
}

class TreePrinter {
 public:
  TreePrinter(const std::map<std::string, ModuleStats>& modules, int depth, std::ostream& out)
      : modules_(modules), depth_(depth), out_(out) {}

  // Names hold what Python allows: every line goes out through Printable, so
  // one module is one line (--json and --csv carry the exact values).
  void PrintText(const std::string& tag) {
    const ModuleStats& stats = modules_.at(tag);
    if (depth_ >= 0 && stats.depth > depth_) return;
    std::string indent(2 * stats.depth, ' ');
    std::string shown = DisplayTag(tag);
    std::string segment = shown.substr(shown.rfind('/') + 1);
    Line(indent + segment + "  " + stats.entry->class_name + "  " +
         (stats.entry->path.empty() ? "(root)" : stats.entry->path));
    std::ostringstream counts;
    counts << indent << "    nodes " << stats.own_nodes << " own / " << stats.total_nodes << " total;  params "
           << Thousands(stats.own_params) << " own / " << Thousands(stats.total_params) << " total ("
           << HumanBytes(stats.total_bytes) << ")";
    if (stats.entry->call_count() > 1) counts << ";  calls " << stats.entry->call_count();
    if (!stats.entry->ran) counts << ";  never ran (its caller reached past it)";
    Line(counts.str());
    if (!stats.ops.empty()) {
      std::string ops = indent + "    ops";
      const char* separator = " ";
      for (const auto& [op_type, count] : SortedOps(stats)) {
        ops += separator + op_type + " " + std::to_string(count);
        separator = ", ";
      }
      Line(ops);
    }
    if (!stats.entry->folded_into.empty()) Line(indent + "    folded into " + Join(stats.entry->folded_into));
    for (const Rewrite* rewrite : stats.rewrites) {
      std::vector<std::string> others = OtherModules(*rewrite, tag);
      for (std::string& other : others) other = DisplayTag(other);
      Line(indent + "    rewritten: " + rewrite->kind + (others.empty() ? "" : " with " + Join(others)) + " by " +
           rewrite->pass);
    }
    for (const std::string& child : Children(stats)) PrintText(child);
  }

  // Writes one CSV row for the module and its descendants (pre-order).
  void PrintCsv(const std::string& tag) {
    const ModuleStats& stats = modules_.at(tag);
    if (depth_ >= 0 && stats.depth > depth_) return;
    out_ << CsvField(tag) << ',' << CsvField(stats.entry->class_name) << ',' << CsvField(stats.entry->path) << ','
         << stats.depth << ',' << stats.own_nodes << ',' << stats.total_nodes << ',' << stats.own_params << ','
         << stats.total_params << ',' << stats.own_bytes << ',' << stats.total_bytes << ','
         << stats.entry->call_count() << ',' << (stats.entry->ran ? "true" : "false") << "\n";
    for (const std::string& child : Children(stats)) PrintCsv(child);
  }

  // Appends the module and its descendants (pre-order) to `modules`.
  void AddJson(const std::string& tag, Json* modules) {
    const ModuleStats& stats = modules_.at(tag);
    if (depth_ >= 0 && stats.depth > depth_) return;
    Json rewrites = Json::array();
    for (const Rewrite* rewrite : stats.rewrites) {
      rewrites.push_back(
          {{"pass", rewrite->pass}, {"kind", rewrite->kind}, {"with", OtherModules(*rewrite, tag)}, {"node", rewrite->node}});
    }
    Json ops = Json::object();
    for (const auto& [op_type, count] : SortedOps(stats)) ops[op_type] = count;
    modules->push_back({{"tag", tag},
                        {"path", stats.entry->path},
                        {"class", stats.entry->class_name},
                        {"depth", stats.depth},
                        {"nodes_own", stats.own_nodes},
                        {"nodes_total", stats.total_nodes},
                        {"params_own", stats.own_params},
                        {"params_total", stats.total_params},
                        {"bytes_own", stats.own_bytes},
                        {"bytes_total", stats.total_bytes},
                        {"calls", stats.entry->call_count()},
                        {"ran", stats.entry->ran},
                        {"folded_into", stats.entry->folded_into},
                        {"rewrites", std::move(rewrites)},
                        {"ops", std::move(ops)}});
    for (const std::string& child : Children(stats)) AddJson(child, modules);
  }

 private:
  void Line(std::string_view text) { out_ << Printable(text) << "\n"; }

  // The modules a rewrite lists besides `tag`, in its order.
  static std::vector<std::string> OtherModules(const Rewrite& rewrite, const std::string& tag) {
    std::vector<std::string> others;
    for (const std::string& module : rewrite.modules) {
      if (module != tag && std::find(others.begin(), others.end(), module) == others.end()) others.push_back(module);
    }
    return others;
  }

  static std::string Join(const std::vector<std::string>& names) {
    std::string text;
    for (size_t i = 0; i < names.size(); ++i) text += (i ? ", " : "") + names[i];
    return text;
  }

  // Most frequent first, then by name.
  static std::vector<std::pair<std::string, int64_t>> SortedOps(const ModuleStats& stats) {
    std::vector<std::pair<std::string, int64_t>> ops(stats.ops.begin(), stats.ops.end());
    std::stable_sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    return ops;
  }

  // In the order they run (first node reading computed data), the others last, by tag.
  std::vector<std::string> Children(const ModuleStats& stats) const {
    std::vector<std::string> children = stats.children;
    std::stable_sort(children.begin(), children.end(), [&](const std::string& a, const std::string& b) {
      return modules_.at(a).first_node < modules_.at(b).first_node;
    });
    return children;
  }

  const std::map<std::string, ModuleStats>& modules_;
  int depth_;
  std::ostream& out_;
};

}  // namespace

int RunTree(const std::string& path, TreeFormat format, int depth, std::ostream& out, std::ostream& err) {
  std::string error;
  std::optional<TaggedFile> file = LoadTaggedFile(path, &error);
  if (!file) {
    err << Printable(error) << "\n";
    return 2;
  }
  std::map<std::string, ModuleStats> modules = TreeBuilder(*file).Build();
  std::vector<std::string> roots;
  for (const auto& [tag, stats] : modules) {
    if (ParentTag(tag).empty()) roots.push_back(tag);
  }
  if (roots.size() != 1) {
    err << Printable(path) << ": the module table has " << roots.size() << " root tags, not one\n";
    return 2;
  }
  TreePrinter printer(modules, depth, out);
  switch (format) {
    case TreeFormat::kJson: {
      Json listed = Json::array();
      printer.AddJson(roots[0], &listed);
      out << WriteJson({{"file", path}, {"modules", std::move(listed)}}) << "\n";
      break;
    }
    case TreeFormat::kCsv:
      out << kCsvHeader;
      printer.PrintCsv(roots[0]);
      break;
    case TreeFormat::kText:
      printer.PrintText(roots[0]);
      break;
  }
  return 0;
}

}  // namespace hiertag
