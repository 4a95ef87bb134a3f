// Value types: recorded ValueInfoProtos first, ONNX shape inference second.
#include "hiertag/tool/value_types.h"

#include "hiertag/core/onnx_fields.h"
#include "hiertag/core/proto_wire.h"

#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

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

// Shape inference lists values it could not type with an empty TypeProto.
bool IsUsableType(const onnx::TypeProto& type) {
  if (type.has_tensor_type()) return type.tensor_type().elem_type() != onnx::TensorProto::UNDEFINED;
  return type.value_case() != onnx::TypeProto::VALUE_NOT_SET;
}

}  // namespace

ValueTypes::ValueTypes(const OnnxModel& model) : model_(model) {
  const OnnxGraph& main = model.graphs.at(0);
  for (const auto* values : {&main.inputs, &main.outputs, &main.value_info}) {
    for (const OnnxValue& value : *values) {
      if (HasType(value.raw)) recorded_.emplace(value.name, std::string(value.raw));
    }
  }
}

std::optional<std::string_view> ValueTypes::Find(const std::string& name) {
  auto recorded = recorded_.find(name);
  if (recorded != recorded_.end()) return std::string_view(recorded->second);
  if (!inferred_once_) Infer();
  auto inferred = inferred_.find(name);
  if (inferred != inferred_.end()) return std::string_view(inferred->second);
  return std::nullopt;
}

void ValueTypes::Infer() {
  inferred_once_ = true;
  onnx::ModelProto proto;
  std::string_view bytes = model_.bytes();
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    inference_error_ = "the model cannot be read by ONNX's shape inference";
    return;
  }
  try {
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/false, /*strict_mode_val=*/0,
                                                                   /*data_prop_val=*/true));
  } catch (const std::exception& error) {
    inference_error_ = std::string("ONNX shape inference failed: ") + error.what();
    return;
  }
  for (const auto* values : {&proto.graph().input(), &proto.graph().output(), &proto.graph().value_info()}) {
    for (const onnx::ValueInfoProto& value : *values) {
      if (value.has_type() && IsUsableType(value.type())) inferred_.emplace(value.name(), value.SerializeAsString());
    }
  }
}

}  // namespace hiertag
