// hiertag._core.ValueGraph: carry's graph tables and descent in the core
// (core/carry/value_graph.h), by name for the Python side of the
// correspondence (hiertag/verbs/carry/correspondence.py). A name the graph
// never mentions has no maker, no readers, and nothing descends from it.
#include "bindings/value_graph_binding.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "hiertag/core/carry/value_graph.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hiertag {
namespace {

std::vector<std::string_view> NamesOf(const ValueGraph& graph, std::span<const int> ids) {
  std::vector<std::string_view> names;
  names.reserve(ids.size());
  for (int id : ids) names.push_back(graph.Name(id));
  return names;
}

std::set<std::string_view> NameSet(const ValueGraph& graph, bool (ValueGraph::*has)(int) const) {
  std::set<std::string_view> names;
  for (int id = 0; id < graph.value_count(); ++id) {
    if ((graph.*has)(id)) names.insert(graph.Name(id));
  }
  return names;
}

// `node`, or IndexError when the graph has no such node.
int NodeIn(const ValueGraph& graph, int node) {
  if (node < 0 || node >= graph.node_count()) throw nb::index_error("no such node in the main graph");
  return node;
}

}  // namespace

void BindValueGraph(nb::module_& m, OnnxModel (*model_of)(const nb::bytes&)) {
  nb::class_<ValueGraph>(m, "ValueGraph",
                         "One model's main graph as carry's correspondence reads it (core/carry/value_graph.h): "
                         "values, makers, readers, reads with weights left out, and descent. Nodes are numbered "
                         "in the main graph's order.")
      .def(
          "__init__", [model_of](ValueGraph* self, const nb::bytes& model) { new (self) ValueGraph(model_of(model)); },
          "model"_a, "From a serialized model (bytes); ValueError with the reader's reason.")
      .def_prop_ro("node_count", &ValueGraph::node_count)
      .def_prop_ro(
          "inputs", [](const ValueGraph& g) { return NamesOf(g, g.inputs()); },
          "The graph's inputs (initializers listed as inputs too), in order.")
      .def_prop_ro(
          "outputs", [](const ValueGraph& g) { return NamesOf(g, g.outputs()); }, "The graph's outputs, in order.")
      .def_prop_ro("initializers", [](const ValueGraph& g) { return NameSet(g, &ValueGraph::IsInitializer); })
      .def_prop_ro(
          "weights", [](const ValueGraph& g) { return NameSet(g, &ValueGraph::IsWeight); },
          "Initializers and the outputs of weight nodes.")
      .def(
          "made",
          [](const ValueGraph& g) {
            std::vector<std::string_view> names;
            for (int node = 0; node < g.node_count(); ++node) {
              for (int id : g.Outputs(node)) names.push_back(g.Name(id));
            }
            return names;
          },
          "The values nodes make, in node order.")
      .def(
          "has_value",
          [](const ValueGraph& g, std::string_view name) {
            int id = g.Id(name);
            return id != ValueGraph::kNone && g.IsValue(id);
          },
          "name"_a, "An input, an initializer or a node's output.")
      .def(
          "producer",
          [](const ValueGraph& g, std::string_view name) -> std::optional<int> {
            int id = g.Id(name);
            if (id == ValueGraph::kNone || g.Producer(id) == ValueGraph::kNone) return std::nullopt;
            return g.Producer(id);
          },
          "name"_a, "The node making the value, or None.")
      .def(
          "consumers",
          [](const ValueGraph& g, std::string_view name) {
            std::vector<std::tuple<int, std::optional<int>>> found;
            int id = g.Id(name);
            if (id == ValueGraph::kNone) return found;
            for (const ValueGraph::Consumer& c : g.Consumers(id)) {
              found.emplace_back(c.node,
                                 c.position == ValueGraph::kNoPosition ? std::nullopt : std::optional<int>(c.position));
            }
            return found;
          },
          "name"_a, "(node, input position) for each read, the position None for a nested graph's.")
      .def(
          "reads", [](const ValueGraph& g, int node) { return NamesOf(g, g.Reads(NodeIn(g, node))); }, "node"_a,
          "What the node reads, weights left out, repeats kept.")
      .def(
          "used_outputs",
          [](const ValueGraph& g, int node) {
            std::vector<int> ids = g.UsedOutputs(NodeIn(g, node));
            return NamesOf(g, ids);
          },
          "node"_a, "Its outputs something reads or the graph hands out; all of them when none is.")
      .def(
          "known", [](const ValueGraph& g, std::string_view name) { return g.Known(g.Id(name)); }, "name"_a,
          "A graph input or a value some node makes (not a weight alone).")
      .def(
          "descends",
          [](const ValueGraph& g, int node, std::string_view name) { return g.Descends(NodeIn(g, node), g.Id(name)); },
          "node"_a, "name"_a)
      .def(
          "descending",
          [](const ValueGraph& g, const nb::iterable& nodes, const nb::iterable& names) {
            std::set<int> asked;
            for (nb::handle node : nodes) asked.insert(NodeIn(g, nb::cast<int>(node)));
            std::vector<int> values;
            for (nb::handle name : names) values.push_back(g.Id(nb::cast<std::string_view>(name)));
            return g.Descending(asked, values);
          },
          "nodes"_a, "names"_a, "Those of `nodes` that descend from any of the values `names`.")
      .def(
          "between",
          [](const ValueGraph& g, std::string_view earliest, int end) {
            return g.Between(g.Id(earliest), NodeIn(g, end));
          },
          "earliest"_a, "end"_a, "The nodes `end` descends from, itself included, that descend from `earliest`.");
}

}  // namespace hiertag
