// ValueGraph: one model's main graph as `hiertag carry`'s correspondence reads
// it (python/hiertag/verbs/carry/correspondence.py): each value by name, the
// node making it, the nodes reading it and at which input, each node's reads
// with weights left out, and which values each node is computed from.
//
//   values     the graph's inputs, its initializers and the nodes' outputs.
//   weights    initializers and the outputs of weight nodes (WeightNodes,
//              module_boundaries.h): data of no call.
//   reads      a node's non-empty inputs, then the outer values its If/Loop
//              bodies read (NodeReads), weights left out, repeats kept.
//   consumers  of a value: (node, input position) for each input naming it,
//              then (node, kNoPosition) for each outer read by a body.
//   descends   node N descends from value V when N makes V, reads it, or reads
//              a value made by a node descending from it; weights carry no
//              descent. Answered by searching back from N, no further than V's
//              maker in a topological order, so memory stays linear in the
//              graph (a bitmask of ancestors per node is quadratic: about 1 GB
//              at 100k nodes); descent from the graph inputs (weights aside),
//              being few, is kept per node as a mask.
//
// Nodes are numbered in the main graph's order, 0 to node_count() - 1 (not
// OnnxModel's pre-order, which counts nested nodes). The graph holds its own
// copy of each name, once, and no reference to the model: the model's bytes
// may be let go once it is built.
#pragma once

#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

class ValueGraph {
 public:
  static constexpr int kNone = -1;        // no such value, no producer
  static constexpr int kNoPosition = -1;  // a consumer reading through a nested graph

  struct Consumer {
    int node;
    int position;  // the input's position, or kNoPosition
  };

  explicit ValueGraph(const OnnxModel& model);
  ValueGraph(const ValueGraph&) = delete;  // names_ and ids_ are views of arena_
  ValueGraph& operator=(const ValueGraph&) = delete;

  int node_count() const { return static_cast<int>(node_reads_.size()) - 1; }
  int value_count() const { return static_cast<int>(names_.size()); }

  // The id of a name the graph mentions (a value, or a name only read), or kNone.
  int Id(std::string_view name) const;
  std::string_view Name(int id) const { return names_[id]; }

  bool IsValue(int id) const { return flags_[id] & kValue; }
  bool IsWeight(int id) const { return flags_[id] & kWeight; }
  bool IsInitializer(int id) const { return flags_[id] & kInitializer; }
  int Producer(int id) const { return producer_[id]; }
  std::span<const Consumer> Consumers(int id) const;

  // Ids, in the graph's order.
  const std::vector<int>& inputs() const { return inputs_; }
  const std::vector<int>& outputs() const { return outputs_; }
  std::span<const int> Reads(int node) const;
  // The node's non-empty outputs something reads or the graph hands out; all
  // of its non-empty outputs when none is.
  std::vector<int> UsedOutputs(int node) const;
  std::span<const int> Outputs(int node) const;

  // A graph input or a value some node makes (not a weight alone).
  bool Known(int id) const;
  bool Descends(int node, int value) const;
  // Those of `nodes` that descend from any of `values`.
  std::set<int> Descending(const std::set<int>& nodes, const std::vector<int>& values) const;
  // The nodes `end` descends from, itself included, that descend from `earliest`.
  std::set<int> Between(int earliest, int end) const;

 private:
  enum Flag : uint8_t { kValue = 1, kWeight = 2, kInitializer = 4, kOutput = 8 };

  // The nodes `start` descend from, themselves included, at or after topological position `lowest`.
  std::set<int> Upstream(int start, int lowest) const;
  bool FromInput(int node, int bit) const;
  void PlaceTopologically();

  std::string arena_;                              // every name, once
  std::vector<std::string_view> names_;            // by id, views of arena_
  std::unordered_map<std::string_view, int> ids_;  // by name, views of arena_
  std::vector<uint8_t> flags_;                     // by id
  std::vector<int> producer_;                      // by id
  std::vector<int> consumer_start_;                // by id: its consumers in consumers_
  std::vector<Consumer> consumers_;
  std::vector<int> node_reads_;  // by node: its reads in reads_
  std::vector<int> reads_;
  std::vector<int> node_outputs_;  // by node: its non-empty outputs in outputs_of_
  std::vector<int> outputs_of_;
  std::vector<int> inputs_;
  std::vector<int> outputs_;
  std::unordered_map<int, int> input_bit_;  // non-weight graph inputs no node makes
  std::vector<int> position_;               // by node: its place in a topological order
  int mask_words_ = 0;
  std::vector<uint64_t> from_inputs_;  // by node, mask_words_ each: the input bits it descends from
};

}  // namespace hiertag
