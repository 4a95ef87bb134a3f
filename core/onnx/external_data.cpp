// External data: safe locations, bounded reads, tensors rewritten.
#include "hiertag/core/onnx/external_data.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

namespace fs = std::filesystem;

// The file `where` names and the size of the range, checked; std::nullopt with a reason.
std::optional<std::pair<fs::path, uint64_t>> CheckedRange(const std::string& model_directory, const ExternalData& where,
                                                          std::string* error) {
  if (std::optional<std::string> unsafe = UnsafeLocationReason(where.location)) {
    *error = "external data location '" + where.location + "' " + *unsafe;
    return std::nullopt;
  }
  fs::path folder = model_directory.empty() ? fs::path(".") : fs::path(model_directory);
  fs::path file = folder / where.location;
  std::error_code status;
  fs::path real_folder = fs::weakly_canonical(folder, status);
  fs::path real_file = fs::weakly_canonical(file, status);
  auto [folder_end, file_it] =
      std::mismatch(real_folder.begin(), real_folder.end(), real_file.begin(), real_file.end());
  if (status || folder_end != real_folder.end()) {
    *error = "external data location '" + where.location + "' leads outside the model's folder";
    return std::nullopt;
  }
  if (!fs::is_regular_file(real_file, status)) {
    *error = "external data file '" + where.location + "' does not exist next to the model";
    return std::nullopt;
  }
  uint64_t size = fs::file_size(real_file, status);
  if (status || where.offset > size) {
    *error = "external data file '" + where.location + "' holds " + std::to_string(size) +
             " bytes, the tensor starts at byte " + std::to_string(where.offset);
    return std::nullopt;
  }
  uint64_t length = where.length.value_or(size - where.offset);
  if (length > size - where.offset) {
    *error = "external data file '" + where.location + "' holds " + std::to_string(size) + " bytes, the tensor needs " +
             std::to_string(where.offset) + " + " + std::to_string(length);
    return std::nullopt;
  }
  return std::pair{real_file, length};
}

// The tensor's fields but its data (raw_data, external_data, data_location).
std::string WithoutData(std::string_view tensor) {
  std::string out;
  wire::Reader reader(tensor);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.number == kTensorRawData || field.number == kTensorExternalData || field.number == kTensorDataLocation) {
      continue;
    }
    out.append(field.raw);
  }
  return out;
}

}  // namespace

std::optional<std::string> UnsafeLocationReason(std::string_view location) {
  if (location.empty()) return "is empty";
  if (location.find('\0') != std::string_view::npos) return "holds a NUL byte";
  fs::path path{std::string(location)};
  if (path.is_absolute() || location.front() == '/' || location.front() == '\\') return "is an absolute path";
  for (const fs::path& part : path) {
    if (part == "..") return "leads outside the model's folder";
  }
  return std::nullopt;
}

std::optional<uint64_t> ExternalDataSize(const std::string& model_directory, const ExternalData& where,
                                         std::string* error) {
  std::optional<std::pair<fs::path, uint64_t>> range = CheckedRange(model_directory, where, error);
  if (!range) return std::nullopt;
  return range->second;
}

std::optional<std::string> ReadExternalData(const std::string& model_directory, const ExternalData& where,
                                            int64_t expected_bytes, std::string* error) {
  std::optional<std::pair<fs::path, uint64_t>> range = CheckedRange(model_directory, where, error);
  if (!range) return std::nullopt;
  auto [file, length] = *range;
  if (expected_bytes >= 0 && length != static_cast<uint64_t>(expected_bytes)) {
    *error = "external data of '" + where.location + "' is " + std::to_string(length) + " bytes, the tensor needs " +
             std::to_string(expected_bytes);
    return std::nullopt;
  }
  std::ifstream in(file, std::ios::binary);
  std::string data(length, '\0');
  in.seekg(static_cast<std::streamoff>(where.offset));
  in.read(data.data(), static_cast<std::streamsize>(length));
  if (!in || static_cast<uint64_t>(in.gcount()) != length) {
    *error = "cannot read external data file '" + where.location + "'";
    return std::nullopt;
  }
  return data;
}

std::string TensorWithInlineData(std::string_view tensor, std::string_view data) {
  std::string out = WithoutData(tensor);
  wire::AppendLengthDelimited(&out, kTensorRawData, data);
  return out;
}

std::string TensorWithExternalData(std::string_view tensor, const ExternalData& where) {
  std::string out = WithoutData(tensor);
  AppendStringEntry(&out, kTensorExternalData, "location", where.location);
  AppendStringEntry(&out, kTensorExternalData, "offset", std::to_string(where.offset));
  if (where.length) {
    AppendStringEntry(&out, kTensorExternalData, "length", std::to_string(*where.length));
  }
  wire::AppendVarint(&out, (static_cast<uint64_t>(kTensorDataLocation) << 3) | wire::kVarint);
  wire::AppendVarint(&out, kDataLocationExternal);
  return out;
}

namespace {

// The main graph's initializers over `over_bytes` of raw_data pointing at it in
// `file` (WithWeightsLeftInFile); false when `graph` is not well-formed.
bool GraphWithWeightsLeftInFile(std::string_view file, std::string_view graph, std::string_view location,
                                uint64_t over_bytes, std::string* out) {
  wire::Reader reader(graph);
  wire::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
    if (field.number != kGraphInitializer || field.wire_type != wire::kLengthDelimited) {
      out->append(field.raw);
      continue;
    }
    std::optional<std::string_view> data;
    bool external = false;
    wire::Reader tensor(field.payload);
    wire::Field tensor_field;
    while (!tensor.done()) {
      if (!tensor.Next(&tensor_field)) return false;
      if (tensor_field.number == kTensorRawData && tensor_field.wire_type == wire::kLengthDelimited) {
        data = tensor_field.payload;
      } else if (tensor_field.number == kTensorExternalData ||
                 (tensor_field.number == kTensorDataLocation && tensor_field.varint == kDataLocationExternal)) {
        external = true;
      }
    }
    if (external || !data || data->size() <= over_bytes) {
      out->append(field.raw);
      continue;
    }
    ExternalData where{std::string(location), static_cast<uint64_t>(data->data() - file.data()), data->size()};
    wire::AppendLengthDelimited(out, kGraphInitializer, TensorWithExternalData(field.payload, where));
  }
  return true;
}

}  // namespace

std::optional<std::string> WithWeightsLeftInFile(std::string_view file, std::string_view location, uint64_t over_bytes,
                                                 std::string* error) {
  wire::Reader reader(file);
  wire::Field field;
  std::string out;
  bool saw_graph = false;
  while (!reader.done()) {
    if (!reader.Next(&field)) {
      *error = "not a well-formed ONNX model (truncated or another format)";
      return std::nullopt;
    }
    if (field.number != kModelGraph || field.wire_type != wire::kLengthDelimited) {
      out.append(field.raw);
      continue;
    }
    if (saw_graph) {
      *error = "the model has two graphs";  // as OnnxModel::Parse refuses them
      return std::nullopt;
    }
    saw_graph = true;
    std::string graph;
    if (!GraphWithWeightsLeftInFile(file, field.payload, location, over_bytes, &graph)) {
      *error = "a graph is not well-formed";
      return std::nullopt;
    }
    wire::AppendLengthDelimited(&out, kModelGraph, graph);
  }
  if (!saw_graph) {
    *error = "not an ONNX model (no graph)";
    return std::nullopt;
  }
  return out;
}

}  // namespace hiertag
