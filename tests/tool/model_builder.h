// Shared by the tool tests: ONNX ModelProto bytes written by hand with the wire
// helpers (nodes with tags, nested Loop bodies, initializers, tensor types of
// values, the module table), so each test states exactly what the file holds.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/external_data.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag::tooltest {

using namespace onnx_field;  // NOLINT: the shared onnx.proto field numbers

// The onnx.proto field numbers the builder writes beyond include/hiertag/core/onnx/onnx_fields.h.
inline constexpr uint32_t kTypeTensorType = 1;
inline constexpr uint32_t kTensorTypeElemType = 1;
inline constexpr uint32_t kTensorTypeShape = 2;
inline constexpr uint32_t kShapeDim = 1;
inline constexpr uint32_t kDimValue = 1;
inline constexpr uint32_t kAttributeName = 1;
inline constexpr uint32_t kAttributeTensor = 5;
inline constexpr uint32_t kAttributeType = 20;
inline constexpr uint64_t kAttributeTypeTensor = 4;
inline constexpr uint64_t kAttributeTypeGraph = 5;

// TensorProto.DataType values the tests use.
inline constexpr uint64_t kFloat = 1;     // 4 bytes
inline constexpr uint64_t kInt64 = 7;     // 8 bytes
inline constexpr uint64_t kFloat16 = 10;  // 2 bytes

inline size_t ElementBytes(uint64_t data_type) { return data_type == kInt64 ? 8 : data_type == kFloat16 ? 2 : 4; }

inline void AppendVarintField(std::string* out, uint32_t field, uint64_t value) {
  wire::AppendVarint(out, (static_cast<uint64_t>(field) << 3) | wire::kVarint);
  wire::AppendVarint(out, value);
}

inline std::string Entry(std::string_view key, std::string_view value) {
  std::string entry;
  wire::AppendLengthDelimited(&entry, kEntryKey, key);
  wire::AppendLengthDelimited(&entry, kEntryValue, value);
  return entry;
}

inline std::string ValueInfo(std::string_view name) {
  std::string value;
  wire::AppendLengthDelimited(&value, kValueInfoName, name);
  return value;
}

// A tensor type: element type (TensorProto.DataType) and fixed dims.
struct TensorTypeSpec {
  uint64_t elem_type = kFloat;
  std::vector<int64_t> dims;

  bool operator==(const TensorTypeSpec& other) const { return elem_type == other.elem_type && dims == other.dims; }
};

// A ValueInfoProto naming `name` with a tensor type, as torch records graph inputs and outputs.
inline std::string TypedValueInfo(std::string_view name, const TensorTypeSpec& type) {
  std::string shape;
  for (int64_t dim : type.dims) {
    std::string dimension;
    AppendVarintField(&dimension, kDimValue, static_cast<uint64_t>(dim));
    wire::AppendLengthDelimited(&shape, kShapeDim, dimension);
  }
  std::string tensor;
  AppendVarintField(&tensor, kTensorTypeElemType, type.elem_type);
  wire::AppendLengthDelimited(&tensor, kTensorTypeShape, shape);
  std::string type_proto;
  wire::AppendLengthDelimited(&type_proto, kTypeTensorType, tensor);
  std::string value = ValueInfo(name);
  wire::AppendLengthDelimited(&value, kValueInfoType, type_proto);
  return value;
}

// A JSON array of strings, as hiertag writes hiertag.shared_with.
inline std::string JsonArray(const std::vector<std::string>& items) { return WriteStringList(items); }

// A JSON string.
inline std::string JsonString(const std::string& text) { return WriteJson(Json(text)); }

// A JSON array of numbers, as hiertag writes "calls" and "parent_calls".
inline std::string JsonNumbers(const std::vector<int64_t>& items) {
  std::string text = "[";
  for (size_t i = 0; i < items.size(); ++i) text += (i ? "," : "") + std::to_string(items[i]);
  return text + "]";
}

struct InitializerSpec {
  std::string name;
  std::vector<int64_t> dims;
  uint64_t data_type = kFloat;
  bool packed_dims = false;                             // dims as one packed field, as proto3 writers do
  std::optional<ExternalData> external = std::nullopt;  // data kept in a file beside the model

