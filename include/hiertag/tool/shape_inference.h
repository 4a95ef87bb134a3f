// The native tool's shape inference for extract's boundary values the file
// does not type (file_commands.h ExtractOptions::infer_types).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "hiertag/core/file/value_types.h"

namespace hiertag {

// ONNX shape inference (with data propagation) over a serialized model: the
// types it gives the main graph's values, or std::nullopt with `error`. One of
// tool/onnx_shape_inference.cpp (ONNX's) and tool/no_shape_inference.cpp (a
// build without an ONNX library: always std::nullopt) implements it.
std::optional<ValueTypeMap> InferValueTypes(std::string_view model, std::string* error);

// InferValueTypes as extract asks it (file_commands.h ExtractOptions::infer_types):
// a piece at a time.
inline InferTypes NativeInferTypes() { return InferInPieces(InferValueTypes); }

}  // namespace hiertag
