// Proto tagging: wire-level insertion of node and model metadata_props.
//
// Only ModelProto.graph, GraphProto.node, the NodeProto.attribute entries that
// hold a graph and AttributeProto.g/graphs are descended into; every other
// field is copied as raw bytes (as the input encoded it). Field numbers are
// those of onnx.proto (ONNX >= 1.16).
#include "hiertag/core/export/proto_tagging.h"

#include <algorithm>
#include <cstdint>
#include <memory_resource>
#include <optional>
#include <unordered_map>

#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using wire::AppendLengthDelimited;
using wire::AppendLengthDelimitedHeader;
using wire::Field;
using wire::kLengthDelimited;
using wire::Reader;
using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

constexpr int kMaxGraphNesting = 64;

// Bytes in a plan's arena: a vector, as libstdc++ has no std::pmr::string under
// the old string ABI that torch 2.4-2.8's wheels are built with.
using ArenaBytes = std::pmr::vector<char>;
std::string_view View(const ArenaBytes& bytes) { return {bytes.data(), bytes.size()}; }

// Bytes of the tagged model: a view into the source model, or a range of the
// plan's owned bytes.
struct Chunk {
  const char* borrowed;  // the view's first byte; null for owned bytes
  size_t begin;          // owned bytes: where they begin in the plan's owned bytes
  size_t size;
};

}  // namespace

struct TaggedModelPlan::State {
  // The arena's first block: a guess at the plan's size from the node count,
  // so that few blocks are mapped.
  explicit State(size_t nodes) : arena(std::max<size_t>(64 << 10, nodes * 256), MappedMemory()) {}

  std::string_view Bytes(const Chunk& chunk) const {
    return chunk.borrowed != nullptr ? std::string_view(chunk.borrowed, chunk.size)
                                     : std::string_view(owned.data() + chunk.begin, chunk.size);
  }

  std::pmr::monotonic_buffer_resource arena;  // first: destroyed last
  std::pmr::vector<Chunk> chunks{&arena};
  ArenaBytes owned{&arena};  // every written piece, one after another
  size_t size = 0;
};

class PlanBuilder {
 public:
  // One length-delimited message being rebuilt: its chunks, its payload size.
  struct Rebuilt {
    explicit Rebuilt(std::pmr::memory_resource* memory) : chunks(memory) {}
    std::pmr::vector<Chunk> chunks;
    size_t size = 0;
  };

  // Not copied or moved: by_outputs_ views keys_, whose characters a short key keeps inside the string.
  PlanBuilder(const PlanBuilder&) = delete;
  PlanBuilder& operator=(const PlanBuilder&) = delete;

  // Plans into `plan`'s state, whose arena holds the builder's memory too.
  PlanBuilder(const std::vector<SerializedNodeTag>& nodes, TaggedModelPlan::State* plan, std::string* error)
      : nodes_(nodes),
        plan_(plan),
        memory_(&plan->arena),
        error_(error),
        used_(nodes.size(), false, memory_),
        keys_(memory_),
        by_outputs_(memory_),
        without_outputs_(memory_),
        key_(memory_),
        outputs_(memory_),
        entries_(memory_),
        header_(memory_) {
    // Every key in one buffer, sized first so the views into it stay valid.
    size_t keys_size = 0;
    for (const SerializedNodeTag& entry : nodes) {
      by_identity_ |= !entry.outputs.empty();
      for (std::string_view output : entry.outputs) keys_size += output.size() + 1;
    }
    keys_.reserve(keys_size);
    by_outputs_.reserve(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (nodes[i].outputs.empty()) {
        without_outputs_.push_back(i);
      } else {
        size_t begin = keys_.size();
        AppendOutputsKey(nodes[i].outputs, &keys_);
        by_outputs_.emplace(View(keys_).substr(begin), i);
      }
    }
  }

  // PlanTaggedModel. The builder lives in the plan's arena's scope: its
  // memory is unmapped with the plan's, never freed to the heap.
  static bool Plan(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                   const std::vector<ModelMetadataEntry>& model_entries, TaggedModelPlan* plan, std::string* error) {
    TaggedModelPlan built;
    built.state_ = std::make_unique<TaggedModelPlan::State>(nodes.size());
    built.state_->owned.reserve(OwnedBytesEstimate(nodes, model_entries));
    if (!PlanBuilder(nodes, built.state_.get(), error).BuildModel(model, model_entries)) return false;
    *plan = std::move(built);
    return true;
  }

