// Shape inference over a model's main graph, one piece at a time (value_types.h
// InferInPieces).
//
// A piece is a run of main-graph nodes in graph order, written as a model of
// its own: the values it reads from earlier pieces are its graph inputs, typed
// as the earlier pieces' inference typed them, so each node is inferred from
// the same input types whole-model inference gives it. Three things whole-model
// inference knows beyond input types are carried over too:
//   - values: ONNX reads the data of an initializer or a Constant, and
//     propagates the data of small integer tensors (a Shape's result through
//     Gather, Concat...), for inputs such as Reshape's shape. Every such input
//     is a tensor of rank 0 or 1, so a piece also holds the producers of each
//     value it reads that is of rank 0 or 1 or of unknown rank, transitively
//     (their outputs typed as before), and the initializers its nodes read
//     that are of rank 0 or 1; a larger initializer is a typed graph input
//     (its data is never read, and never copied).
//   - symbols: a piece lists every dim_param named so far (the file's and
//     those inference made up), so that a symbol it makes up is new, as one
//     made up in whole-model inference is: no two unknown dimensions share a
//     name by accident.
//   - the file's own types: each value the file types is listed as it is.
// A value read from outside the main graph's nodes (a node's subgraph reading
// an outer value) counts as read by that node (module_boundaries.h NodeReads).
//
// Asked for some values only, inference keeps a value's type while a later
// piece may read it: when a node after its piece reads it, or when a node
// making a value that may carry data reads it (a later piece may hold that
// node for its data). The others are dropped with their piece, so the types
// held are what crosses between pieces, not every value of the model.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hiertag/core/file/module_boundaries.h"
#include "hiertag/core/file/value_types.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {

namespace {

using namespace onnx_field;  // NOLINT: the field numbers this file reads and writes

// The payload of the first length-delimited field `number` of `message`, or none.
std::optional<std::string_view> FirstMessage(std::string_view message, uint32_t number) {
  wire::Reader reader(message);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.number == number && field.wire_type == wire::kLengthDelimited) return field.payload;
  }
  return std::nullopt;
}

// Every dim_param a TypeProto names, nested types included.
void CollectSymbols(std::string_view type, std::set<std::string, std::less<>>* symbols) {
  wire::Reader reader(type);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.wire_type != wire::kLengthDelimited) continue;
    if (field.number == kTypeTensor || field.number == kTypeSparseTensor) {
      std::optional<std::string_view> shape = FirstMessage(field.payload, kTensorTypeShape);
      if (!shape) continue;
      wire::Reader dims(*shape);
      wire::Field dim;
      while (!dims.done() && dims.Next(&dim)) {
        if (dim.number != kShapeDim || dim.wire_type != wire::kLengthDelimited) continue;
        std::optional<std::string_view> param = FirstMessage(dim.payload, kDimParam);
        if (param && !param->empty()) symbols->emplace(*param);
      }
    } else if (field.number == kTypeSequence || field.number == kTypeOptional) {
      if (auto element = FirstMessage(field.payload, 1)) CollectSymbols(*element, symbols);
    } else if (field.number == kTypeMap) {
      if (auto value = FirstMessage(field.payload, kMapValueType)) CollectSymbols(*value, symbols);
    }
  }
}

// True when a value of this serialized ValueInfoProto may carry data ONNX
// reads or propagates: a tensor of rank 0 or 1, or of unknown rank.
bool MayCarryData(std::string_view value_info) {
  std::optional<std::string_view> type = FirstMessage(value_info, onnx_field::kValueInfoType);
  if (!type) return false;
  std::optional<std::string_view> tensor = FirstMessage(*type, kTypeTensor);
  if (!tensor) return false;
  std::optional<std::string_view> shape = FirstMessage(*tensor, kTensorTypeShape);
  if (!shape) return true;
  wire::Reader dims(*shape);
  wire::Field dim;
  int rank = 0;
  while (!dims.done() && dims.Next(&dim)) rank += dim.number == kShapeDim;
  return rank <= 1;
}

// A ValueInfoProto named `name` of a tensor of `elem_type` whose shape holds
// `dims` (serialized TensorShapeProto.Dimension messages).
std::string TensorValueInfo(std::string_view name, uint64_t elem_type, const std::vector<std::string>& dims) {
  std::string shape;
  for (const std::string& dim : dims) wire::AppendLengthDelimited(&shape, kShapeDim, dim);
  std::string tensor;
  wire::AppendVarint(&tensor, (static_cast<uint64_t>(kTensorTypeElemType) << 3) | wire::kVarint);
  wire::AppendVarint(&tensor, elem_type);
  wire::AppendLengthDelimited(&tensor, kTensorTypeShape, shape);
  std::string type_proto;
  wire::AppendLengthDelimited(&type_proto, kTypeTensor, tensor);
  std::string value_info;
  wire::AppendLengthDelimited(&value_info, onnx_field::kValueInfoName, name);
  wire::AppendLengthDelimited(&value_info, onnx_field::kValueInfoType, type_proto);
  return value_info;
}

