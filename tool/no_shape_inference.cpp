// InferValueTypes in a build without an ONNX library (the Python package's
// wheel): the file's types and a types file's are all extract has.
#include "hiertag/tool/shape_inference.h"

namespace hiertag {

std::optional<ValueTypeMap> InferValueTypes(std::string_view, std::string* error) {
  *error =
      "this build of the tool has no ONNX shape inference; give the types with --value-types FILE "
      "(the Python package's `hiertag extract` does)";
  return std::nullopt;
}

}  // namespace hiertag