  std::string Bytes() const {
    std::string tensor;
    int64_t elements = 1;
    std::string packed;
    for (int64_t dim : dims) {
      if (packed_dims) {
        wire::AppendVarint(&packed, static_cast<uint64_t>(dim));
      } else {
        AppendVarintField(&tensor, kTensorDims, static_cast<uint64_t>(dim));
      }
      if (!external) elements *= dim;  // external dims may declare any size
    }
    if (packed_dims) wire::AppendLengthDelimited(&tensor, kTensorDims, packed);
    AppendVarintField(&tensor, kTensorDataType, data_type);
    wire::AppendLengthDelimited(&tensor, kTensorName, name);
    if (external) return TensorWithExternalData(tensor, *external);
    wire::AppendLengthDelimited(&tensor, kTensorRawData,
                                std::string(static_cast<size_t>(elements) * ElementBytes(data_type), '\0'));
    return tensor;
  }
};

struct GraphSpec;

struct NodeSpec {
  std::string name;
  std::string op_type;
  std::string domain;  // NodeProto.domain; "" is the default ONNX domain
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::pair<std::string, std::string>> metadata;     // NodeProto.metadata_props, in order
  std::vector<GraphSpec> bodies;                                 // graph attributes "body", in order
  std::vector<std::pair<std::string, InitializerSpec>> tensors;  // tensor attributes, in order

  NodeSpec& In(std::vector<std::string> names) {
    inputs = std::move(names);
    return *this;
  }
  NodeSpec& Out(std::vector<std::string> names) {
    outputs = std::move(names);
    return *this;
  }
  NodeSpec& Tag(std::string tag) { return Meta(std::string(kHierarchyTagKey), std::move(tag)); }
  NodeSpec& SharedWith(const std::vector<std::string>& tags) {
    return Meta(std::string(kSharedWithKey), JsonArray(tags));
  }
  // hiertag.call: the node belongs to call `ordinal` of its tag.
  NodeSpec& Call(int64_t ordinal) { return Meta(std::string(kCallKey), std::to_string(ordinal)); }
  // hiertag.spans and hiertag.rewrite: `pass` fused the computations of `tags` into this node.
  NodeSpec& Spans(const std::vector<std::string>& tags, std::string pass) {
    return Meta(std::string(kSpansKey), JsonArray(tags)).Meta(std::string(kRewriteKey), std::move(pass));
  }
  NodeSpec& Meta(std::string key, std::string value) {
    metadata.emplace_back(std::move(key), std::move(value));
    return *this;
  }
  NodeSpec& Body(GraphSpec body);
  // A tensor-valued attribute (a Constant's "value").
  NodeSpec& TensorAttribute(std::string attribute_name, InitializerSpec tensor);
  NodeSpec& Domain(std::string node_domain) {
    domain = std::move(node_domain);
    return *this;
  }

  std::string Bytes() const;
};

struct GraphSpec {
  std::string name = "graph";
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<InitializerSpec> initializers;
  std::vector<NodeSpec> nodes;
  // Types of values: an input's or output's makes it typed, any other value's is
  // written as a value_info entry (in this order).
  std::vector<std::pair<std::string, TensorTypeSpec>> types;

  GraphSpec& Add(NodeSpec node) {
    nodes.push_back(std::move(node));
    return *this;
  }
  GraphSpec& Initializer(std::string initializer_name, std::vector<int64_t> dims, uint64_t data_type = kFloat) {
    initializers.push_back({std::move(initializer_name), std::move(dims), data_type, false});
    return *this;
  }
  GraphSpec& Type(std::string value_name, std::vector<int64_t> dims, uint64_t elem_type = kFloat) {
    types.emplace_back(std::move(value_name), TensorTypeSpec{elem_type, std::move(dims)});
    return *this;
  }
  // The recorded type of `value_name`, or nullptr.
  const TensorTypeSpec* FindType(const std::string& value_name) const {
    for (const auto& [typed_name, type] : types) {
      if (typed_name == value_name) return &type;
    }
    return nullptr;
  }
  // The ValueInfoProto this graph writes for `value_name`, typed when it has a type.
  std::string ValueInfoBytes(const std::string& value_name) const {
    const TensorTypeSpec* type = FindType(value_name);
    return type ? TypedValueInfo(value_name, *type) : ValueInfo(value_name);
  }
  // The node named `node_name`, to change one detail of a prepared model.
  NodeSpec& Find(const std::string& node_name) {
    for (NodeSpec& node : nodes) {
      if (node.name == node_name) return node;
    }
    throw std::runtime_error("no node " + node_name);
  }

