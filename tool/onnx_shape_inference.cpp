// InferValueTypes with ONNX's shape inference (an ONNX library of this build's
// C++ ABI: Debian's libonnx-dev in a checkout).
#include <onnx/onnx_pb.h>
#include <onnx/shape_inference/implementation.h>

#include <map>

#include "hiertag/tool/shape_inference.h"

namespace hiertag {

namespace {

// Shape inference lists values it could not type with an empty TypeProto.
bool IsUsableType(const onnx::TypeProto& type) {
  if (type.has_tensor_type()) return type.tensor_type().elem_type() != onnx::TensorProto::UNDEFINED;
  return type.value_case() != onnx::TypeProto::VALUE_NOT_SET;
}

// ONNX 1.12's data propagation for Shape (opset 15 on) reads the type of its
// input without a null check: an input with no type when the Shape node is
// reached (a graph input written without one, a value no earlier node makes, a
// value whose node could not be typed) crashes the process (found by
// extract_fuzzer). A value_info entry with an empty tensor type for each value a
// Shape node reads gives it a type to read; inference fills the entry in where
// it can, and one left empty is no usable type.
void ListShapeInputs(onnx::GraphProto* graph) {
  std::map<std::string, onnx::ValueInfoProto*> listed;
  for (onnx::ValueInfoProto& value : *graph->mutable_value_info()) listed.emplace(value.name(), &value);
  for (onnx::NodeProto& node : *graph->mutable_node()) {
    if (node.op_type() == "Shape" && (node.domain().empty() || node.domain() == "ai.onnx") && node.input_size() > 0) {
      auto [entry, added] = listed.emplace(node.input(0), nullptr);
      if (added) {
        entry->second = graph->add_value_info();
        entry->second->set_name(node.input(0));
      }
      if (!entry->second->has_type()) entry->second->mutable_type()->mutable_tensor_type();
    }
    for (onnx::AttributeProto& attribute : *node.mutable_attribute()) {
      if (attribute.has_g()) ListShapeInputs(attribute.mutable_g());
      for (onnx::GraphProto& nested : *attribute.mutable_graphs()) ListShapeInputs(&nested);
    }
  }
}

}  // namespace

std::optional<ValueTypeMap> InferValueTypes(std::string_view model, std::string* error) {
  onnx::ModelProto proto;
  if (model.size() > static_cast<size_t>(INT32_MAX) ||
      !proto.ParseFromArray(model.data(), static_cast<int>(model.size()))) {
    *error = "the model cannot be read by ONNX's shape inference";
    return std::nullopt;
  }
  ListShapeInputs(proto.mutable_graph());
  try {
    onnx::shape_inference::InferShapes(proto, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(/*check_type_val=*/false, /*strict_mode_val=*/0,
                                                                   /*data_prop_val=*/true));
  } catch (const std::exception& inference_error) {
    *error = std::string("ONNX shape inference failed: ") + inference_error.what();
    return std::nullopt;
  }
  ValueTypeMap types;
  for (const auto* values : {&proto.graph().input(), &proto.graph().output(), &proto.graph().value_info()}) {
    for (const onnx::ValueInfoProto& value : *values) {
      if (value.has_type() && IsUsableType(value.type())) types.emplace(value.name(), value.SerializeAsString());
    }
  }
  return types;
}

}  // namespace hiertag
