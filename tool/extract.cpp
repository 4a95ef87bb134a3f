// hiertag extract: one module's nodes as a standalone ONNX model.
//
// Selection: the main graph's nodes whose tag, or one of whose
// hiertag.shared_with tags, lies within the module (a node's If/Loop bodies come
// with it), plus every Constant node outside that the selection reads. A use of
// a shared node by another module it was kept for is that module's own copy of
// the computation: it neither makes an output nor breaks convexity.
// Inputs: the values the selection reads and does not make, initializers aside
// (copied). Outputs: the values it makes that a node outside reads, or that are
// model outputs. Node order, opsets and IR version are the source's. A module
// whose nodes are not a convex region (a path leaves it and re-enters) is refused.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <set>

#include "hiertag/onnx_fields.h"
#include "hiertag/proto_wire.h"
#include "hiertag/tag_format.h"
#include "hiertag/tool_commands.h"
#include "hiertag/value_types.h"
#include "tagged_file.h"

namespace hiertag {
namespace {

using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto


size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ClosestTags(const TaggedFile& file, const std::string& tag) {
  std::vector<std::pair<size_t, std::string>> ranked;
  for (const ModuleEntry& entry : file.modules) ranked.emplace_back(EditDistance(entry.tag, tag), entry.tag);
  std::sort(ranked.begin(), ranked.end());
  std::string list;
  for (size_t i = 0; i < ranked.size() && i < 3; ++i) list += (i ? ", " : "") + ranked[i].second;
  return list;
}

// The node's tag followed by its hiertag.shared_with tags.
std::vector<std::string> NodeTags(const OnnxNode& node) {
  std::vector<std::string> tags;
  if (const std::string* own = NodeTag(node)) tags.push_back(*own);
  auto shared = node.metadata.find(std::string(kSharedWithKey));
  std::string error;
  std::optional<Json> list = shared == node.metadata.end() ? std::nullopt : ParseJson(shared->second, &error);
  if (list) {
    for (const Json& item : list->items) tags.push_back(item.text);
  }
  return tags;
}

class Extractor {
 public:
  Extractor(const TaggedFile& file, std::string tag) : file_(file), tag_(std::move(tag)), types_(file.model) {}

  // Builds the extracted model into *bytes; false with a one-line reason.
  bool Run(std::string* bytes, std::string* error) {
    const OnnxGraph& main = file_.model.graphs.at(0);
    for (const OnnxInitializer& initializer : main.initializers) initializers_[initializer.name] = &initializer;
    for (int index : main.nodes) {
      reads_[index] = CollectReads(index);
      tags_[index] = NodeTags(file_.model.nodes[index]);
      for (const std::string& output : file_.model.nodes[index].outputs) producer_[output] = index;
      for (const std::string& input : reads_[index]) consumers_[input].push_back(index);
    }
    for (int index : main.nodes) {
      const std::vector<std::string>& tags = tags_.at(index);
      if (std::any_of(tags.begin(), tags.end(), [&](const std::string& t) { return IsTagAncestorOrSelf(tag_, t); })) {
        selected_.insert(index);
      }
    }
    if (selected_.empty()) {
      *error = "module '" + tag_ + "' has no nodes in the main graph";
      return false;
    }
    if (!CheckConvex(error)) return false;
    AddNeededConstants();
    return Assemble(bytes, error);
  }

  size_t node_count() const { return selected_.size(); }
  const std::vector<std::string>& inputs() const { return inputs_; }
  const std::vector<std::string>& outputs() const { return outputs_; }
  size_t initializer_count() const { return needed_initializers_.size(); }

 private:
  // Values a main-graph node reads (collected once in Run).
  const std::vector<std::string>& Reads(int index) const { return reads_.at(index); }

  // Values a node reads, its graphs' references to outer values included.
  std::vector<std::string> CollectReads(int index) const {
    const OnnxNode& node = file_.model.nodes[index];
    std::vector<std::string> reads;
    for (const std::string& input : node.inputs) {
      if (!input.empty()) reads.push_back(input);
    }
    for (int graph : node.subgraphs) OuterReads(graph, {}, &reads);
    return reads;
  }

  void OuterReads(int graph_index, std::set<std::string> defined, std::vector<std::string>* reads) const {
    const OnnxGraph& graph = file_.model.graphs[graph_index];
    for (const OnnxValue& input : graph.inputs) defined.insert(input.name);
    for (const OnnxInitializer& initializer : graph.initializers) defined.insert(initializer.name);
    for (int index : graph.nodes) {
      for (const std::string& output : file_.model.nodes[index].outputs) defined.insert(output);
    }
    for (int index : graph.nodes) {
      const OnnxNode& node = file_.model.nodes[index];
      for (const std::string& input : node.inputs) {
        if (!input.empty() && defined.count(input) == 0) reads->push_back(input);
      }
      for (int nested : node.subgraphs) OuterReads(nested, defined, reads);
    }
  }

