// hiertag tree: the call tree (files of format 1: the module tree) with node, op-type and
// parameter counts, calls, folded initializers and rewrites across boundaries,
// as text, JSON or CSV.
#include <algorithm>
#include <iomanip>
#include <limits>
#include <map>
#include <ostream>
#include <set>
#include <sstream>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hiertag/core/file/file_commands.h"
#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

// Sizes are sums of products the file declares: an initializer's dims may claim
// INT64_MAX elements (the reader saturates there), so sums saturate too.
void AddSaturating(int64_t* sum, int64_t value) {
  if (__builtin_add_overflow(*sum, value, sum)) *sum = std::numeric_limits<int64_t>::max();
}

struct ModuleStats {
  const ModuleEntry* entry = nullptr;
  int depth = 0;
  size_t first_node = SIZE_MAX;  // pre-order index of its first node reading computed data,
                                 // descendants included (orders children as they run)
  int64_t own_nodes = 0, total_nodes = 0;
  int64_t own_params = 0, total_params = 0;
  int64_t own_bytes = 0, total_bytes = 0;
  std::map<std::string, int64_t, std::less<>> ops;  // own nodes by op type
  std::vector<size_t> children;                     // modules whose parent tag is this one's
  std::vector<const Rewrite*> rewrites;             // the rewrites listing this module
  size_t up = kNone;                                // the nearest ancestor the table lists
  static constexpr size_t kNone = SIZE_MAX;
};

// The table's modules, each once (a tag listed twice keeps its last entry), in
// tag order, with their counts. Built in time linear in the file: each tag is
// looked up once per node and walked up once per module, and totals are summed
// child into parent, deepest first, never by walking a node's ancestors.
struct Tree {
  std::vector<ModuleStats> modules;
  std::unordered_map<std::string_view, size_t> index;  // tag (the entry's) -> modules

  size_t Find(std::string_view tag) const {
    auto found = index.find(tag);
    return found == index.end() ? ModuleStats::kNone : found->second;
  }
  const std::string& Tag(size_t module) const { return modules[module].entry->tag; }
};

class TreeBuilder {
 public:
  explicit TreeBuilder(const TaggedFile& file) : file_(file) {}

  Tree Build() {
    std::map<std::string_view, const ModuleEntry*> entries;  // tag order, the last entry of a tag
    for (const ModuleEntry& entry : file_.modules) entries[entry.tag] = &entry;
    tree_.modules.reserve(entries.size());
    for (const auto& [tag, entry] : entries) {
      tree_.index.emplace(tag, tree_.modules.size());
      tree_.modules.emplace_back().entry = entry;
    }
    Link();
    for (const OnnxGraph& graph : file_.model.graphs) {
      for (const OnnxInitializer& initializer : graph.initializers) initializers_.insert(initializer.name);
    }
    for (size_t i = 0; i < file_.model.nodes.size(); ++i) CountNode(i);
    CountParameters();
    SumTotals();
    for (const Rewrite& rewrite : file_.rewrites) {
      std::set<std::string_view> listed(rewrite.modules.begin(), rewrite.modules.end());
      for (std::string_view tag : listed) {
        size_t module = tree_.Find(tag);
        if (module != ModuleStats::kNone) tree_.modules[module].rewrites.push_back(&rewrite);
      }
    }
    return std::move(tree_);
  }

 private:
  // Each module's depth (its tag's levels below the root: ancestors the table
  // lacks count too; a tag outside the grammar is a root), its nearest listed
  // ancestor, and its place among its parent's children. Modules come in tag
  // order, so a listed ancestor, a prefix, comes before its descendants.
  void Link() {
    std::unordered_map<std::string_view, int> depth_of;  // unlisted ancestors' depths, as met
    auto depth = [&](std::string_view tag) {
      std::string_view parent = ParentTag(tag);
      if (parent.empty()) return 0;
      size_t listed = tree_.Find(parent);
      if (listed != ModuleStats::kNone) return tree_.modules[listed].depth + 1;
      auto known = depth_of.find(parent);
      if (known != depth_of.end()) return known->second + 1;
      int parent_depth = 0;  // a gap: walk it once, without recursion
      std::vector<std::string_view> gap{parent};
      for (std::string_view up = ParentTag(parent); !up.empty(); up = ParentTag(up)) {
        size_t found = tree_.Find(up);
        if (found != ModuleStats::kNone) {
          parent_depth = tree_.modules[found].depth + 1;
          break;
        }
        auto seen = depth_of.find(up);
        if (seen != depth_of.end()) {
          parent_depth = seen->second + 1;
          break;
        }
        gap.push_back(up);
      }
      for (auto level = gap.rbegin(); level != gap.rend(); ++level) depth_of[*level] = parent_depth++;
      return parent_depth;
    };
    for (size_t i = 0; i < tree_.modules.size(); ++i) {
      ModuleStats& stats = tree_.modules[i];
      std::string_view tag = tree_.Tag(i);
      stats.depth = depth(tag);
      std::string_view parent = ParentTag(tag);
      size_t direct = parent.empty() ? ModuleStats::kNone : tree_.Find(parent);
      if (direct != ModuleStats::kNone) {
        tree_.modules[direct].children.push_back(i);
        stats.up = direct;
        continue;
      }
      if (parent.empty()) continue;
      for (std::string_view up = ParentTag(parent); !up.empty() && stats.up == ModuleStats::kNone; up = ParentTag(up)) {
        stats.up = tree_.Find(up);
      }
    }
  }

