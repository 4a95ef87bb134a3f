// onnx_ir reader: an onnx_ir model's graphs (the main graph and every graph a
// node holds) as the DynamoGraph the dynamo session observes, each node
// paired with the node it was at the reader's last read. Plugin-internal;
// knows Python.
//
// Identity is Python's: the reader holds a reference to every node, graph and
// value of its last read, so no object read then is freed and no address is
// reused while the next read is paired with it. Value ids count up over the
// reader's life and are never given to another value.
//
//   graph: x -> Transpose -> MatMul(., W) -> y          (W an initializer)
//   -> nodes {Transpose reads x}, {MatMul reads t, W}, {return reads y};
//      graph_inputs {x, W}, user_inputs 1
#pragma once

#include <pybind11/pybind11.h>

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "hiertag/plugin/dynamo_session.h"

namespace hiertag {
namespace python __attribute__((visibility("hidden"))) {

  namespace py = pybind11;

  class OnnxIrReader {
   public:
    // The owner of a node the reader has not read before (a pass made it).
    using MadeOwner = std::function<Owner(const py::handle& node)>;

    // Reads `model`'s graphs. A node read last time keeps its index there
    // (PassGraph::Node::before) and the owner `previous` gives it (the graph
    // the session noted of that read); any other node owns made_owner(node).
    DynamoGraph Read(const py::handle& model, const PassGraph* previous, const MadeOwner& made_owner);

    // Of the last read: the node at an index (a graph, for a graph's return),
    // and a value by id (null when it was not in the graph).
    const py::object& object(uint32_t index) const { return entries_.at(index); }
    py::object value(ValueId id) const;

    // Lets go of every object held.
    void Release();

   private:
    // The kind of a node of this domain and op type (its overload read here).
    uint32_t Kind(std::string_view domain, std::string_view op_type, const py::handle& node);
    ValueId IdOf(const py::handle& value);
    void ReadGraph(const py::handle& graph, uint32_t holder, DynamoGraph& read);

    const PassGraph* previous_ = nullptr;
    const MadeOwner* made_owner_ = nullptr;
    // The last read, and the one being made.
    std::vector<py::object> entries_, next_entries_;
    std::unordered_map<PyObject*, uint32_t> index_, next_index_;
    std::unordered_map<PyObject*, ValueId> value_ids_, next_value_ids_;
    std::vector<py::object> values_, next_values_;  // held, so no address is reused
    ValueId next_id_ = 1;                           // 0: a missing optional input
    std::unordered_map<std::string, uint32_t> kinds_;
  };

}  // namespace python
}  // namespace hiertag
