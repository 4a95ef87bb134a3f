// OnnxModel: a read-only view of a serialized ONNX model, for the tool.
//
// Decodes only what hiertag's commands need (nodes with their inputs, outputs
// and metadata_props, nested graphs, graph inputs / outputs / value_info /
// initializers by name, opsets, model metadata_props) straight from the wire
// format (proto_wire.h): no protobuf library, no torch, no Python. Every
// element keeps its raw bytes, so a command can copy them into a new model.
//
// Nodes are numbered in pre-order (a node, then the nodes of its graph-valued
// attributes, then the next node), the order hiertag writes tags in. Graph 0
// is the main graph.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hiertag {

// A node's strings are views of the model's bytes (OnnxModel::bytes), valid as
// long as a copy of the model is: a deep graph's nodes are most of the model,
// and strings of their own held 1.7 times its bytes again.
struct OnnxNode {
  std::string_view name;
  std::string_view op_type;
  std::string_view domain;
  std::vector<std::string_view> inputs;  // "" for an omitted optional input
  std::vector<std::string_view> outputs;
  std::map<std::string_view, std::string_view, std::less<>> metadata;  // NodeProto.metadata_props
  int graph = 0;                                                       // the graph holding the node
  std::vector<int> subgraphs;                                          // graphs of its graph-valued attributes
  std::string_view raw;                                                // the NodeProto bytes
};

struct OnnxValue {
  std::string name;
  std::string_view raw;  // ValueInfoProto or TensorProto bytes
};

// Where a tensor stored outside the model keeps its data (TensorProto.external_data).
struct ExternalData {
  std::string location;  // relative to the model's folder, as written
  uint64_t offset = 0;
  std::optional<uint64_t> length;  // absent: to the end of the file
};

struct OnnxInitializer {
  std::string name;
  uint64_t data_type = 0;                // TensorProto.DataType
  std::vector<int64_t> dims;             // as the file gives them
  int64_t elements = 0;                  // product of dims (saturating at INT64_MAX)
  int64_t bytes = 0;                     // elements times the element size of its data type
  std::optional<ExternalData> external;  // data_location EXTERNAL
  std::string_view raw;
};

struct OnnxGraph {
  int holder = -1;         // the node whose attribute this graph is; -1 for the main graph
  std::vector<int> nodes;  // in graph order
  std::vector<OnnxValue> inputs;
  std::vector<OnnxValue> outputs;
  std::vector<OnnxValue> value_info;
  std::vector<OnnxInitializer> initializers;
};

struct OnnxOpset {
  std::string domain;
  int64_t version = 0;
};

class OnnxModel {
 public:
  // Parses a serialized ModelProto. std::nullopt with a one-line reason when
  // the bytes are not one (truncated, another format, no graph).
  static std::optional<OnnxModel> Parse(std::string bytes, std::string* error);
  // The same over bytes `owner` keeps alive (a caller's buffer, read in place
  // rather than copied): the model and every copy of it hold `owner`.
  static std::optional<OnnxModel> Parse(std::shared_ptr<const void> owner, std::string_view bytes, std::string* error);
  // Reads and parses a file; the reason names what failed (missing, unreadable...).
  static std::optional<OnnxModel> Load(const std::string& path, std::string* error);

  std::string directory;  // the folder Load read it from (external data lives there); "" after Parse

  int64_t ir_version = 0;
  std::vector<OnnxOpset> opsets;
  std::map<std::string, std::string> metadata;  // ModelProto.metadata_props
  std::vector<OnnxGraph> graphs;                // graphs[0]: the main graph
  std::vector<OnnxNode> nodes;                  // every node, pre-order
  std::string_view bytes() const { return bytes_; }

 private:
  std::shared_ptr<const void> owner_;  // keeps bytes_ alive
  std::string_view bytes_;
};

// The main graph's inputs, outputs and value_info of a serialized ModelProto
// (the values' types: what shape inference adds to a model) as a serialized
// GraphProto holding those fields alone, in their order, read without decoding
// a node: a caller gets an inferred model's types without a copy of its graph.
// std::nullopt with a one-line reason, worded as OnnxModel::Parse words it, when
// the bytes are not a model with one graph.
std::optional<std::string> MainGraphValueInfos(std::string_view model, std::string* error);

}  // namespace hiertag
