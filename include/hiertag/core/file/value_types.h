// Value types: the ValueInfoProto (type and shape) of each value of a model's
// main graph, as the tool needs them for the inputs and outputs of an
// extracted module.
//
// torch records types for the graph's inputs and outputs only (measured: 2 of
// 185 values of the bundled BERT). The others come, in this order, from a
// types file (another ONNX model whose main graph lists them: the same model
// after onnx.shape_inference, as the Python package's verbs pass it), then
// from shape inference, run on the model for the values they do not type
// (InferTypes).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

// The serialized ValueInfoProtos with a usable type of a model's main graph
// (inputs, outputs, value_info), by value name.
using ValueTypeMap = std::map<std::string, std::string, std::less<>>;

// Names of values, as InferTypes is asked for them.
using ValueNames = std::set<std::string, std::less<>>;

// Shape inference over a model: the types it gives the main graph's values
// `known` (the file's own and a types file's) does not, or std::nullopt with
// *error; only those of `wanted` when it is given (inference may then keep no
// more than it must), every one it types when it is null.
using InferTypes = std::function<std::optional<ValueTypeMap>(const OnnxModel& model, const ValueTypeMap& known,
                                                             const ValueNames* wanted, std::string* error)>;

// ONNX's shape inference (with data propagation) over one serialized model: the
// types it gives the main graph's values, or std::nullopt with *error. ONNX's
// own, in the native tool where its build has an ONNX library
// (tool/shape_inference.h), in the Python package through the onnx package
// (hiertag.core.value_types).
using InferPiece = std::function<std::optional<ValueTypeMap>(std::string_view model, std::string* error)>;

// How many bytes of nodes a piece of InferInPieces holds, at least one node.
inline constexpr size_t kPieceBytes = size_t{1} << 20;

// InferTypes by `infer` run on the main graph a piece at a time
// (core/file/infer_in_pieces.cpp): each piece a model of its own, of about
// `piece_bytes` of nodes, typed from what the pieces before it gave, so that
// inference holds one piece at a time rather than the whole model, and each
// value gets the type whole-model inference gives it (a symbol inference makes
// up may be numbered differently, never shared). Asked for some values, it
// keeps a value's type only while a later piece may need it.
InferTypes InferInPieces(InferPiece infer, size_t piece_bytes = kPieceBytes);

// The types a model's main graph records (inputs, outputs, value_info).
ValueTypeMap RecordedValueTypes(const OnnxModel& model);

class ValueTypes {
 public:
  // `supplied`: types from a types file, consulted after the model's own;
  // `infer`: asked by Find for the values neither types.
  explicit ValueTypes(const OnnxModel& model, ValueTypeMap supplied = {}, InferTypes infer = {});

  // The serialized ValueInfoProto of each of `names`, in order: std::nullopt
  // for one neither the file, the types file nor shape inference types. Shape
  // inference runs when a name is typed by neither file, asked for those names
  // alone (each call asks again: ask for all the names at once). The views
  // last until the next call.
  std::vector<std::optional<std::string_view>> Find(const std::vector<std::string>& names);

  // Why shape inference gave no type, if it ran.
  const std::string& inference_error() const { return inference_error_; }

 private:
  const OnnxModel& model_;
  ValueTypeMap known_;  // the file's own, then the supplied ones
  InferTypes infer_;
  ValueTypeMap inferred_;
  std::string inference_error_;
};

}  // namespace hiertag
