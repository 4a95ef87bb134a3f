// OnnxModel: wire-level decoding of the ONNX messages the tool reads.
#include "hiertag/core/onnx/onnx_model.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using wire::Field;
using wire::kLengthDelimited;
using wire::kVarint;
using wire::Reader;

using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

constexpr int kMaxGraphNesting = 64;

// Bytes per element of TensorProto.DataType (0 for strings and unknown types).
int64_t ElementSize(uint64_t data_type) {
  switch (data_type) {
    case 1:
    case 6:
    case 12:
      return 4;  // FLOAT, INT32, UINT32
    case 2:
    case 3:
    case 9:
      return 1;  // UINT8, INT8, BOOL
    case 4:
    case 5:
    case 10:
    case 16:
      return 2;  // UINT16, INT16, FLOAT16, BFLOAT16
    case 7:
    case 11:
    case 13:
    case 14:
      return 8;  // INT64, DOUBLE, UINT64, COMPLEX64
    case 15:
      return 16;  // COMPLEX128
    case 17:
    case 18:
    case 19:
    case 20:
      return 1;  // FLOAT8 variants
    default:
      return 0;
  }
}

class Decoder {
 public:
  Decoder(OnnxModel* model, std::string* error) : model_(model), error_(error) {}

  bool DecodeModel(std::string_view bytes) {
    Reader reader(bytes);
    Field field;
    bool saw_graph = false;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("not a well-formed ONNX model (truncated or another format)");
      if (field.number == kModelIrVersion && field.wire_type == kVarint) {
        model_->ir_version = static_cast<int64_t>(field.varint);
      } else if (field.number == kModelOpsetImport && field.wire_type == kLengthDelimited) {
        if (!DecodeOpset(field.payload)) return false;
      } else if (field.number == kModelMetadataProps && field.wire_type == kLengthDelimited) {
        if (!DecodeEntry(field.payload, &model_->metadata)) return false;
      } else if (field.number == kModelGraph && field.wire_type == kLengthDelimited) {
        if (saw_graph) return Fail("the model has two graphs");
        saw_graph = true;
        if (!DecodeGraph(field.payload, -1, 0)) return false;
      }
    }
    if (!saw_graph) return Fail("not an ONNX model (no graph)");
    return true;
  }

 private:
  bool Fail(std::string message) {
    *error_ = std::move(message);
    return false;
  }

  bool DecodeOpset(std::string_view bytes) {
    OnnxOpset opset;
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("an opset_import is not well-formed");
      if (field.number == kOpsetDomain && field.wire_type == kLengthDelimited) opset.domain = field.payload;
      if (field.number == kOpsetVersion && field.wire_type == kVarint) {
        opset.version = static_cast<int64_t>(field.varint);
      }
    }
    model_->opsets.push_back(std::move(opset));
    return true;
  }

  // A metadata_props entry into `entries`: a map of strings (the model's own
  // entries) or of views of the model's bytes (a node's).
  template <typename Map>
  bool DecodeEntry(std::string_view bytes, Map* entries) {
    std::string_view key;
    std::string_view value;
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a metadata_props entry is not well-formed");
      if (field.number == kEntryKey && field.wire_type == kLengthDelimited) key = field.payload;
      if (field.number == kEntryValue && field.wire_type == kLengthDelimited) value = field.payload;
    }
    (*entries)[typename Map::key_type(key)] = typename Map::mapped_type(value);
    return true;
  }

  bool DecodeNamed(std::string_view bytes, uint32_t name_field, std::string* name) {
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a value or tensor is not well-formed");
      if (field.number == name_field && field.wire_type == kLengthDelimited) *name = field.payload;
    }
    return true;
  }

  bool DecodeInitializer(std::string_view bytes, OnnxInitializer* out) {
    out->raw = bytes;
    out->elements = 1;
    bool external = false;
    ExternalData where;
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("an initializer is not well-formed");
      if (field.number == kTensorName && field.wire_type == kLengthDelimited) out->name = field.payload;
      if (field.number == kTensorDataType && field.wire_type == kVarint) out->data_type = field.varint;
      if (field.number == kTensorDims && field.wire_type == kVarint) AddDim(field.varint, out);
      if (field.number == kTensorDims && field.wire_type == kLengthDelimited) {  // packed dims
        Reader packed(field.payload);
        uint64_t dim = 0;
        while (!packed.done()) {
          if (!packed.NextVarint(&dim)) return Fail("an initializer's dims are not well-formed");
          AddDim(dim, out);
        }
      }
      if (field.number == kTensorDataLocation && field.wire_type == kVarint) {
        external = field.varint == kDataLocationExternal;
      }
      if (field.number == kTensorExternalData && field.wire_type == kLengthDelimited) {
        std::map<std::string, std::string> entry;
        if (!DecodeEntry(field.payload, &entry)) return false;
        for (const auto& [key, value] : entry) {
          if (key == "location") {
            where.location = value;
          } else if (key == "offset" || key == "length") {
            std::optional<uint64_t> number = ParseDecimal(value);
            if (!number)
              return Fail("initializer '" + out->name + "': external data " + key + " '" + value + "' is no number");
            (key == "offset" ? where.offset : where.length.emplace()) = *number;
          }
        }
      }
    }
    out->bytes =
        static_cast<int64_t>(SaturatingProduct(out->elements, static_cast<uint64_t>(ElementSize(out->data_type))));
    if (external) out->external = std::move(where);
    return true;
  }

  static int64_t SaturatingProduct(int64_t product, uint64_t factor) {
    constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
    if (product < 0 || factor > kMax) return std::numeric_limits<int64_t>::max();
    if (factor != 0 && static_cast<uint64_t>(product) > kMax / factor) return std::numeric_limits<int64_t>::max();
    return static_cast<int64_t>(static_cast<uint64_t>(product) * factor);
  }

  static std::optional<uint64_t> ParseDecimal(std::string_view text) {
    if (text.empty() || text.size() > 19) return std::nullopt;
    uint64_t value = 0;
    for (char c : text) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + static_cast<uint64_t>(c - '0');
    }
    return value;
  }

  // Appends one dim to the initializer and multiplies its element count by it.
  static void AddDim(uint64_t dim, OnnxInitializer* out) {
    out->dims.push_back(static_cast<int64_t>(dim));
    out->elements = SaturatingProduct(out->elements, dim);
  }

  bool DecodeGraph(std::string_view bytes, int holder, int depth) {
    if (depth > kMaxGraphNesting) return Fail("graphs are nested too deeply");
    int index = static_cast<int>(model_->graphs.size());
    model_->graphs.push_back({});
    model_->graphs[index].holder = holder;
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a graph is not well-formed");
      if (field.wire_type != kLengthDelimited) continue;
      if (field.number == kGraphNode) {
        if (!DecodeNode(field.payload, index, depth)) return false;
      } else if (field.number == kGraphInitializer) {
        OnnxInitializer initializer;
        if (!DecodeInitializer(field.payload, &initializer)) return false;
        model_->graphs[index].initializers.push_back(std::move(initializer));
      } else if (field.number == kGraphInput || field.number == kGraphOutput || field.number == kGraphValueInfo) {
        OnnxValue value{{}, field.payload};
        if (!DecodeNamed(field.payload, kValueInfoName, &value.name)) return false;
        OnnxGraph& graph = model_->graphs[index];
        (field.number == kGraphInput    ? graph.inputs
         : field.number == kGraphOutput ? graph.outputs
                                        : graph.value_info)
            .push_back(std::move(value));
      }
    }
    return true;
  }

  bool DecodeNode(std::string_view bytes, int graph, int depth) {
    int index = static_cast<int>(model_->nodes.size());
    model_->nodes.push_back({});
    model_->nodes[index].graph = graph;
    model_->nodes[index].raw = bytes;
    model_->graphs[graph].nodes.push_back(index);
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("a node is not well-formed");
      if (field.wire_type != kLengthDelimited) continue;
      OnnxNode& node = model_->nodes[index];
      switch (field.number) {
        case kNodeInput:
          node.inputs.emplace_back(field.payload);
          break;
        case kNodeOutput:
          node.outputs.emplace_back(field.payload);
          break;
        case kNodeName:
          node.name = field.payload;
          break;
        case kNodeOpType:
          node.op_type = field.payload;
          break;
        case kNodeDomain:
          node.domain = field.payload;
          break;
        case kNodeMetadataProps:
          if (!DecodeEntry(field.payload, &node.metadata)) return false;
          break;
        case kNodeAttribute:
          if (!DecodeAttribute(field.payload, index, depth)) return false;
          break;
        default:
          break;
      }
    }
    return true;
  }

  bool DecodeAttribute(std::string_view bytes, int node, int depth) {
    Reader reader(bytes);
    Field field;
    while (!reader.done()) {
      if (!reader.Next(&field)) return Fail("an attribute is not well-formed");
      if ((field.number == kAttributeGraph || field.number == kAttributeGraphs) &&
          field.wire_type == kLengthDelimited) {
        model_->nodes[node].subgraphs.push_back(static_cast<int>(model_->graphs.size()));
        if (!DecodeGraph(field.payload, node, depth + 1)) return false;
      }
    }
    return true;
  }

  OnnxModel* model_;
  std::string* error_;
};

}  // namespace

