// Pass graph: the flat arrays an observer fills.
#include "hiertag/core/rewrites/pass_graph.h"

#include <algorithm>

namespace hiertag {

bool PassGraph::ScalarOutputs(uint32_t i) const {
  return std::all_of(output_scalar.begin() + output_begin[i], output_scalar.begin() + output_begin[i + 1],
                     [](uint8_t scalar) { return scalar != 0; });
}

void PassGraph::Add(const Node& node, std::span<const ValueId> node_inputs, std::span<const ValueId> node_outputs,
                    std::span<const uint8_t> scalar) {
  nodes.push_back(node);
  inputs.insert(inputs.end(), node_inputs.begin(), node_inputs.end());
  input_begin.push_back(static_cast<uint32_t>(inputs.size()));
  outputs.insert(outputs.end(), node_outputs.begin(), node_outputs.end());
  output_scalar.insert(output_scalar.end(), scalar.begin(), scalar.end());
  output_scalar.resize(outputs.size(), 0);
  output_begin.push_back(static_cast<uint32_t>(outputs.size()));
}

void PassGraph::Clear() {
  nodes.clear();
  input_begin.assign(1, 0);
  inputs.clear();
  output_begin.assign(1, 0);
  outputs.clear();
  output_scalar.clear();
  graph_inputs.clear();
  graph_input_scalar.clear();
}

bool Unchanged(const PassGraph& before, const PassGraph& after) {
  if (before.size() != after.size() || before.graph_inputs != after.graph_inputs) return false;
  for (uint32_t i = 0; i < after.size(); ++i) {
    if (after.nodes[i].before != i || after.nodes[i].kind != before.nodes[i].kind) return false;
  }
  return before.inputs == after.inputs && before.input_begin == after.input_begin && before.outputs == after.outputs &&
         before.output_begin == after.output_begin;
}

}  // namespace hiertag