  std::string Bytes() const {
    std::string graph;
    for (const NodeSpec& node : nodes) wire::AppendLengthDelimited(&graph, kGraphNode, node.Bytes());
    wire::AppendLengthDelimited(&graph, kGraphName, name);
    for (const InitializerSpec& initializer : initializers) {
      wire::AppendLengthDelimited(&graph, kGraphInitializer, initializer.Bytes());
    }
    for (const std::string& input : inputs) wire::AppendLengthDelimited(&graph, kGraphInput, ValueInfoBytes(input));
    for (const std::string& output : outputs) {
      wire::AppendLengthDelimited(&graph, kGraphOutput, ValueInfoBytes(output));
    }
    for (const auto& [value_name, type] : types) {
      bool declared = std::find(inputs.begin(), inputs.end(), value_name) != inputs.end() ||
                      std::find(outputs.begin(), outputs.end(), value_name) != outputs.end();
      if (!declared) wire::AppendLengthDelimited(&graph, kGraphValueInfo, TypedValueInfo(value_name, type));
    }
    return graph;
  }
};

inline NodeSpec& NodeSpec::Body(GraphSpec body) {
  bodies.push_back(std::move(body));
  return *this;
}

inline NodeSpec& NodeSpec::TensorAttribute(std::string attribute_name, InitializerSpec tensor) {
  tensors.emplace_back(std::move(attribute_name), std::move(tensor));
  return *this;
}

inline std::string NodeSpec::Bytes() const {
  std::string node;
  for (const std::string& input : inputs) wire::AppendLengthDelimited(&node, kNodeInput, input);
  for (const std::string& output : outputs) wire::AppendLengthDelimited(&node, kNodeOutput, output);
  wire::AppendLengthDelimited(&node, kNodeName, name);
  wire::AppendLengthDelimited(&node, kNodeOpType, op_type);
  if (!domain.empty()) wire::AppendLengthDelimited(&node, kNodeDomain, domain);
  for (const auto& [attribute_name, tensor] : tensors) {
    std::string attribute;
    wire::AppendLengthDelimited(&attribute, kAttributeName, attribute_name);
    wire::AppendLengthDelimited(&attribute, kAttributeTensor, tensor.Bytes());
    AppendVarintField(&attribute, kAttributeType, kAttributeTypeTensor);
    wire::AppendLengthDelimited(&node, kNodeAttribute, attribute);
  }
  for (const GraphSpec& body : bodies) {
    std::string attribute;
    wire::AppendLengthDelimited(&attribute, kAttributeName, "body");
    wire::AppendLengthDelimited(&attribute, kAttributeGraph, body.Bytes());
    AppendVarintField(&attribute, kAttributeType, kAttributeTypeGraph);
    wire::AppendLengthDelimited(&node, kNodeAttribute, attribute);
  }
  for (const auto& [key, value] : metadata) {
    wire::AppendLengthDelimited(&node, kNodeMetadataProps, Entry(key, value));
  }
  return node;
}

// A node with no inputs, outputs or metadata yet.
inline NodeSpec Node(std::string name, std::string op_type) {
  NodeSpec node;
  node.name = std::move(name);
  node.op_type = std::move(op_type);
  return node;
}

struct ModuleSpec {
  std::string tag;
  std::string path;
  std::string class_name;
  // Members written after "path" and "class": key and JSON text, in order.
  std::vector<std::pair<std::string, std::string>> fields;

  ModuleSpec& Field(std::string key, std::string json) {
    fields.emplace_back(std::move(key), std::move(json));
    return *this;
  }
  ModuleSpec& Calls(const std::vector<int64_t>& ordinals) { return Field("calls", JsonNumbers(ordinals)); }
  ModuleSpec& ParentCalls(const std::vector<int64_t>& ordinals) { return Field("parent_calls", JsonNumbers(ordinals)); }
  ModuleSpec& FoldedInto(const std::vector<std::string>& initializers) {
    return Field("folded_into", JsonArray(initializers));
  }
};