// A ValueInfoProto naming the initializer with its type.
std::string TypedInput(const OnnxInitializer& initializer) {
  std::vector<std::string> dims;
  for (int64_t size : initializer.dims) {
    std::string& dim = dims.emplace_back();
    wire::AppendVarint(&dim, (static_cast<uint64_t>(kDimValue) << 3) | wire::kVarint);
    wire::AppendVarint(&dim, static_cast<uint64_t>(size));
  }
  return TensorValueInfo(initializer.name, initializer.data_type, dims);
}

// A ValueInfoProto named `name` whose tensor shape names each of `symbols`.
std::string SymbolList(std::string_view name, const std::set<std::string, std::less<>>& symbols) {
  std::vector<std::string> dims;
  for (const std::string& symbol : symbols) wire::AppendLengthDelimited(&dims.emplace_back(), kDimParam, symbol);
  return TensorValueInfo(name, 1, dims);  // FLOAT: any element type serves
}

// The model's own fields a piece keeps (opsets, IR version, local functions...):
// all but its graph, doc string, metadata and training info.
std::string ModelFieldsButGraph(std::string_view model) {
  std::string kept;
  wire::Reader reader(model);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.number == onnx_field::kModelGraph || field.number == onnx_field::kModelMetadataProps ||
        field.number == kModelDocString || field.number == kModelTrainingInfo) {
      continue;
    }
    kept.append(field.raw);
  }
  return kept;
}

class PieceInference {
 public:
  PieceInference(const OnnxModel& model, const ValueTypeMap& known, const ValueNames* wanted)
      : model_(model), main_(model.graphs.at(0)), known_(known), wanted_(wanted) {
    position_of_.resize(model_.nodes.size());
    for (size_t position = 0; position < main_.nodes.size(); ++position) {
      const OnnxNode& node = model_.nodes[main_.nodes[position]];
      position_of_[main_.nodes[position]] = position;
      for (std::string_view output : node.outputs) {
        if (!output.empty()) producer_.emplace(output, main_.nodes[position]);
      }
      reads_.push_back(NodeReads(model_, main_.nodes[position]));
    }
    last_read_.assign(main_.nodes.size(), 0);
    for (size_t position = 0; position < main_.nodes.size(); ++position) {
      for (std::string_view read : reads_[position]) {
        if (auto producer = producer_.find(read); producer != producer_.end()) {
          size_t& last = last_read_[position_of_[producer->second]];
          last = std::max(last, position);
        }
      }
    }
    for (const OnnxInitializer& initializer : main_.initializers) initializer_.emplace(initializer.name, &initializer);
    for (const auto& [name, value_info] : known_) {
      if (auto type = FirstMessage(value_info, onnx_field::kValueInfoType)) CollectSymbols(*type, &symbols_);
    }
    symbol_list_name_ = "hiertag.symbols";
    while (producer_.count(symbol_list_name_) || initializer_.count(symbol_list_name_) ||
           known_.count(symbol_list_name_)) {
      symbol_list_name_ += "_";
    }
  }

  std::optional<ValueTypeMap> Run(const InferPiece& infer, size_t piece_bytes, std::string* error) {
    const std::string model_fields = ModelFieldsButGraph(model_.bytes());
    size_t start = 0;
    while (start < main_.nodes.size()) {
      size_t end = start, bytes = 0;
      while (end < main_.nodes.size() && (end == start || bytes < piece_bytes)) {
        bytes += model_.nodes[main_.nodes[end]].raw.size();
        ++end;
      }
      std::optional<ValueTypeMap> typed = infer(Piece(model_fields, start, end), error);
      if (!typed) return std::nullopt;
      for (size_t position = start; position < end; ++position) {
        for (std::string_view output : model_.nodes[main_.nodes[position]].outputs) {
          auto found = typed->find(output);
          if (output.empty() || found == typed->end() || known_.count(output) || inferred_.count(output)) continue;
          if (auto type = FirstMessage(found->second, onnx_field::kValueInfoType)) CollectSymbols(*type, &symbols_);
          inferred_.emplace(output, std::move(found->second));
        }
      }
      if (wanted_ != nullptr) DropUnneeded(start, end);
      start = end;
    }
    if (wanted_ != nullptr) {
      for (auto value = inferred_.begin(); value != inferred_.end();) {
        value = wanted_->count(value->first) ? std::next(value) : inferred_.erase(value);
      }
    }
    return std::move(inferred_);
  }

