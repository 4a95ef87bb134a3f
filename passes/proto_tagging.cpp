// Proto tagging: wire-level insertion of node and model metadata_props.
//
// Only ModelProto.graph, GraphProto.node, NodeProto.attribute and
// AttributeProto.g/graphs are descended into; every other field is copied as
// raw bytes. Field numbers are those of onnx.proto (ONNX >= 1.16).
#include "hiertag/proto_tagging.h"

#include <cstdint>

#include "hiertag/tag_format.h"

namespace hiertag {
namespace {

constexpr uint32_t kModelGraph = 7;
constexpr uint32_t kModelMetadataProps = 14;
constexpr uint32_t kGraphNode = 1;
constexpr uint32_t kNodeOpType = 4;
constexpr uint32_t kNodeAttribute = 5;
constexpr uint32_t kNodeMetadataProps = 9;
constexpr uint32_t kAttributeGraph = 6;
constexpr uint32_t kAttributeGraphs = 11;
constexpr uint32_t kEntryKey = 1;
constexpr uint32_t kEntryValue = 2;

constexpr uint32_t kVarint = 0;
constexpr uint32_t kFixed64 = 1;
constexpr uint32_t kLengthDelimited = 2;
constexpr uint32_t kFixed32 = 5;

constexpr int kMaxGraphNesting = 64;

void AppendVarint(std::string* out, uint64_t value) {
  while (value >= 0x80) {
    out->push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out->push_back(static_cast<char>(value));
}

void AppendLengthDelimited(std::string* out, uint32_t field, std::string_view payload) {
  AppendVarint(out, (static_cast<uint64_t>(field) << 3) | kLengthDelimited);
  AppendVarint(out, payload.size());
  out->append(payload);
}

std::string StringEntry(std::string_view key, std::string_view value) {
  std::string entry;
  AppendLengthDelimited(&entry, kEntryKey, key);
  AppendLengthDelimited(&entry, kEntryValue, value);
  return entry;
}

// One field of a message: its number, wire type, whole byte span and, for
// length-delimited fields, the payload.
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  std::string_view raw;
  std::string_view payload;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return position_ >= bytes_.size(); }

  bool Next(Field* field) {
    size_t start = position_;
    uint64_t key = 0;
    if (!ReadVarint(&key)) return false;
    field->number = static_cast<uint32_t>(key >> 3);
    field->wire_type = static_cast<uint32_t>(key & 7);
    if (field->number == 0) return false;
    switch (field->wire_type) {
      case kVarint: {
        uint64_t ignored = 0;
        if (!ReadVarint(&ignored)) return false;
        break;
      }
      case kFixed64:
        if (bytes_.size() - position_ < 8) return false;
        position_ += 8;
        break;
      case kFixed32:
        if (bytes_.size() - position_ < 4) return false;
        position_ += 4;
        break;
      case kLengthDelimited: {
        uint64_t length = 0;
        if (!ReadVarint(&length) || length > bytes_.size() - position_) return false;
        field->payload = bytes_.substr(position_, length);
        position_ += length;
        break;
      }
      default:
        return false;
    }
    field->raw = bytes_.substr(start, position_ - start);
    return true;
  }

 private:
  bool ReadVarint(uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (position_ >= bytes_.size()) return false;
      uint8_t byte = static_cast<uint8_t>(bytes_[position_++]);
      *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return false;
  }

  std::string_view bytes_;
  size_t position_ = 0;
};

class Tagger {
 public:
  Tagger(const std::vector<SerializedNodeTag>& nodes, std::string* error)
      : nodes_(nodes), error_(error) {}

