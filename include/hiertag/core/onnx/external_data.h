// External data: tensors a model keeps in files beside it (TensorProto
// data_location EXTERNAL; torch writes one file per large initializer for a
// model over 2 GiB). Reading them safely, and rewriting a tensor to hold its
// data inline or in another file. No torch.
//
// A location is safe when it is relative, names no parent folder ("..") and,
// with symbolic links resolved, stays inside the model's folder: a file that
// points elsewhere (`../../etc/passwd`) is refused, never opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

// Why `location` is not a safe external-data location, or std::nullopt when it is.
std::optional<std::string> UnsafeLocationReason(std::string_view location);

// The tensor's bytes from its external file in `model_directory`; std::nullopt
// with a one-line reason when the location is unsafe, the file is missing, the
// range lies outside it, or its length is not the `expected_bytes` the tensor's
// type and dims need (expected_bytes < 0: not checked). Reads only the range.
std::optional<std::string> ReadExternalData(const std::string& model_directory, const ExternalData& where,
                                            int64_t expected_bytes, std::string* error);

// The size in bytes of the range `where` names, checked against its file as
// ReadExternalData does, without reading it.
std::optional<uint64_t> ExternalDataSize(const std::string& model_directory, const ExternalData& where,
                                         std::string* error);

// A TensorProto's bytes with its data inline (raw_data), its external_data
// entries and data_location dropped.
std::string TensorWithInlineData(std::string_view tensor, std::string_view data);

// A TensorProto's bytes pointing at `where` instead of its own data.
std::string TensorWithExternalData(std::string_view tensor, const ExternalData& where);

// The model file `file` (its bytes, as read from a file named `location`)
// with every main-graph initializer whose raw_data is over `over_bytes` pointing
// at those bytes where they lie in that file (external data: `location`, the
// offset of its raw_data in `file` and its length) instead of holding them: a
// reader that never reads a weight's values holds the graph without them, and
// ONNX Runtime maps them from the file. Every other byte is as it was (fields
// in their order; a rewritten tensor's data_location DEFAULT, if written,
// becomes EXTERNAL); tensors already external, or holding their values in
// typed fields, and tensors of nested graphs and attributes are left alone.
// std::nullopt with a one-line reason, worded as OnnxModel::Parse words it,
// when the bytes are not a model with one graph.
std::optional<std::string> WithWeightsLeftInFile(std::string_view file, std::string_view location, uint64_t over_bytes,
                                                 std::string* error);

}  // namespace hiertag
