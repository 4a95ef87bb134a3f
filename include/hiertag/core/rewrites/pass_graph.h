// Pass graph: an export pass's graph as the rewrite classification reads it
// (classify_rewrites.h), written by the observer of either exporter: the
// TorchScript path's RecordRewrites from torch's JIT graph, the dynamo path's
// from onnx_ir's graph. No torch, no Python.
//
// The nodes in pre-order: a node, then the nodes of each graph it holds (an
// If/Loop body), each graph's return last (a node reading the graph's
// outputs, making nothing). Per node: the values it reads and makes, by id;
// the owner it is recorded under (the module call, or a loan of one, as the
// observer numbers them; kNoOwner: none); its op kind and a hash of its
// attributes, both as the observer numbers and hashes them, the same way before
// and after the pass. After the pass, each node also names the node it was
// before the pass (its index there), or kMade: the pass made it.
//
// Value ids: one value keeps its id across the pass, and no id is ever given
// to another value (a freed value's id is not reused), so comparing ids is
// comparing values. `graph_inputs` are the main graph's inputs, user inputs
// first, then the initializers (values no node makes, weights); the values a
// nested graph receives are made by no node and are no graph input.
//
//   %y = Transpose[perm=[0,2,1]](%x)      owner 3
//   %z = MatMul(%y, %w)                   owner 4
//   return(%z)
// -> nodes {kind Transpose, owner 3, inputs {x}, outputs {y}},
//          {kind MatMul, owner 4, inputs {y, w}, outputs {z}},
//          {return, inputs {z}};  graph_inputs {x, w}
#pragma once

#include <cstdint>
#include <memory_resource>
#include <span>
#include <vector>

#include "hiertag/core/export/mapped_memory.h"

namespace hiertag {

using ValueId = uint64_t;
using Owner = int32_t;
inline constexpr Owner kNoOwner = -1;

// A pass graph's arrays live in mapped pages (mapped_memory.h): an observer
// fills them right after a torch pass freed many small objects, and a large
// heap allocation then would make glibc consolidate them (on deep graphs, a
// third of the cost of observing a pass).
template <typename T>
using PassArray = std::pmr::vector<T>;

struct PassGraph {
  static constexpr uint32_t kMade = UINT32_MAX;

  struct Node {
    uint32_t kind = 0;
    Owner owner = kNoOwner;
    uint64_t attributes = 0;  // 0 for a node without inputs: never compared (classify_rewrites.h)
    uint32_t before = kMade;  // in a graph after a pass: the node's index before it
    bool holds_graphs = false;
    bool is_return = false;
    bool constant_op = false;  // a Constant op (its output is a constant, never data)
  };

  PassArray<Node> nodes{MappedMemory()};
  // node i reads inputs[input_begin[i] .. input_begin[i + 1])
  PassArray<uint32_t> input_begin = PassArray<uint32_t>(1, 0, MappedMemory());
  PassArray<ValueId> inputs{MappedMemory()};
  // node i makes outputs[output_begin[i] .. output_begin[i + 1])
  PassArray<uint32_t> output_begin = PassArray<uint32_t>(1, 0, MappedMemory());
  PassArray<ValueId> outputs{MappedMemory()};
  PassArray<uint8_t> output_scalar{MappedMemory()};  // per output: a number or a tensor of rank 0 (layout ops keep it)
  PassArray<ValueId> graph_inputs{MappedMemory()};
  PassArray<uint8_t> graph_input_scalar{MappedMemory()};  // per graph input: a number or a tensor of rank 0

  size_t size() const { return nodes.size(); }
  std::span<const ValueId> InputsOf(uint32_t i) const {
    return {inputs.data() + input_begin[i], inputs.data() + input_begin[i + 1]};
  }
  std::span<const ValueId> OutputsOf(uint32_t i) const {
    return {outputs.data() + output_begin[i], outputs.data() + output_begin[i + 1]};
  }
  // Whether every output of node i is a number or a 0-d tensor (true for none).
  bool ScalarOutputs(uint32_t i) const;

  // Appends a node; `scalar[k]` says whether output k is scalar-like.
  void Add(const Node& node, std::span<const ValueId> node_inputs, std::span<const ValueId> node_outputs,
           std::span<const uint8_t> scalar);
  // Empties the graph, keeping its arrays' memory (an observer refills one per pass).
  void Clear();
};

// Whether a pass left the graph as it was: every node after it is the node
// at its index before it, reading and making the same values, and the graph
// inputs are the same (an attribute changed in place is left to the
// classification of a pass that also rewired something).
bool Unchanged(const PassGraph& before, const PassGraph& after);

}  // namespace hiertag
