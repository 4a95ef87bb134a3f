// Value types: the file's own, a types file's, then ONNX shape inference.
#include "hiertag/core/file/value_types.h"

#include <utility>

#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {

namespace {

// True when a serialized ValueInfoProto carries a non-empty type (field 2).
bool HasType(std::string_view value_info) {
  wire::Reader reader(value_info);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.number == onnx_field::kValueInfoType && field.wire_type == wire::kLengthDelimited &&
        !field.payload.empty()) {
      return true;
    }
  }
  return false;
}

}  // namespace

ValueTypeMap RecordedValueTypes(const OnnxModel& model) {
  ValueTypeMap types;
  const OnnxGraph& main = model.graphs.at(0);
  for (const auto* values : {&main.inputs, &main.outputs, &main.value_info}) {
    for (const OnnxValue& value : *values) {
      if (HasType(value.raw)) types.emplace(value.name, std::string(value.raw));
    }
  }
  return types;
}

ValueTypes::ValueTypes(const OnnxModel& model, ValueTypeMap supplied, InferTypes infer)
    : model_(model), known_(RecordedValueTypes(model)), infer_(std::move(infer)) {
  known_.merge(supplied);  // the file's own type wins where both have one
}

std::vector<std::optional<std::string_view>> ValueTypes::Find(const std::vector<std::string>& names) {
  ValueNames untyped;
  for (const std::string& name : names) {
    if (!known_.count(name)) untyped.insert(name);
  }
  if (!untyped.empty()) {
    inference_error_.clear();
    std::optional<ValueTypeMap> inferred;
    if (infer_) {
      inferred = infer_(model_, known_, &untyped, &inference_error_);
    } else {
      inference_error_ = "no shape inference was asked";
    }
    inferred_ = inferred ? std::move(*inferred) : ValueTypeMap{};
  }
  std::vector<std::optional<std::string_view>> types;
  for (const std::string& name : names) {
    if (auto known = known_.find(name); known != known_.end()) {
      types.emplace_back(known->second);
    } else if (auto inferred = inferred_.find(name); inferred != inferred_.end()) {
      types.emplace_back(inferred->second);
    } else {
      types.emplace_back(std::nullopt);
    }
  }
  return types;
}

}  // namespace hiertag