  // True when `user` reads `producer`'s output as another module the producer
  // was kept for (hiertag.shared_with), outside the extracted module: that
  // module's own copy of the computation, not a value leaving the extracted
  // module. This holds for an ancestor that computed the same value itself too
  // (measured on SAM: a two-way attention block's Add merged with an identical
  // Add of the transformer holding it, which the block never returned).
  bool IsOtherSharersUse(int producer, int user) const {
    const std::vector<std::string>& tags = tags_.at(producer);
    const std::string* user_tag = NodeTag(file_.model.nodes[user]);
    if (tags.size() < 2 || user_tag == nullptr) return false;
    return std::any_of(tags.begin(), tags.end(), [&](const std::string& sharer) {
      return !IsTagAncestorOrSelf(tag_, sharer) && IsTagAncestorOrSelf(sharer, *user_tag);
    });
  }

  // An edge from the selection to a node outside it that leaves the module.
  bool Leaves(int producer, int user) const {
    return !selected_.count(user) && !(selected_.count(producer) && IsOtherSharersUse(producer, user));
  }

  // No node outside the selection may both depend on it and feed it.
  bool CheckConvex(std::string* error) const {
    std::set<int> downstream;  // outside nodes reachable from the selection
    std::vector<int> work(selected_.begin(), selected_.end());
    while (!work.empty()) {
      int index = work.back();
      work.pop_back();
      for (const std::string& output : file_.model.nodes[index].outputs) {
        auto users = consumers_.find(output);
        if (users == consumers_.end()) continue;
        for (int user : users->second) {
          if (Leaves(index, user) && downstream.insert(user).second) work.push_back(user);
        }
      }
    }
    std::set<int> upstream;  // outside nodes the selection depends on
    work.assign(selected_.begin(), selected_.end());
    while (!work.empty()) {
      int index = work.back();
      work.pop_back();
      for (const std::string& input : Reads(index)) {
        auto producer = producer_.find(input);
        if (producer == producer_.end() || selected_.count(producer->second)) continue;
        if (downstream.count(producer->second)) {
          *error = "module '" + tag_ + "' is not a convex region of the graph: node " +
                   DescribeNode(file_.model.nodes[producer->second]) +
                   " takes values from the module and gives values back to it";
          return false;
        }
        if (upstream.insert(producer->second).second) work.push_back(producer->second);
      }
    }
    return true;
  }

  // Copies in the Constant nodes outside that the selection reads: weights it
  // needs, not values it makes (they give no outputs).
  void AddNeededConstants() {
    std::vector<int> constants;
    for (int index : selected_) {
      for (const std::string& input : Reads(index)) {
        auto producer = producer_.find(input);
        if (producer != producer_.end() && !selected_.count(producer->second) &&
            file_.model.nodes[producer->second].op_type == "Constant" &&
            file_.model.nodes[producer->second].inputs.empty()) {
          constants.push_back(producer->second);
        }
      }
    }
    selected_.insert(constants.begin(), constants.end());
    copied_constants_.insert(constants.begin(), constants.end());
  }

  bool Assemble(std::string* bytes, std::string* error) {
    std::set<std::string> made;
    for (int index : selected_) {
      for (const std::string& output : file_.model.nodes[index].outputs) made.insert(output);
    }
    std::set<std::string> seen;
    for (int index : selected_) {
      for (const std::string& input : Reads(index)) {
        if (made.count(input) || !seen.insert(input).second) continue;
        if (initializers_.count(input)) {
          needed_initializers_.push_back(input);
        } else {
          inputs_.push_back(input);
        }
      }
    }
    std::set<std::string> model_outputs;
    for (const OnnxValue& output : file_.model.graphs[0].outputs) model_outputs.insert(output.name);
    for (int index : selected_) {
      if (copied_constants_.count(index)) continue;
      for (const std::string& output : file_.model.nodes[index].outputs) {
        auto users = consumers_.find(output);
        bool used_outside = users != consumers_.end() &&
                            std::any_of(users->second.begin(), users->second.end(),
                                        [&](int user) { return Leaves(index, user); });
        if (used_outside || model_outputs.count(output)) outputs_.push_back(output);
      }
    }
    if (outputs_.empty()) {
      *error = "module '" + tag_ + "' produces nothing used outside it";
      return false;
    }
    std::string graph;
    for (int index : selected_) wire::AppendLengthDelimited(&graph, kGraphNode, file_.model.nodes[index].raw);
    wire::AppendLengthDelimited(&graph, kGraphName, "hiertag_extract");
    for (const std::string& name : needed_initializers_) {
      wire::AppendLengthDelimited(&graph, kGraphInitializer, initializers_.at(name)->raw);
    }
    for (const auto& [field, names] : {std::pair{kGraphInput, &inputs_}, std::pair{kGraphOutput, &outputs_}}) {
      for (const std::string& name : *names) {
        std::optional<std::string_view> type = types_.Find(name);
        if (!type) {
          *error = "no type for value '" + name + "'" +
                   (types_.inference_error().empty() ? "" : " (" + types_.inference_error() + ")");
          return false;
        }
        wire::AppendLengthDelimited(&graph, field, *type);
      }
    }
    AssembleModel(graph, bytes);
    return true;
  }

