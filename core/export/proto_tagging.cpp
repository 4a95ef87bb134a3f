// Proto tagging: wire-level insertion of node and model metadata_props.
//
// Only ModelProto.graph, GraphProto.node, the NodeProto.attribute entries that
// hold a graph and AttributeProto.g/graphs are descended into; every other
// field is copied as raw bytes (as the input encoded it). Field numbers are
// those of onnx.proto (ONNX >= 1.16).
#include "hiertag/core/export/proto_tagging.h"

#include <cstdint>
#include <optional>
#include <unordered_map>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using wire::AppendLengthDelimited;
using wire::AppendVarint;
using wire::Field;
using wire::kLengthDelimited;
using wire::Reader;
using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

constexpr int kMaxGraphNesting = 64;

}  // namespace

class PlanBuilder {
 public:
  // One length-delimited message being rebuilt: its chunks, its payload size.
  struct Rebuilt {
    std::vector<TaggedModelPlan::Chunk> chunks;
    size_t size = 0;
  };

  // Not copied or moved: by_outputs_ views keys_, whose characters a short key keeps inside the string.
  PlanBuilder(const PlanBuilder&) = delete;
  PlanBuilder& operator=(const PlanBuilder&) = delete;

  PlanBuilder(const std::vector<SerializedNodeTag>& nodes, TaggedModelPlan* plan, std::string* error)
      : nodes_(nodes), plan_(plan), error_(error), used_(nodes.size(), false) {
    // Every key in one buffer, sized first so the views into it stay valid.
    size_t keys_size = 0;
    for (const SerializedNodeTag& entry : nodes) {
      by_identity_ |= !entry.outputs.empty();
      for (const std::string& output : entry.outputs) keys_size += output.size() + 1;
    }
    keys_.reserve(keys_size);
    by_outputs_.reserve(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].outputs.empty()) {
        without_outputs_.push_back(i);
      } else {
        size_t begin = keys_.size();
        AppendOutputsKey(nodes[i].outputs, &keys_);
        by_outputs_.emplace(std::string_view(keys_).substr(begin), i);
      }
    }
  }

  bool BuildModel(std::string_view model, const std::vector<ModelMetadataEntry>& entries) {
    Reader reader(model);
    Field field;
    bool saw_graph = false;
    bool entries_written = false;
    Rebuilt out;
    auto write_entries = [&] {
      std::string bytes;
      for (const ModelMetadataEntry& entry : entries) {
        AppendStringEntry(&bytes, kModelMetadataProps, entry.key, entry.value);
      }
      Own(&out, bytes);
      entries_written = true;
    };
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("the model is not a well-formed ModelProto");
      // Keep the canonical field order: our entries go before the first higher field.
      if (!entries_written && field.number > kModelMetadataProps) write_entries();
      if (field.number == kModelGraph && field.wire_type == kLengthDelimited) {
        Rebuilt graph;
        if (!BuildGraph(field.payload, 0, &graph)) return false;
        Splice(&out, kModelGraph, graph);
        saw_graph = true;
      } else {
        Borrow(&out, field.raw);
      }
    }
    if (!entries_written) write_entries();
    if (!saw_graph) return Fail("the model has no graph");
    for (size_t i = 0; i < nodes_.size(); ++i) {
      if (!used_[i]) {
        return Fail("the graph's " + nodes_[i].op_type + " node " + DescribeOutputs(nodes_[i].outputs) +
                    " is not in the model (" + std::to_string(written_) + " nodes written, " +
                    std::to_string(nodes_.size()) + " tagged)");
      }
    }
    plan_->chunks_ = std::move(out.chunks);
    plan_->size_ = out.size;
    return true;
  }

 private:
  bool Fail(std::string message) {
    *error_ = std::move(message);
    return false;
  }

  void Borrow(Rebuilt* out, std::string_view bytes) {
    if (bytes.empty()) return;
    TaggedModelPlan::Chunk* last = out->chunks.empty() ? nullptr : &out->chunks.back();
    if (last != nullptr && !last->borrowed.empty() && last->borrowed.data() + last->borrowed.size() == bytes.data()) {
      last->borrowed = std::string_view(last->borrowed.data(), last->borrowed.size() + bytes.size());
    } else {
      out->chunks.push_back({bytes, 0});
    }
    out->size += bytes.size();
  }

  // Appends a copy of `bytes` to `out`: to its last chunk when that is owned.
  void Own(Rebuilt* out, std::string_view bytes) {
    if (bytes.empty()) return;
    out->size += bytes.size();
    TaggedModelPlan::Chunk* last = out->chunks.empty() ? nullptr : &out->chunks.back();
    if (last != nullptr && last->borrowed.empty()) {
      plan_->owned_[last->owned].append(bytes);
    } else {
      plan_->owned_.emplace_back(bytes);
      out->chunks.push_back({{}, plan_->owned_.size() - 1});
    }
  }

  // Appends the header of length-delimited field `field` of `size` bytes.
  void OwnHeader(Rebuilt* out, uint32_t field, size_t size) {
    header_.clear();
    AppendVarint(&header_, (static_cast<uint64_t>(field) << 3) | kLengthDelimited);
    AppendVarint(&header_, size);
    Own(out, header_);
  }

  // Appends `inner` as length-delimited field `field` of `out`. Inner's owned
  // chunks are taken over as they are (at most one, the first, is copied: where
  // it joins out's last owned chunk).
  void Splice(Rebuilt* out, uint32_t field, const Rebuilt& inner) {
    OwnHeader(out, field, inner.size);
    for (const TaggedModelPlan::Chunk& chunk : inner.chunks) {
      if (!chunk.borrowed.empty()) {
        Borrow(out, chunk.borrowed);
      } else if (!out->chunks.empty() && out->chunks.back().borrowed.empty()) {
        Own(out, plan_->owned_[chunk.owned]);
        plan_->owned_[chunk.owned].clear();
        plan_->owned_[chunk.owned].shrink_to_fit();
      } else {
        out->size += plan_->owned_[chunk.owned].size();
        out->chunks.push_back(chunk);
      }
    }
  }

  bool BuildGraph(std::string_view graph, int depth, Rebuilt* out) {
    if (depth > kMaxGraphNesting) return Fail("graphs are nested too deeply");
    Reader reader(graph);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a GraphProto is not well-formed");
      if (field.number == kGraphNode && field.wire_type == kLengthDelimited) {
        if (!BuildNode(field.payload, depth, out)) return false;
      } else {
        Borrow(out, field.raw);
      }
    }
    return true;
  }

  // Appends the node, tagged, to `graph` as a GraphProto.node field.
  bool BuildNode(std::string_view node, int depth, Rebuilt* graph) {
    ++written_;
    // The node's identity first, so its entry is taken before its bodies' nodes take theirs.
    Reader scan(node);
    Field field;
    std::optional<std::string_view> op_type;
    // Views into `node`, in a buffer every node reuses: read only before the
    // node's bodies are built (which reuse it in turn).
    std::vector<std::string_view>& outputs = outputs_;
    outputs.clear();
    bool holds_graphs = false;
    while (!scan.done()) {
      if (!scan.Next(&field)) return Fail("a NodeProto is not well-formed");
      if (field.number == kNodeOpType && field.wire_type == kLengthDelimited) op_type = field.payload;
      if (field.number == kNodeOutput && field.wire_type == kLengthDelimited) outputs.emplace_back(field.payload);
      if (field.number == kNodeAttribute && field.wire_type == kLengthDelimited) {
        holds_graphs = holds_graphs || HoldsGraphs(field.payload);
      }
    }
    if (!op_type) return Fail("a NodeProto has no op_type");
    std::optional<size_t> match = Match(outputs);
    if (!match) {
      return Fail("the model's " + std::string(*op_type) + " node " + DescribeOutputs(outputs) +
                  " has no tag: the graph has no node with those outputs");
    }
    const SerializedNodeTag& expected = nodes_[*match];
    if (*op_type != expected.op_type) {
      return Fail("node " + DescribeOutputs(outputs) + " is '" + std::string(*op_type) + "' in the model but '" +
                  expected.op_type + "' in the graph");
    }
    if (!holds_graphs) {  // the node's bytes as they are, then its entries
      WriteEntries(expected);
      OwnHeader(graph, kGraphNode, node.size() + entries_.size());
      Borrow(graph, node);
      Own(graph, entries_);
      return true;
    }
    Rebuilt out;  // each attribute is read again here: few nodes hold graphs
    Reader reader(node);
    while (!reader.done()) {
      reader.Next(&field);
      if (field.number == kNodeAttribute && field.wire_type == kLengthDelimited && HoldsGraphs(field.payload)) {
        Rebuilt attribute;
        if (!BuildAttribute(field.payload, depth, &attribute)) return false;
        Splice(&out, kNodeAttribute, attribute);
      } else {
        Borrow(&out, field.raw);
      }
    }
    WriteEntries(expected);  // after the bodies, whose nodes use entries_ too
    Own(&out, entries_);
    Splice(graph, kGraphNode, out);
    return true;
  }

  // The node's metadata_props entries, into entries_.
  void WriteEntries(const SerializedNodeTag& expected) {
    entries_.clear();
    AppendStringEntry(&entries_, kNodeMetadataProps, kHierarchyTagKey, expected.tag);
    if (!expected.shared_with.empty()) {
      AppendStringEntry(&entries_, kNodeMetadataProps, kSharedWithKey, WriteStringList(expected.shared_with));
    }
    for (const auto& [key, value] : expected.more) AppendStringEntry(&entries_, kNodeMetadataProps, key, value);
  }

  // Whether an AttributeProto has a graph field (the others are copied as they are).
  static bool HoldsGraphs(std::string_view attribute) {
    Reader reader(attribute);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return true;  // BuildAttribute tells what is wrong
      if ((field.number == kAttributeGraph || field.number == kAttributeGraphs) &&
          field.wire_type == kLengthDelimited) {
        return true;
      }
    }
    return false;
  }

  bool BuildAttribute(std::string_view attribute, int depth, Rebuilt* out) {
    Reader reader(attribute);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("an AttributeProto is not well-formed");
      if ((field.number == kAttributeGraph || field.number == kAttributeGraphs) &&
          field.wire_type == kLengthDelimited) {
        Rebuilt graph;
        if (!BuildGraph(field.payload, depth + 1, &graph)) return false;
        Splice(out, field.number, graph);
      } else {
        Borrow(out, field.raw);
      }
    }
    return true;
  }

  // The outputs joined, each followed by a NUL, appended to `key`.
  template <typename Names>
  static void AppendOutputsKey(const Names& outputs, std::string* key) {
    for (std::string_view output : outputs) key->append(output).push_back('\0');
  }

  template <typename Names>
  static std::string DescribeOutputs(const Names& outputs) {
    if (outputs.empty()) return "without outputs";
    std::string text = "making '" + std::string(outputs.front()) + "'";
    if (outputs.size() > 1) text += " (and " + std::to_string(outputs.size() - 1) + " more)";
    return text;
  }

  // The entry of the node with these outputs, each entry taken once; a node
  // without outputs takes the next entry without outputs.
  std::optional<size_t> Match(const std::vector<std::string_view>& outputs) {
    size_t index = 0;
    if (outputs.empty() || !by_identity_) {
      if (next_without_outputs_ >= without_outputs_.size()) return std::nullopt;
      index = without_outputs_[next_without_outputs_++];
    } else {
      key_.clear();
      AppendOutputsKey(outputs, &key_);
      auto found = by_outputs_.find(key_);
      if (found == by_outputs_.end()) return std::nullopt;
      index = found->second;
    }
    if (used_[index]) return std::nullopt;
    used_[index] = true;
    return index;
  }

  const std::vector<SerializedNodeTag>& nodes_;
  TaggedModelPlan* plan_;
  std::string* error_;
  std::vector<bool> used_;
  bool by_identity_ = false;  // some entry knows its outputs: match every node with outputs by them
  std::string keys_;          // every entry's outputs key, one after another
  std::unordered_map<std::string_view, size_t> by_outputs_;  // a view into keys_ -> the entry
  std::vector<size_t> without_outputs_;                      // entries without outputs, in pre-order
  size_t next_without_outputs_ = 0;
  size_t written_ = 0;
  std::string key_;                        // an outputs key being built, so a lookup allocates nothing
  std::vector<std::string_view> outputs_;  // BuildNode's: the outputs of the node being matched
  std::string entries_;                    // BuildNode's: the metadata entries of the node being written
  std::string header_;                     // OwnHeader's
};

void TaggedModelPlan::ForEachChunk(const std::function<void(std::string_view)>& sink) const {
  for (const Chunk& chunk : chunks_) sink(chunk.borrowed.empty() ? owned_[chunk.owned] : chunk.borrowed);
}

std::string TaggedModelPlan::ToString() const {
  std::string out;
  out.reserve(size_);
  ForEachChunk([&](std::string_view chunk) { out.append(chunk); });
  return out;
}

bool PlanTaggedModel(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                     const std::vector<ModelMetadataEntry>& model_entries, TaggedModelPlan* plan, std::string* error) {
  TaggedModelPlan built;
  if (!PlanBuilder(nodes, &built, error).BuildModel(model, model_entries)) return false;
  *plan = std::move(built);
  return true;
}

bool AddTagsToSerializedModel(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                              const std::vector<ModelMetadataEntry>& model_entries, std::string* tagged_model,
                              std::string* error) {
  TaggedModelPlan plan;
  if (!PlanTaggedModel(model, nodes, model_entries, &plan, error)) return false;
  *tagged_model = plan.ToString();
  return true;
}

}  // namespace hiertag
