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

}  // namespace hiertag
