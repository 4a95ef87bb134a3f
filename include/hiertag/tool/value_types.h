// Value types: the ValueInfoProto (type and shape) of each value of a model's
// main graph, as the tool needs them for the inputs and outputs of an
// extracted module.
//
// torch records types for the graph's inputs and outputs only (measured: 2 of
// 185 values of the bundled BERT). The others come, in this order, from a
// types file (another ONNX model whose main graph lists them: the same model
// after onnx.shape_inference, as the Python package's verbs pass it), then
// from ONNX shape inference run on the model once, on first need, in a build
// that has an ONNX library (InferValueTypes).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

// The serialized ValueInfoProtos with a usable type of a model's main graph
// (inputs, outputs, value_info), by value name.
using ValueTypeMap = std::map<std::string, std::string, std::less<>>;

// ONNX shape inference (with data propagation) over a serialized model: the
// types it gives the main graph's values, or std::nullopt with `error`. One of
// tool/onnx_shape_inference.cpp (ONNX's) and tool/no_shape_inference.cpp (a
// build without an ONNX library: always std::nullopt) implements it.
std::optional<ValueTypeMap> InferValueTypes(std::string_view model, std::string* error);

// The types a model's main graph records (inputs, outputs, value_info).
ValueTypeMap RecordedValueTypes(const OnnxModel& model);

class ValueTypes {
 public:
  // `supplied`: types from a types file, consulted after the model's own.
  explicit ValueTypes(const OnnxModel& model, ValueTypeMap supplied = {});

  // The serialized ValueInfoProto of `name`, or std::nullopt when neither the
  // file, the types file nor shape inference gives it a type.
  std::optional<std::string_view> Find(const std::string& name);

  // Why shape inference gave no type, if it ran.
  const std::string& inference_error() const { return inference_error_; }

 private:
  const OnnxModel& model_;
  ValueTypeMap known_;  // the file's own, then the supplied ones
  std::optional<ValueTypeMap> inferred_;
  bool inferred_once_ = false;
  std::string inference_error_;
};

}  // namespace hiertag
