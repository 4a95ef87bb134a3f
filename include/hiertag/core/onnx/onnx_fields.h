// onnx.proto field numbers (ONNX >= 1.16: NodeProto.metadata_props is field 9),
// for the wire-level readers and writers (proto_wire.h), and the encoding of a
// metadata_props entry. One place for them all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag::onnx_field {

inline constexpr uint32_t kModelIrVersion = 1;
inline constexpr uint32_t kModelDocString = 6;
inline constexpr uint32_t kModelGraph = 7;
inline constexpr uint32_t kModelOpsetImport = 8;
inline constexpr uint32_t kModelMetadataProps = 14;
inline constexpr uint32_t kModelTrainingInfo = 20;

inline constexpr uint32_t kGraphNode = 1;
inline constexpr uint32_t kGraphName = 2;
inline constexpr uint32_t kGraphInitializer = 5;
inline constexpr uint32_t kGraphInput = 11;
inline constexpr uint32_t kGraphOutput = 12;
inline constexpr uint32_t kGraphValueInfo = 13;

inline constexpr uint32_t kNodeInput = 1;
inline constexpr uint32_t kNodeOutput = 2;
inline constexpr uint32_t kNodeName = 3;
inline constexpr uint32_t kNodeOpType = 4;
inline constexpr uint32_t kNodeAttribute = 5;
inline constexpr uint32_t kNodeDomain = 7;
inline constexpr uint32_t kNodeMetadataProps = 9;

inline constexpr uint32_t kAttributeGraph = 6;
inline constexpr uint32_t kAttributeGraphs = 11;

inline constexpr uint32_t kValueInfoName = 1;
inline constexpr uint32_t kValueInfoType = 2;

// TypeProto and what it nests (value types, core/file/infer_in_pieces.cpp).
inline constexpr uint32_t kTypeTensor = 1;
inline constexpr uint32_t kTypeSequence = 4;
inline constexpr uint32_t kTypeMap = 5;
inline constexpr uint32_t kTypeSparseTensor = 8;
inline constexpr uint32_t kTypeOptional = 9;
inline constexpr uint32_t kTensorTypeElemType = 1;  // TypeProto.Tensor, .SparseTensor
inline constexpr uint32_t kTensorTypeShape = 2;
inline constexpr uint32_t kShapeDim = 1;  // TensorShapeProto
inline constexpr uint32_t kDimValue = 1;  // TensorShapeProto.Dimension
inline constexpr uint32_t kDimParam = 2;
inline constexpr uint32_t kMapValueType = 2;  // TypeProto.Map
inline constexpr uint32_t kTensorDims = 1;
inline constexpr uint32_t kTensorDataType = 2;
inline constexpr uint32_t kTensorName = 8;
inline constexpr uint32_t kTensorRawData = 9;
inline constexpr uint32_t kTensorExternalData = 13;
inline constexpr uint32_t kTensorDataLocation = 14;
inline constexpr uint64_t kDataLocationExternal = 1;

inline constexpr uint32_t kEntryKey = 1;
inline constexpr uint32_t kEntryValue = 2;

inline constexpr uint32_t kOpsetDomain = 1;
inline constexpr uint32_t kOpsetVersion = 2;

// Appends a StringStringEntryProto (a metadata_props entry) as
// length-delimited field `field` of the message `out` holds, written in place.
// `key` and `value` must not point into `*out` (appending may move it). `out`:
// a std::string or a vector of char (proto_wire.h).
template <typename String>
void AppendStringEntry(String* out, uint32_t field, std::string_view key, std::string_view value) {
  wire::AppendLengthDelimitedHeader(
      out, field,
      wire::LengthDelimitedSize(kEntryKey, key.size()) + wire::LengthDelimitedSize(kEntryValue, value.size()));
  wire::AppendLengthDelimited(out, kEntryKey, key);
  wire::AppendLengthDelimited(out, kEntryValue, value);
}

}  // namespace hiertag::onnx_field
