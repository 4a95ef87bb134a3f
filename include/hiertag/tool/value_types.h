// Value types: the ValueInfoProto (type and shape) of each value of a model's
// main graph, as the tool needs them for the inputs and outputs of an
// extracted module.
//
// torch records types for the graph's inputs and outputs only (measured: 2 of
// 185 values of the bundled BERT). The rest come from ONNX shape inference
// (Debian's libonnx), run on the model once, on first need.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "hiertag/core/onnx_model.h"

namespace hiertag {

class ValueTypes {
 public:
  explicit ValueTypes(const OnnxModel& model);

  // The serialized ValueInfoProto of `name`, or std::nullopt when neither the
  // file nor shape inference gives it a type.
  std::optional<std::string_view> Find(const std::string& name);

  // Why shape inference failed, if it ran and failed.
  const std::string& inference_error() const { return inference_error_; }

 private:
  void Infer();

  const OnnxModel& model_;
  std::map<std::string, std::string> recorded_;  // from the file
  std::map<std::string, std::string> inferred_;
  bool inferred_once_ = false;
  std::string inference_error_;
};

}  // namespace hiertag