// One record of hiertag.rewrites.
struct RewriteSpec {
  std::string pass;
  std::string kind;
  std::vector<std::string> modules;
  std::string node;
  std::string reason = "";  // written only when set

  std::string Text() const {
    return "{\"pass\":" + JsonString(pass) + ",\"kind\":" + JsonString(kind) + ",\"modules\":" + JsonArray(modules) +
           ",\"node\":" + JsonString(node) + (reason.empty() ? "" : ",\"reason\":" + JsonString(reason)) + "}";
  }
};

struct OpsetSpec {
  std::string domain;  // "" is the default ONNX domain
  int64_t version = 0;
};

struct ModelSpec {
  int64_t ir_version = 8;
  std::vector<OpsetSpec> opsets = {{"", 17}};
  GraphSpec graph;
  std::vector<ModuleSpec> modules;
  // When set, written as hiertag.modules instead of the JSON of `modules`.
  std::optional<std::string> module_table_text;
  // Written as hiertag.rewrites when any.
  std::vector<RewriteSpec> rewrites;
  // When set, written as hiertag.rewrites instead of the JSON of `rewrites`.
  std::optional<std::string> rewrites_text;
  std::string format_version = std::string(kFormatVersion);
  // False: no hiertag.modules / hiertag.format_version at all (an untagged export).
  bool tagged = true;

  ModelSpec& Module(std::string tag, std::string path, std::string class_name) {
    modules.push_back({std::move(tag), std::move(path), std::move(class_name), {}});
    return *this;
  }
  ModelSpec& Rewrite(std::string pass, std::string kind, std::vector<std::string> tags, std::string node = "") {
    rewrites.push_back({std::move(pass), std::move(kind), std::move(tags), std::move(node)});
    return *this;
  }
  ModelSpec& RemoveModule(const std::string& tag) {
    for (auto it = modules.begin(); it != modules.end(); ++it) {
      if (it->tag == tag) {
        modules.erase(it);
        return *this;
      }
    }
    throw std::runtime_error("no module " + tag);
  }
  ModuleSpec& FindModule(const std::string& tag) {
    for (ModuleSpec& module : modules) {
      if (module.tag == tag) return module;
    }
    throw std::runtime_error("no module " + tag);
  }

  // {tag: {"path": ..., "class": ..., fields...}} in the order of `modules`.
  std::string ModuleTableJson() const {
    std::string json = "{";
    for (size_t i = 0; i < modules.size(); ++i) {
      const ModuleSpec& module = modules[i];
      json += (i ? "," : "") + JsonString(module.tag) + ":{\"path\":" + JsonString(module.path) +
              ",\"class\":" + JsonString(module.class_name);
      for (const auto& [key, value] : module.fields) json += "," + JsonString(key) + ":" + value;
      json += "}";
    }
    return json + "}";
  }

  std::string RewritesJson() const {
    std::string json = "[";
    for (size_t i = 0; i < rewrites.size(); ++i) json += (i ? "," : "") + rewrites[i].Text();
    return json + "]";
  }

  std::string Bytes() const {
    std::string model;
    AppendVarintField(&model, kModelIrVersion, static_cast<uint64_t>(ir_version));
    for (const OpsetSpec& opset_spec : opsets) {
      std::string opset;
      if (!opset_spec.domain.empty()) wire::AppendLengthDelimited(&opset, kOpsetDomain, opset_spec.domain);
      AppendVarintField(&opset, kOpsetVersion, static_cast<uint64_t>(opset_spec.version));
      wire::AppendLengthDelimited(&model, kModelOpsetImport, opset);
    }
    wire::AppendLengthDelimited(&model, kModelGraph, graph.Bytes());
    if (tagged) {
      wire::AppendLengthDelimited(&model, kModelMetadataProps,
                                  Entry(kModuleTableKey, module_table_text.value_or(ModuleTableJson())));
      if (rewrites_text || !rewrites.empty()) {
        wire::AppendLengthDelimited(&model, kModelMetadataProps,
                                    Entry(kRewritesKey, rewrites_text.value_or(RewritesJson())));
      }
      wire::AppendLengthDelimited(&model, kModelMetadataProps, Entry(kFormatVersionKey, format_version));
    }
    return model;
  }
};

}  // namespace hiertag::tooltest