  bool BuildModel(std::string_view model, const std::vector<ModelMetadataEntry>& entries) {
    Reader reader(model);
    Field field;
    bool saw_graph = false;
    bool entries_written = false;
    Rebuilt out(memory_);
    auto write_entries = [&] {
      ArenaBytes bytes(memory_);
      for (const ModelMetadataEntry& entry : entries) {
        AppendStringEntry(&bytes, kModelMetadataProps, entry.key, entry.value);
      }
      Own(&out, View(bytes));
      entries_written = true;
    };
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("the model is not a well-formed ModelProto");
      // Keep the canonical field order: our entries go before the first higher field.
      if (!entries_written && field.number > kModelMetadataProps) write_entries();
      if (field.number == kModelGraph && field.wire_type == kLengthDelimited) {
        Rebuilt graph(memory_);
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
        return Fail("the graph's " + std::string(nodes_[i].op_type) + " node " + DescribeOutputs(nodes_[i].outputs) +
                    " is not in the model (" + std::to_string(written_) + " nodes written, " +
                    std::to_string(nodes_.size()) + " tagged)");
      }
    }
    plan_->chunks = std::move(out.chunks);
    plan_->size = out.size;
    return true;
  }

 private:
  bool Fail(std::string message) {
    *error_ = std::move(message);
    return false;
  }

  // About the bytes the plan writes (entries and length prefixes), so that
  // the owned bytes are one allocation: more than enough unless shared_with
  // lists need much escaping.
  static size_t OwnedBytesEstimate(const std::vector<SerializedNodeTag>& nodes,
                                   const std::vector<ModelMetadataEntry>& model_entries) {
    constexpr size_t kEntry = 16;  // an entry's field tags and length prefixes, at most
    size_t bytes = 0;
    for (const ModelMetadataEntry& entry : model_entries) bytes += kEntry + entry.key.size() + entry.value.size();
    for (const SerializedNodeTag& node : nodes) {
      bytes += 2 * kEntry + kHierarchyTagKey.size() + node.tag.size();  // the node's own prefix too
      if (!node.shared_with.empty()) bytes += kEntry + kSharedWithKey.size() + 2;
      for (const std::string& tag : node.shared_with) bytes += tag.size() + 3;
      for (const auto& [key, value] : node.more) bytes += kEntry + key.size() + value.size();
    }
    return bytes;
  }

  // Appends `chunk` to `out`, joined to its last chunk where they are adjacent.
  static void Append(Rebuilt* out, const Chunk& chunk) {
    out->size += chunk.size;
    if (!out->chunks.empty()) {
      Chunk& last = out->chunks.back();
      bool adjacent = last.borrowed != nullptr ? chunk.borrowed == last.borrowed + last.size
                                               : chunk.borrowed == nullptr && chunk.begin == last.begin + last.size;
      if (adjacent) {
        last.size += chunk.size;
        return;
      }
    }
    out->chunks.push_back(chunk);
  }

  void Borrow(Rebuilt* out, std::string_view bytes) {
    if (!bytes.empty()) Append(out, {bytes.data(), 0, bytes.size()});
  }

  // Appends a copy of `bytes` to `out`.
  void Own(Rebuilt* out, std::string_view bytes) {
    if (bytes.empty()) return;
    Append(out, {nullptr, plan_->owned.size(), bytes.size()});
    plan_->owned.insert(plan_->owned.end(), bytes.begin(), bytes.end());
  }

  // Appends the header of length-delimited field `field` of `size` bytes.
  void OwnHeader(Rebuilt* out, uint32_t field, size_t size) {
    header_.clear();
    AppendLengthDelimitedHeader(&header_, field, size);
    Own(out, View(header_));
  }

  // Appends `inner` as length-delimited field `field` of `out`: its chunks are
  // taken over as they are.
  void Splice(Rebuilt* out, uint32_t field, const Rebuilt& inner) {
    OwnHeader(out, field, inner.size);
    for (const Chunk& chunk : inner.chunks) Append(out, chunk);
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
    std::pmr::vector<std::string_view>& outputs = outputs_;
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
                  std::string(expected.op_type) + "' in the graph");
    }
    if (!holds_graphs) {  // the node's bytes as they are, then its entries
      WriteEntries(expected);
      OwnHeader(graph, kGraphNode, node.size() + entries_.size());
      Borrow(graph, node);
      Own(graph, View(entries_));
      return true;
    }
    Rebuilt out(memory_);  // each attribute is read again here: few nodes hold graphs
    Reader reader(node);
    while (!reader.done()) {
      reader.Next(&field);
      if (field.number == kNodeAttribute && field.wire_type == kLengthDelimited && HoldsGraphs(field.payload)) {
        Rebuilt attribute(memory_);
        if (!BuildAttribute(field.payload, depth, &attribute)) return false;
        Splice(&out, kNodeAttribute, attribute);
      } else {
        Borrow(&out, field.raw);
      }
    }
    WriteEntries(expected);  // after the bodies, whose nodes use entries_ too
    Own(&out, View(entries_));
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
        Rebuilt graph(memory_);
        if (!BuildGraph(field.payload, depth + 1, &graph)) return false;
        Splice(out, field.number, graph);
      } else {
        Borrow(out, field.raw);
      }
    }
    return true;
  }

  // The outputs joined, each followed by a NUL, appended to `key`.
  template <typename Names, typename String>
  static void AppendOutputsKey(const Names& outputs, String* key) {
    for (std::string_view output : outputs) {
      key->insert(key->end(), output.begin(), output.end());
      key->push_back('\0');
    }
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
  std::optional<size_t> Match(const std::pmr::vector<std::string_view>& outputs) {
    size_t index = 0;
    if (outputs.empty() || !by_identity_) {
      if (next_without_outputs_ >= without_outputs_.size()) return std::nullopt;
      index = without_outputs_[next_without_outputs_++];
    } else {
      key_.clear();
      AppendOutputsKey(outputs, &key_);
      auto found = by_outputs_.find(View(key_));
      if (found == by_outputs_.end()) return std::nullopt;
      index = found->second;
    }
    if (used_[index]) return std::nullopt;
    used_[index] = true;
    return index;
  }

  const std::vector<SerializedNodeTag>& nodes_;
  TaggedModelPlan::State* plan_;
  std::pmr::memory_resource* memory_;  // the plan's arena: every member below allocates there
  std::string* error_;
  std::pmr::vector<bool> used_;
  bool by_identity_ = false;  // some entry knows its outputs: match every node with outputs by them
  ArenaBytes keys_;           // every entry's outputs key, one after another
  std::pmr::unordered_map<std::string_view, size_t> by_outputs_;  // a view into keys_ -> the entry
  std::pmr::vector<size_t> without_outputs_;                      // entries without outputs, in pre-order
  size_t next_without_outputs_ = 0;
  size_t written_ = 0;
  ArenaBytes key_;                              // an outputs key being built, so a lookup allocates nothing
  std::pmr::vector<std::string_view> outputs_;  // BuildNode's: the outputs of the node being matched
  ArenaBytes entries_;                          // BuildNode's: the metadata entries of the node being written
  ArenaBytes header_;                           // OwnHeader's
};

TaggedModelPlan::TaggedModelPlan() = default;
TaggedModelPlan::TaggedModelPlan(TaggedModelPlan&&) noexcept = default;
TaggedModelPlan& TaggedModelPlan::operator=(TaggedModelPlan&&) noexcept = default;
TaggedModelPlan::~TaggedModelPlan() = default;

size_t TaggedModelPlan::size() const { return state_ ? state_->size : 0; }

void TaggedModelPlan::ForEachChunk(const std::function<void(std::string_view)>& sink) const {
  if (!state_) return;
  for (const Chunk& chunk : state_->chunks) sink(state_->Bytes(chunk));
}

std::string TaggedModelPlan::ToString() const {
  std::string out;
  out.reserve(size());
  ForEachChunk([&](std::string_view chunk) { out.append(chunk); });
  return out;
}

bool PlanTaggedModel(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                     const std::vector<ModelMetadataEntry>& model_entries, TaggedModelPlan* plan, std::string* error) {
  return PlanBuilder::Plan(model, nodes, model_entries, plan, error);
}

}  // namespace hiertag