  // The source's ModelProto fields with the new graph and a module table
  // restricted to the extracted module, its descendants and its ancestors.
  void AssembleModel(const std::string& graph, std::string* bytes) const {
    std::string table = "{";
    bool first = true;
    for (const ModuleEntry& entry : file_.modules) {
      if (!IsTagAncestorOrSelf(tag_, entry.tag) && !IsTagAncestorOrSelf(entry.tag, tag_)) continue;
      table += (first ? "" : ",") + JsonQuote(entry.tag) + ":{\"path\":" + JsonQuote(entry.path) +
               ",\"class\":" + JsonQuote(entry.class_name) + "}";
      first = false;
    }
    table += "}";
    wire::Reader reader(file_.model.bytes());
    wire::Field field;
    bool entries_written = false;
    auto write_entries = [&] {
      wire::AppendLengthDelimited(bytes, kModelMetadataProps, StringEntry(kModuleTableKey, table));
      wire::AppendLengthDelimited(bytes, kModelMetadataProps, StringEntry(kFormatVersionKey, kFormatVersion));
      entries_written = true;
    };
    while (!reader.done() && reader.Next(&field)) {
      if (!entries_written && field.number > kModelMetadataProps) write_entries();
      if (field.number == kModelGraph) {
        wire::AppendLengthDelimited(bytes, kModelGraph, graph);
      } else if (field.number != kModelMetadataProps) {
        bytes->append(field.raw);
      }
    }
    if (!entries_written) write_entries();
  }

  const TaggedFile& file_;
  std::string tag_;
  ValueTypes types_;
  std::map<std::string, const OnnxInitializer*> initializers_;
  std::map<int, std::vector<std::string>> reads_;  // per main-graph node
  std::map<int, std::vector<std::string>> tags_;   // its tag, then its shared_with tags
  std::map<std::string, int> producer_;
  std::map<std::string, std::vector<int>> consumers_;
  std::set<int> selected_;  // ordered: node indices are the source's order
  std::set<int> copied_constants_;
  std::vector<std::string> inputs_;
  std::vector<std::string> outputs_;
  std::vector<std::string> needed_initializers_;
};

std::string DefaultOutputPath(const std::string& path, const std::string& tag) {
  std::string stem = std::filesystem::path(path).replace_extension().string();
  std::string suffix;
  for (char c : tag.substr(1)) suffix.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '.' ? c : '_');
  return stem + "." + suffix + ".onnx";
}

// Writes next to the target and renames, so no half-written file is left as OUT.
bool WriteFileAtomically(const std::string& path, const std::string& bytes, std::string* error) {
  std::string temporary = path + ".hiertag-partial";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) {
      std::remove(temporary.c_str());
      *error = "cannot write " + path;
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace

int RunExtract(const std::string& path, const std::string& tag, const std::string& out_path, bool json,
               std::ostream& out, std::ostream& err) {
  std::string error;
  std::optional<TaggedFile> file = LoadTaggedFile(path, &error);
  if (!file) {
    err << error << "\n";
    return 2;
  }
  bool known = std::any_of(file->modules.begin(), file->modules.end(),
                           [&](const ModuleEntry& entry) { return entry.tag == tag; });
  if (!known) {
    err << path << ": unknown module '" << tag << "'; closest: " << ClosestTags(*file, tag) << "\n";
    return 2;
  }
  Extractor extractor(*file, tag);
  std::string bytes;
  if (!extractor.Run(&bytes, &error)) {
    err << path << ": " << error << "\n";
    return 2;
  }
  std::string target = out_path.empty() ? DefaultOutputPath(path, tag) : out_path;
  if (!WriteFileAtomically(target, bytes, &error)) {
    err << path << ": " << error << "\n";
    return 2;
  }
  if (json) {
    auto list = [](const std::vector<std::string>& names) {
      std::string text = "[";
      for (size_t i = 0; i < names.size(); ++i) text += (i ? "," : "") + JsonQuote(names[i]);
      return text + "]";
    };
    out << "{\"file\":" << JsonQuote(path) << ",\"module\":" << JsonQuote(tag) << ",\"output\":" << JsonQuote(target)
        << ",\"nodes\":" << extractor.node_count() << ",\"inputs\":" << list(extractor.inputs())
        << ",\"outputs\":" << list(extractor.outputs()) << ",\"initializers\":" << extractor.initializer_count()
        << "}\n";
  } else {
    out << target << ": " << tag << ": " << extractor.node_count() << " nodes, " << extractor.inputs().size()
        << " inputs, " << extractor.outputs().size() << " outputs, " << extractor.initializer_count()
        << " initializers\n";
  }
  return 0;
}

}  // namespace hiertag