  void CountNode(size_t index) {
    const OnnxNode& node = file_.model.nodes[index];
    const std::string_view* tag = NodeTag(node);
    size_t module = tag == nullptr ? ModuleStats::kNone : tree_.Find(*tag);
    if (module == ModuleStats::kNone) return;
    ModuleStats& stats = tree_.modules[module];
    ++stats.own_nodes;
    auto op = stats.ops.find(node.op_type);  // a string made once per op type, not per node
    if (op == stats.ops.end()) op = stats.ops.emplace(std::string(node.op_type), 0).first;
    ++op->second;
    // Constants and the Identity nodes of deduplicated initializers sit at the
    // top of the graph; the first node reading computed data shows where a module runs.
    bool reads_data = std::any_of(node.inputs.begin(), node.inputs.end(), [&](std::string_view input) {
      return !input.empty() && initializers_.count(input) == 0;
    });
    if (reads_data) stats.first_node = std::min(stats.first_node, index);
  }

  // An initializer belongs to the common ancestor of its consumers' tags (the
  // nearest the table lists); a consumer whose tag the table lacks counts by
  // its nearest listed ancestor.
  void CountParameters() {
    std::unordered_map<std::string_view, size_t> owner;  // initializer name -> module
    for (const OnnxNode& node : file_.model.nodes) {
      const std::string_view* tag = NodeTag(node);
      if (tag == nullptr) continue;
      size_t module = Listed(*tag);
      if (module == ModuleStats::kNone) continue;
      for (std::string_view input : node.inputs) {
        auto [it, inserted] = owner.emplace(input, module);
        if (!inserted) it->second = CommonAncestor(it->second, module);
      }
    }
    for (const OnnxGraph& graph : file_.model.graphs) {
      for (const OnnxInitializer& initializer : graph.initializers) {
        auto found = owner.find(initializer.name);
        if (found == owner.end() || found->second == ModuleStats::kNone) continue;
        AddSaturating(&tree_.modules[found->second].own_params, initializer.elements);
        AddSaturating(&tree_.modules[found->second].own_bytes, initializer.bytes);
      }
    }
  }

  // The module of `tag`, else of its nearest listed ancestor.
  size_t Listed(std::string_view tag) const {
    for (; !tag.empty(); tag = ParentTag(tag)) {
      size_t module = tree_.Find(tag);
      if (module != ModuleStats::kNone) return module;
    }
    return ModuleStats::kNone;
  }

  // Walks the deeper of the two up the listed ancestors until they meet.
  size_t CommonAncestor(size_t a, size_t b) const {
    while (a != b && a != ModuleStats::kNone && b != ModuleStats::kNone) {
      if (tree_.modules[a].depth >= tree_.modules[b].depth) {
        a = tree_.modules[a].up;
      } else {
        b = tree_.modules[b].up;
      }
    }
    return a == b ? a : ModuleStats::kNone;
  }

  // Totals: own counts summed into every listed ancestor, deepest modules first.
  void SumTotals() {
    std::vector<size_t> order(tree_.modules.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return tree_.modules[a].depth > tree_.modules[b].depth; });
    for (ModuleStats& stats : tree_.modules) {
      stats.total_nodes += stats.own_nodes;
      AddSaturating(&stats.total_params, stats.own_params);
      AddSaturating(&stats.total_bytes, stats.own_bytes);
    }
    for (size_t i : order) {
      const ModuleStats& stats = tree_.modules[i];
      if (stats.up == ModuleStats::kNone) continue;
      ModuleStats& up = tree_.modules[stats.up];
      up.total_nodes += stats.total_nodes;
      AddSaturating(&up.total_params, stats.total_params);
      AddSaturating(&up.total_bytes, stats.total_bytes);
      up.first_node = std::min(up.first_node, stats.first_node);
    }
  }

  const TaggedFile& file_;
  std::unordered_set<std::string_view> initializers_;
  Tree tree_;
};