 private:
  // Asked for some values: drops the types of the piece [start, end) that no
  // later piece may read and no one asked for (the file's header comment).
  void DropUnneeded(size_t start, size_t end) {
    for (size_t position = start; position < end; ++position) {
      for (std::string_view output : model_.nodes[main_.nodes[position]].outputs) {
        std::optional<std::string_view> type = TypeOf(output);
        if (!type || !MayCarryData(*type)) continue;
        needed_.insert(reads_[position].begin(), reads_[position].end());
        break;
      }
    }
    for (size_t position = start; position < end; ++position) {
      if (last_read_[position] >= end) continue;
      for (std::string_view output : model_.nodes[main_.nodes[position]].outputs) {
        auto inferred = inferred_.find(output);
        if (inferred != inferred_.end() && !wanted_->count(output) && !needed_.count(output)) inferred_.erase(inferred);
      }
    }
  }

  std::optional<std::string_view> TypeOf(std::string_view name) const {
    if (auto known = known_.find(name); known != known_.end()) return std::string_view(known->second);
    if (auto inferred = inferred_.find(name); inferred != inferred_.end()) return std::string_view(inferred->second);
    return std::nullopt;
  }

  // The model of the nodes at positions [start, end) of the main graph, with
  // the producers of the data they read.
  std::string Piece(const std::string& model_fields, size_t start, size_t end) const {
    std::set<size_t> positions;
    for (size_t position = start; position < end; ++position) positions.insert(position);
    std::vector<size_t> pending(positions.begin(), positions.end());
    while (!pending.empty()) {
      size_t position = pending.back();
      pending.pop_back();
      for (std::string_view read : reads_[position]) {
        auto producer = producer_.find(read);
        if (producer == producer_.end()) continue;
        size_t from = position_of_[producer->second];
        if (positions.count(from)) continue;
        std::optional<std::string_view> type = TypeOf(read);
        if (!type || !MayCarryData(*type)) continue;
        positions.insert(from);
        pending.push_back(from);
      }
    }
    std::string graph;
    std::set<std::string_view> made, listed;
    for (size_t position : positions) {
      const OnnxNode& node = model_.nodes[main_.nodes[position]];
      wire::AppendLengthDelimited(&graph, onnx_field::kGraphNode, node.raw);
      for (std::string_view output : node.outputs) made.insert(output);
    }
    for (size_t position : positions) {
      for (std::string_view read : reads_[position]) {
        if (made.count(read) || !listed.insert(read).second) continue;
        if (auto initializer = initializer_.find(read); initializer != initializer_.end()) {
          if (initializer->second->dims.size() <= 1) {
            wire::AppendLengthDelimited(&graph, onnx_field::kGraphInitializer, initializer->second->raw);
          } else {
            wire::AppendLengthDelimited(&graph, onnx_field::kGraphInput, TypedInput(*initializer->second));
          }
        } else if (std::optional<std::string_view> type = TypeOf(read)) {
          wire::AppendLengthDelimited(&graph, onnx_field::kGraphInput, *type);
        }
      }
    }
    for (std::string_view value : made) {
      if (std::optional<std::string_view> type = TypeOf(value)) {
        wire::AppendLengthDelimited(&graph, onnx_field::kGraphValueInfo, *type);
      }
    }
    if (!symbols_.empty()) {
      wire::AppendLengthDelimited(&graph, onnx_field::kGraphValueInfo, SymbolList(symbol_list_name_, symbols_));
    }
    std::string piece = model_fields;
    wire::AppendLengthDelimited(&piece, onnx_field::kModelGraph, graph);
    return piece;
  }

  const OnnxModel& model_;
  const OnnxGraph& main_;
  const ValueTypeMap& known_;
  const ValueNames* wanted_;  // null: every value's type is kept
  ValueTypeMap inferred_;
  std::vector<size_t> position_of_;           // node id -> position in the main graph
  std::vector<size_t> last_read_;             // by position: the last position reading one of its outputs
  std::set<std::string_view> needed_;         // values read by nodes making values that may carry data
  std::map<std::string_view, int> producer_;  // value -> main-graph node making it
  std::map<std::string_view, const OnnxInitializer*> initializer_;
  std::vector<std::vector<std::string_view>> reads_;  // by position
  std::set<std::string, std::less<>> symbols_;
  std::string symbol_list_name_;
};

}  // namespace

InferTypes InferInPieces(InferPiece infer, size_t piece_bytes) {
  return [infer = std::move(infer), piece_bytes](const OnnxModel& model, const ValueTypeMap& known,
                                                 const ValueNames* wanted,
                                                 std::string* error) -> std::optional<ValueTypeMap> {
    return PieceInference(model, known, wanted).Run(infer, piece_bytes, error);
  };
}

}  // namespace hiertag