  bool RewriteModel(std::string_view model, const std::vector<ModelMetadataEntry>& entries,
                    std::string* out) {
    Reader reader(model);
    Field field;
    bool saw_graph = false;
    bool entries_written = false;
    auto write_entries = [&] {
      for (const ModelMetadataEntry& entry : entries) {
        AppendLengthDelimited(out, kModelMetadataProps, StringEntry(entry.key, entry.value));
      }
      entries_written = true;
    };
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("the model is not a well-formed ModelProto");
      // Keep the canonical field order: our entries go before the first higher field.
      if (!entries_written && field.number > kModelMetadataProps) write_entries();
      if (field.number == kModelGraph && field.wire_type == kLengthDelimited) {
        std::string graph;
        if (!RewriteGraph(field.payload, 0, &graph)) return false;
        AppendLengthDelimited(out, kModelGraph, graph);
        saw_graph = true;
      } else {
        out->append(field.raw);
      }
    }
    if (!entries_written) write_entries();
    if (!saw_graph) return Fail("the model has no graph");
    if (next_node_ != nodes_.size()) {
      return Fail("the model has " + std::to_string(next_node_) + " nodes, the graph had " +
                  std::to_string(nodes_.size()));
    }
    return true;
  }

 private:
  bool Fail(std::string message) {
    *error_ = std::move(message);
    return false;
  }

  bool RewriteGraph(std::string_view graph, int depth, std::string* out) {
    if (depth > kMaxGraphNesting) return Fail("graphs are nested too deeply");
    Reader reader(graph);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a GraphProto is not well-formed");
      if (field.number == kGraphNode && field.wire_type == kLengthDelimited) {
        std::string node;
        if (!RewriteNode(field.payload, depth, &node)) return false;
        AppendLengthDelimited(out, kGraphNode, node);
      } else {
        out->append(field.raw);
      }
    }
    return true;
  }

  bool RewriteNode(std::string_view node, int depth, std::string* out) {
    if (next_node_ >= nodes_.size()) {
      return Fail("the model has more nodes than the graph (" + std::to_string(nodes_.size()) +
                  ")");
    }
    const SerializedNodeTag& expected = nodes_[next_node_++];
    Reader reader(node);
    Field field;
    bool op_type_seen = false;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a NodeProto is not well-formed");
      if (field.number == kNodeOpType && field.wire_type == kLengthDelimited) {
        op_type_seen = true;
        if (field.payload != expected.op_type) {
          return Fail("node " + std::to_string(next_node_ - 1) + " is '" +
                      std::string(field.payload) + "' in the model but '" + expected.op_type +
                      "' in the graph");
        }
        out->append(field.raw);
      } else if (field.number == kNodeAttribute && field.wire_type == kLengthDelimited) {
        std::string attribute;
        if (!RewriteAttribute(field.payload, depth, &attribute)) return false;
        AppendLengthDelimited(out, kNodeAttribute, attribute);
      } else {
        out->append(field.raw);
      }
    }
    if (!op_type_seen) return Fail("a NodeProto has no op_type");
    AppendLengthDelimited(out, kNodeMetadataProps, StringEntry(kHierarchyTagKey, expected.tag));
    if (!expected.shared_with.empty()) {
      std::string list = "[";
      for (size_t i = 0; i < expected.shared_with.size(); ++i) {
        if (i) list += ",";
        list += JsonQuote(expected.shared_with[i]);
      }
      list += "]";
      AppendLengthDelimited(out, kNodeMetadataProps, StringEntry(kSharedWithKey, list));
    }
    return true;
  }

  bool RewriteAttribute(std::string_view attribute, int depth, std::string* out) {
    Reader reader(attribute);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("an AttributeProto is not well-formed");
      if ((field.number == kAttributeGraph || field.number == kAttributeGraphs) &&
          field.wire_type == kLengthDelimited) {
        std::string graph;
        if (!RewriteGraph(field.payload, depth + 1, &graph)) return false;
        AppendLengthDelimited(out, field.number, graph);
      } else {
        out->append(field.raw);
      }
    }
    return true;
  }

  const std::vector<SerializedNodeTag>& nodes_;
  std::string* error_;
  size_t next_node_ = 0;
};

}  // namespace

bool AddTagsToSerializedModel(std::string_view model,
                              const std::vector<SerializedNodeTag>& nodes,
                              const std::vector<ModelMetadataEntry>& model_entries,
                              std::string* tagged_model, std::string* error) {
  std::string out;
  out.reserve(model.size() + nodes.size() * 64 + 4096);
  Tagger tagger(nodes, error);
  if (!tagger.RewriteModel(model, model_entries, &out)) return false;
  *tagged_model = std::move(out);
  return true;
}

}  // namespace hiertag