std::string Thousands(int64_t value) {
  std::string digits = std::to_string(value);
  size_t start = digits[0] == '-' ? 1 : 0;
  std::string grouped = digits.substr(0, start);
  for (size_t i = start; i < digits.size(); ++i) {
    if (i > start && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
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
  TreePrinter(const Tree& tree, int depth, std::ostream& out) : tree_(tree), depth_(depth), out_(out) {}

  // Calls visit(module) for `root` and its descendants down to --depth, in
  // pre-order, children as they run; a loop, not a recursion: a tree as deep
  // as the file allows needs no stack of its depth.
  template <typename Visit>
  void PreOrder(size_t root, Visit visit) const {
    std::vector<size_t> pending{root};
    while (!pending.empty()) {
      size_t module = pending.back();
      pending.pop_back();
      if (depth_ >= 0 && tree_.modules[module].depth > depth_) continue;
      visit(module);
      std::vector<size_t> children = Children(tree_.modules[module]);
      pending.insert(pending.end(), children.rbegin(), children.rend());
    }
  }

  // Names hold what Python allows: every line goes out through Printable, so
  // one module is one line (--json and --csv carry the exact values).
  void PrintText(size_t root) {
    PreOrder(root, [&](size_t module) { PrintText(tree_.Tag(module), tree_.modules[module]); });
  }

  // Writes one CSV row for the module and its descendants (pre-order).
  void PrintCsv(size_t root) {
    PreOrder(root, [&](size_t module) { PrintCsv(tree_.Tag(module), tree_.modules[module]); });
  }

  // Appends the module and its descendants (pre-order) to `modules`.
  void AddJson(size_t root, Json* modules) {
    PreOrder(root, [&](size_t module) { AddJson(tree_.Tag(module), tree_.modules[module], modules); });
  }

 private:
  void PrintText(const std::string& tag, const ModuleStats& stats) {
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
  }

  void PrintCsv(const std::string& tag, const ModuleStats& stats) {
    out_ << CsvField(tag) << ',' << CsvField(stats.entry->class_name) << ',' << CsvField(stats.entry->path) << ','
         << stats.depth << ',' << stats.own_nodes << ',' << stats.total_nodes << ',' << stats.own_params << ','
         << stats.total_params << ',' << stats.own_bytes << ',' << stats.total_bytes << ',' << stats.entry->call_count()
         << ',' << (stats.entry->ran ? "true" : "false") << "\n";
  }

  void AddJson(const std::string& tag, const ModuleStats& stats, Json* modules) {
    Json rewrites = Json::array();
    for (const Rewrite* rewrite : stats.rewrites) {
      rewrites.push_back({{"pass", rewrite->pass},
                          {"kind", rewrite->kind},
                          {"with", OtherModules(*rewrite, tag)},
                          {"node", rewrite->node}});
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
  }

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

  // In the order they run (first node reading computed data), the others last;
  // ties by tag (the children are listed in tag order).
  std::vector<size_t> Children(const ModuleStats& stats) const {
    std::vector<size_t> children = stats.children;
    std::stable_sort(children.begin(), children.end(),
                     [&](size_t a, size_t b) { return tree_.modules[a].first_node < tree_.modules[b].first_node; });
    return children;
  }

  const Tree& tree_;
  int depth_;
  std::ostream& out_;
};

// The one root module of the tree, or kNone with a one-line *error.
size_t RootOf(const Tree& tree, const std::string& path, std::string* error) {
  std::vector<size_t> roots;
  for (size_t module = 0; module < tree.modules.size(); ++module) {
    if (ParentTag(tree.Tag(module)).empty()) roots.push_back(module);
  }
  if (roots.size() == 1) return roots[0];
  *error = path + ": the module table has " + std::to_string(roots.size()) + " root tags, not one";
  return ModuleStats::kNone;
}

}  // namespace

std::optional<Json> TreeJson(const TaggedFile& file, const std::string& path, int depth, std::string* error) {
  Tree tree = TreeBuilder(file).Build();
  size_t root = RootOf(tree, path, error);
  if (root == ModuleStats::kNone) return std::nullopt;
  std::ostringstream unused;
  Json listed = Json::array();
  TreePrinter(tree, depth, unused).AddJson(root, &listed);
  return Json{{"file", path}, {"modules", std::move(listed)}};
}

bool PrintTree(const TaggedFile& file, const std::string& path, TreeFormat format, int depth, std::ostream& out,
               std::string* error) {
  if (format == TreeFormat::kJson) {
    std::optional<Json> json = TreeJson(file, path, depth, error);
    if (!json) return false;
    out << WriteJson(*json) << "\n";
    return true;
  }
  Tree tree = TreeBuilder(file).Build();
  size_t root = RootOf(tree, path, error);
  if (root == ModuleStats::kNone) return false;
  TreePrinter printer(tree, depth, out);
  if (format == TreeFormat::kCsv) {
    out << kCsvHeader;
    printer.PrintCsv(root);
  } else {
    printer.PrintText(root);
  }
  return true;
}

}  // namespace hiertag
