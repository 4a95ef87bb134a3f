// onnx_ir reader: nodes, values and owners, read over Python's C API.
#include "onnx_ir_reader.h"

#include <utility>

#include "python_modules.h"

namespace hiertag {
namespace python {
namespace {

// onnx_ir.AttributeType's values for a graph and a list of graphs.
constexpr long kGraphAttribute = 5;
constexpr long kGraphsAttribute = 10;
constexpr uint32_t kReturnKind = 0;  // the kind every graph's return has

// The attribute names read, each a Python string made once: a read asks
// for about fifteen per node.
struct Names {
  py::handle attributes = Interned("attributes"), data = Interned("data"), domain = Interned("domain"),
             graph = Interned("graph"), initializers = Interned("initializers"), inputs = Interned("inputs"),
             op_type = Interned("op_type"), outputs = Interned("outputs"), overload = Interned("overload"),
             shape = Interned("shape"), type = Interned("type"), value = Interned("value");
};

const Names& Name() {
  static const Names names;
  return names;
}

py::object Get(const py::handle& object, const py::handle& name) {
  PyObject* found = PyObject_GetAttr(object.ptr(), name.ptr());
  if (found == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(found);
}

std::string_view Text(const py::handle& text) {
  Py_ssize_t size = 0;
  const char* data = PyUnicode_Check(text.ptr()) ? PyUnicode_AsUTF8AndSize(text.ptr(), &size) : nullptr;
  if (data == nullptr) {
    PyErr_Clear();
    return {};
  }
  return {data, static_cast<size_t>(size)};
}

void Mix(uint64_t& hash, uint64_t value) { hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2); }

// A hash of an attribute's value: numbers and strings by value, lists by
// their items, tensors and graphs by identity (both sides of a comparison
// come from one process).
uint64_t HashValue(PyObject* value, int depth = 0) {
  if (PyLong_Check(value) || PyFloat_Check(value) || PyUnicode_Check(value) || PyBytes_Check(value) ||
      PyBool_Check(value)) {
    Py_hash_t hash = PyObject_Hash(value);
    if (hash == -1) PyErr_Clear();
    return static_cast<uint64_t>(hash);
  }
  if ((PyTuple_Check(value) || PyList_Check(value)) && depth < 4) {
    uint64_t hash = 0;
    Py_ssize_t size = PySequence_Fast_GET_SIZE(value);
    PyObject** items = PySequence_Fast_ITEMS(value);
    for (Py_ssize_t k = 0; k < size; ++k) Mix(hash, HashValue(items[k], depth + 1));
    Mix(hash, static_cast<uint64_t>(size));
    return hash;
  }
  return reinterpret_cast<uint64_t>(value);
}

bool IsScalar(const py::handle& value) {
  py::object shape = Get(value, Name().shape);
  if (shape.is_none()) return false;
  Py_ssize_t rank = PyObject_Length(shape.ptr());
  if (rank < 0) {
    PyErr_Clear();
    return false;
  }
  return rank == 0;
}

}  // namespace

uint32_t OnnxIrReader::Kind(std::string_view domain, std::string_view op_type, const py::handle& node) {
  std::string key(domain);
  key.push_back('\n');
  key.append(op_type);
  key.push_back('\n');
  key.append(Text(Get(node, Name().overload)));
  auto [found, added] = kinds_.try_emplace(std::move(key), static_cast<uint32_t>(kinds_.size() + 1));
  return found->second;
}

ValueId OnnxIrReader::IdOf(const py::handle& value) {
  if (value.is_none()) return 0;
  auto known = next_value_ids_.find(value.ptr());
  if (known != next_value_ids_.end()) return known->second;
  auto before = value_ids_.find(value.ptr());
  ValueId id = before != value_ids_.end() ? before->second : next_id_++;
  next_value_ids_.emplace(value.ptr(), id);
  next_values_.push_back(py::reinterpret_borrow<py::object>(value));
  return id;
}

void OnnxIrReader::ReadGraph(const py::handle& graph, uint32_t holder, DynamoGraph& read) {
  std::vector<ValueId> inputs, outputs;
  std::vector<uint8_t> scalar;
  py::object nodes = py::reinterpret_steal<py::object>(PyObject_GetIter(graph.ptr()));
  if (!nodes) throw py::error_already_set();
  while (PyObject* next = PyIter_Next(nodes.ptr())) {
    py::object node = py::reinterpret_steal<py::object>(next);
    uint32_t index = static_cast<uint32_t>(read.graph.size());
    next_entries_.push_back(node);
    next_index_[node.ptr()] = index;
    auto before = index_.find(node.ptr());
    PassGraph::Node entry;
    py::object op_type_text = Get(node, Name().op_type), domain_text = Get(node, Name().domain);
    std::string_view op_type = Text(op_type_text), domain = Text(domain_text);
    entry.kind = Kind(domain, op_type, node);
    entry.before = before == index_.end() || previous_ == nullptr ? PassGraph::kMade : before->second;
    entry.owner = entry.before != PassGraph::kMade ? previous_->nodes.at(entry.before).owner : (*made_owner_)(node);
    inputs.clear();
    outputs.clear();
    scalar.clear();
    for (py::handle input : Get(node, Name().inputs)) inputs.push_back(IdOf(input));
    for (py::handle output : Get(node, Name().outputs)) {
      outputs.push_back(IdOf(output));
      scalar.push_back(IsScalar(output));
    }
    uint64_t attributes = 0;
    std::vector<py::object> graphs;
    py::object attribute_dict = Get(Get(node, Name().attributes), Name().data);
    Py_ssize_t position = 0;
    PyObject *name = nullptr, *attribute = nullptr;
    while (PyDict_Next(attribute_dict.ptr(), &position, &name, &attribute)) {
      py::handle attr(attribute);
      long type = PyLong_AsLong(Get(attr, Name().type).ptr());
      if (type == -1 && PyErr_Occurred()) PyErr_Clear();
      py::object value = Get(attr, Name().value);
      Mix(attributes, HashValue(name));
      Mix(attributes, static_cast<uint64_t>(type));
      Mix(attributes, HashValue(value.ptr()));
      if (type == kGraphAttribute && !value.is_none()) graphs.push_back(value);
      if (type == kGraphsAttribute) {
        for (py::handle nested : value) graphs.push_back(py::reinterpret_borrow<py::object>(nested));
      }
    }
    entry.holds_graphs = !graphs.empty();
    entry.attributes = inputs.empty() && !entry.holds_graphs ? 0 : attributes;
    entry.constant_op = op_type == "Constant" && (domain.empty() || domain == "ai.onnx");
    read.graph.Add(entry, inputs, outputs, scalar);
    read.holders.push_back(holder);
    for (const py::object& nested : graphs) {
      for (py::handle input : Get(nested, Name().inputs)) read.nested_inputs.emplace_back(IdOf(input), index);
      ReadGraph(nested, index, read);
    }
  }
  if (PyErr_Occurred()) throw py::error_already_set();
  // The graph's return: reads its outputs.
  uint32_t index = static_cast<uint32_t>(read.graph.size());
  next_entries_.push_back(py::reinterpret_borrow<py::object>(graph));
  next_index_[graph.ptr()] = index;
  auto before = index_.find(graph.ptr());
  PassGraph::Node entry;
  entry.kind = kReturnKind;
  entry.is_return = true;
  entry.before = before == index_.end() || previous_ == nullptr ? PassGraph::kMade : before->second;
  inputs.clear();
  for (py::handle output : Get(graph, Name().outputs)) inputs.push_back(IdOf(output));
  read.graph.Add(entry, inputs, {}, {});
  read.holders.push_back(holder);
}

DynamoGraph OnnxIrReader::Read(const py::handle& model, const PassGraph* previous, const MadeOwner& made_owner) {
  previous_ = previous;
  made_owner_ = &made_owner;
  next_entries_.clear();
  next_index_.clear();
  next_value_ids_.clear();
  next_values_.clear();
  DynamoGraph read;
  py::object graph = Get(model, Name().graph);
  ReadGraph(graph, PassGraph::kMade, read);
  for (py::handle input : Get(graph, Name().inputs)) {
    read.graph.graph_inputs.push_back(IdOf(input));
    read.graph.graph_input_scalar.push_back(IsScalar(input));
  }
  read.user_inputs = read.graph.graph_inputs.size();
  py::object initializers = Get(Get(graph, Name().initializers), Name().data);
  Py_ssize_t position = 0;
  PyObject *name = nullptr, *value = nullptr;
  while (PyDict_Next(initializers.ptr(), &position, &name, &value)) {
    read.graph.graph_inputs.push_back(IdOf(value));
    read.graph.graph_input_scalar.push_back(IsScalar(value));
  }
  std::swap(entries_, next_entries_);
  std::swap(index_, next_index_);
  std::swap(value_ids_, next_value_ids_);
  std::swap(values_, next_values_);
  next_entries_.clear();
  next_index_.clear();
  next_value_ids_.clear();
  next_values_.clear();
  previous_ = nullptr;
  made_owner_ = nullptr;
  return read;
}

py::object OnnxIrReader::value(ValueId id) const {
  for (const auto& [object, known] : value_ids_) {
    if (known == id) return py::reinterpret_borrow<py::object>(object);
  }
  return py::object();
}

void OnnxIrReader::Release() {
  entries_.clear();
  index_.clear();
  value_ids_.clear();
  values_.clear();
}

}  // namespace python
}  // namespace hiertag