std::optional<OnnxModel> OnnxModel::Parse(std::string bytes, std::string* error) {
  auto owned = std::make_shared<const std::string>(std::move(bytes));
  std::string_view view = *owned;
  return Parse(std::move(owned), view, error);
}

std::optional<OnnxModel> OnnxModel::Parse(std::shared_ptr<const void> owner, std::string_view bytes,
                                          std::string* error) {
  OnnxModel model;
  model.owner_ = std::move(owner);
  model.bytes_ = bytes;
  if (!Decoder(&model, error).DecodeModel(model.bytes_)) return std::nullopt;
  return model;
}

std::optional<OnnxModel> OnnxModel::Load(const std::string& path, std::string* error) {
  std::error_code status;
  if (!std::filesystem::exists(path, status)) {
    *error = "cannot open the file (missing or unreadable)";
    return std::nullopt;
  }
  if (!std::filesystem::is_regular_file(path, status)) {
    *error = "not a regular file";
    return std::nullopt;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    *error = "cannot open the file (missing or unreadable)";
    return std::nullopt;
  }
  // Read straight into one string of the file's size: a stream buffer grown by
  // doubling, then copied, would hold up to twice the file again, and past the
  // parse (the largest share of every command's peak).
  std::uintmax_t size = std::filesystem::file_size(path, status);
  if (status) {
    *error = "cannot read the file";
    return std::nullopt;
  }
  std::string bytes(static_cast<size_t>(size), '\0');
  file.read(bytes.data(), static_cast<std::streamsize>(size));
  if (file.bad() || static_cast<std::uintmax_t>(file.gcount()) != size ||
      file.peek() != std::ifstream::traits_type::eof()) {
    *error = "cannot read the file";
    return std::nullopt;
  }
  if (bytes.empty()) {
    *error = "the file is empty";
    return std::nullopt;
  }
  std::optional<OnnxModel> model = Parse(std::move(bytes), error);
  if (model) model->directory = std::filesystem::path(path).parent_path().string();
  return model;
}

std::optional<std::string> MainGraphValueInfos(std::string_view model, std::string* error) {
  wire::Reader reader(model);
  wire::Field field;
  std::optional<std::string_view> graph;
  while (!reader.done()) {
    if (!reader.Next(&field)) {
      *error = "not a well-formed ONNX model (truncated or another format)";
      return std::nullopt;
    }
    if (field.number == kModelGraph && field.wire_type == wire::kLengthDelimited) {
      if (graph) {
        *error = "the model has two graphs";  // as OnnxModel::Parse refuses them
        return std::nullopt;
      }
      graph = field.payload;
    }
  }
  if (!graph) {
    *error = "not an ONNX model (no graph)";
    return std::nullopt;
  }
  std::string values;
  wire::Reader graph_reader(*graph);
  while (!graph_reader.done()) {
    if (!graph_reader.Next(&field)) {
      *error = "a graph is not well-formed";
      return std::nullopt;
    }
    bool typed_value = field.number == kGraphInput || field.number == kGraphOutput || field.number == kGraphValueInfo;
    if (typed_value && field.wire_type == wire::kLengthDelimited) values.append(field.raw);
  }
  return values;
}

}  // namespace hiertag
