// TorchScript hooks (torchscript_hooks.h): the export session a tagged
// TorchScript export runs in, and what each hook hands it.
#include "torchscript_hooks.h"

#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "hiertag/core/export/export_options.h"
#include "hiertag/core/export/scope_names.h"
#include "hiertag/passes/mark_inlined_calls.h"
#include "hiertag/plugin/export_session.h"
#include "python_modules.h"

namespace hiertag {
namespace python {
namespace {

// The session and what the Python side holds for it.
struct PythonSession {
  std::unique_ptr<ExportSession> session;
  std::vector<std::string> scope_names;  // module index -> the scope name its calls record
  py::object planned_bytes;              // torch's serialized model the plan borrows from
};

// One export runs at a time per process (torch's exporter keeps global state
// too); the GIL serialises every access.
std::optional<PythonSession>& Current() {
  static auto* current = new std::optional<PythonSession>();
  return *current;
}

ExportSession* Session() { return Current() ? Current()->session.get() : nullptr; }

// The tensors of a call's arguments or result: containers flattened, and a
// function passed as an argument brings the tensors it closes over
// (`lambda x: self.attn(x, x, x, mask)` hands the callee `mask`).
void FlattenTensors(const py::handle& value, std::vector<at::Tensor>* out, int depth = 0) {
  if (depth > 8) return;
  if (THPVariable_Check(value.ptr())) {
    out->push_back(THPVariable_Unpack(value.ptr()));
  } else if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    for (py::handle item : value) FlattenTensors(item, out, depth + 1);
  } else if (py::isinstance<py::dict>(value)) {
    for (auto item : value.cast<py::dict>()) FlattenTensors(item.second, out, depth + 1);
  } else if (PyFunction_Check(value.ptr())) {
    PyObject* closure = PyFunction_GetClosure(value.ptr());
    if (closure == nullptr) return;
    for (py::handle cell : py::reinterpret_borrow<py::tuple>(closure)) {
      PyObject* contents = PyCell_Get(cell.ptr());
      if (contents == nullptr) {
        PyErr_Clear();  // an empty cell
        continue;
      }
      FlattenTensors(py::reinterpret_steal<py::object>(contents), out, depth + 1);
    }
  } else if (py::isinstance(value, py::module_::import("functools").attr("partial"))) {
    FlattenTensors(value.attr("args"), out, depth + 1);
    FlattenTensors(value.attr("keywords"), out, depth + 1);
  }
}

// What a module's forward does during a tagged TorchScript export: every
// call, through __call__ or straight to .forward(), passes ModuleCalls.
py::object CallForward(int module, const py::handle& self, const py::object& original, const py::args& args,
                       const py::kwargs& kwargs) {
  ExportSession* session = Session();
  if (session == nullptr) return original(*args, **kwargs);
  PythonSession& current = *Current();
  std::vector<at::Tensor> inputs;
  FlattenTensors(args, &inputs);
  FlattenTensors(kwargs, &inputs);
  session->MaybeFailAt("trace");
  ModuleCalls::Entered entered = session->calls().Enter(module, current.scope_names.at(module), std::move(inputs));
  py::object result;
  try {
    result = original(*args, **kwargs);
  } catch (...) {
    session->calls().Exit(entered, false, {}, session->borrowed());
    throw;
  }
  std::vector<at::Tensor> returned;
  FlattenTensors(result, &returned);
  session->calls().Exit(entered, true, returned, session->borrowed());
  return result;
}

void EndSession() {
  if (!Current()) return;
  python::WrappedForwards::End();
  Current().reset();
}

// Builds the session from named_modules(). With `trace_module_map` (a traced
// export), also gives each module instance a scope name of its own
// (scope_names.h), which the tracer pushes at every module call, and wraps
// every module's forward but the root's (the tracer calls the root itself, and
// the exporter reads its signature) to record its calls.
void BeginSession(const py::handle& model, py::object trace_module_map, ExportOptions options) {
  python::WarnOfUnknownTorchModules(options.torch_modules);
  Current().emplace();
  PythonSession& current = *Current();
  python::WrappedForwards& forwards = python::WrappedForwards::Begin(&CallForward);
  InstanceScopeSymbols scope_symbols;
  python::ModelModules modules = python::ReadModelModules(model, options, [&](int index, const py::object& module) {
    if (trace_module_map.is_none()) return;
    // The module's scope name in the map, if it is there: one subscript (the
    // map's `in` would call its __contains__ method from Python).
    py::object name = py::reinterpret_steal<py::object>(PyObject_GetItem(trace_module_map.ptr(), module.ptr()));
    if (!name) {
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw py::error_already_set();
      PyErr_Clear();
      return;
    }
    std::string instance_name = MarkInstanceScopeName(index, name.cast<std::string>());
    trace_module_map[module] = instance_name;
    scope_symbols.Add(index, instance_name);
    if (index == 0) return;
    forwards.Wrap(module, index);
    if (current.scope_names.size() <= static_cast<size_t>(index)) current.scope_names.resize(index + 1);
    current.scope_names[index] = std::string(ScopeNameAsRecorded(instance_name));
  });
  current.session = std::make_unique<ExportSession>(std::move(modules.table), std::move(modules.member_names),
                                                    std::move(options), std::move(scope_symbols));
  current.session->MaybeFailAt("module-map");
}

std::shared_ptr<torch::jit::Graph> GraphArgument(const py::args& args) {
  if (args.size() == 0 || !py::isinstance(args[0], py::module_::import("torch._C").attr("Graph"))) return nullptr;
  return args[0].cast<std::shared_ptr<torch::jit::Graph>>();
}

std::string_view BytesView(const py::handle& bytes) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw py::error_already_set();
  return std::string_view(data, static_cast<size_t>(size));
}

}  // namespace

// ---- The hooks: (the function each replaces, the call's arguments). ----

py::object SetupTraceModuleMap(const py::object& original, py::args args, py::kwargs kwargs) {
  EndSession();
  ExportOptions options = ReadOptionsOrThrow();
  py::object model = args.size() > 0 ? py::reinterpret_borrow<py::object>(args[0])
                                     : py::reinterpret_borrow<py::object>(kwargs["model"]);
  if (options.tag) {
    py::object as_functions = args.size() > 1 ? py::reinterpret_borrow<py::object>(args[1])
                                              : kwargs.attr("get")("export_modules_as_functions", false);
    if (py::bool_(as_functions)) {
      throw py::value_error("hiertag: HIERTAG=1 does not support export_modules_as_functions; export without it");
    }
  }
  py::object result = original(*args, **kwargs);
  if (!options.tag) return result;
  // A scripted model is not traced: its nodes carry call stacks instead.
  bool scripted = py::isinstance(model, py::module_::import("torch").attr("jit").attr("ScriptModule"));
  py::object trace_module_map = py::none();
  if (!scripted) trace_module_map = py::module_::import("torch.jit._trace").attr("_trace_module_map");
  auto start = std::chrono::steady_clock::now();
  BeginSession(model, trace_module_map, std::move(options));
  Session()->AddOwnWork(ExportSession::Work::kSetUp, std::chrono::steady_clock::now() - start);
  return result;
}

py::object CallScriptFunction(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::tracer::TracingState> state = Session() ? torch::jit::tracer::getTracingState() : nullptr;
  if (!state) return original(*args, **kwargs);
  InsertCallMarker(*state->graph, CallMarker::kBegin);
  py::object result = original(*args, **kwargs);
  InsertCallMarker(*state->graph, CallMarker::kEnd);
  return result;
}

py::object SubstituteFunctions(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (!Session() || !graph) return original(*args, **kwargs);
  Session()->BeforeFunctionSubstitution(*graph);
  py::object result = original(*args, **kwargs);
  Session()->AfterFunctionSubstitution(*graph);
  return result;
}

py::object ObservePass(const char* pass, const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (!Session() || !graph) return original(*args, **kwargs);
  py::object result;
  Session()->ObservePass(*graph, pass, [&] { result = original(*args, **kwargs); });
  return result;
}

py::object EliminateCommonSubexpression(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (!Session() || !graph) return original(*args, **kwargs);
  py::object result;
  Session()->ObserveCse(*graph, [&] { result = original(*args, **kwargs); });
  return result;
}

// The exporter's final params_dict: its initializers are the trailing inputs.
py::object EliminateUnusedItems(const py::object& original, py::args args, py::kwargs kwargs) {
  py::object params = original(*args, **kwargs);
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (Session() && graph) Session()->NoteInitializers(*graph, py::len(params));
  return params;
}

py::object AssignScopedNames(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (!Session() || !graph) return original(*args, **kwargs);
  py::object result;
  Session()->TagFinalGraph(*graph, [&] { result = original(*args, **kwargs); });
  return result;
}

py::object ExportOnnx(const py::object& original, py::args args, py::kwargs kwargs) {
  if (!Session()) {
    if (ReadOptionsOrThrow().tag) {
      throw py::value_error(
          "hiertag: HIERTAG=1 tags exports of a torch.nn.Module or ScriptModule; this export's model is neither");
    }
    return original(*args, **kwargs);
  }
  py::tuple result = original(*args, **kwargs);
  Session()->PlanFile(BytesView(result[0]));
  Current()->planned_bytes = result[0];
  return result;
}

py::object ExportFile(const py::object& original, py::args args, py::kwargs kwargs) {
  if (!Session() || !Current()->planned_bytes || args.size() < 2) return original(*args, **kwargs);
  py::object model_bytes = py::reinterpret_borrow<py::object>(args[0]);
  // torch re-serializes the model when it adds onnxscript functions; the nodes
  // are the same, so plan again on the new bytes.
  if (!model_bytes.is(Current()->planned_bytes)) {
    Session()->PlanFile(BytesView(model_bytes));
    Current()->planned_bytes = model_bytes;
  }
  // A path is written beside the target and renamed into place once whole:
  // a failure leaves no half-written file (a file object is written as given).
  py::module_ os = py::module_::import("os");
  py::object target = args[1];
  bool is_path = py::isinstance<py::str>(target) || py::isinstance(target, os.attr("PathLike"));
  py::object destination = is_path ? py::object(os.attr("fspath")(target).attr("__add__")(".hiertag-partial")) : target;
  py::object open_file_like = py::module_::import("torch.serialization").attr("_open_file_like");
  try {
    py::object context = open_file_like(destination, "wb");
    py::object opened = context.attr("__enter__")();
    try {
      py::object write = opened.attr("write");
      Session()->WriteFile([&](std::string_view chunk) {
        write(py::memoryview::from_memory(chunk.data(), static_cast<py::ssize_t>(chunk.size())));
      });
    } catch (py::error_already_set& error) {
      context.attr("__exit__")(error.type(), error.value(), error.trace());
      throw;
    } catch (const std::exception&) {
      context.attr("__exit__")(py::none(), py::none(), py::none());
      throw;
    }
    context.attr("__exit__")(py::none(), py::none(), py::none());
    if (is_path) os.attr("replace")(destination, target);
  } catch (...) {
    if (is_path && py::bool_(os.attr("path").attr("exists")(destination))) os.attr("remove")(destination);
    throw;
  }
  Current()->planned_bytes = py::object();
  return py::none();
}

py::object ResetTraceModuleMap(const py::object& original, py::args args, py::kwargs kwargs) {
  if (Session()) {
    // Ending the session is hiertag's work too (the report counts it): the
    // forwards given back and the records let go of.
    auto start = std::chrono::steady_clock::now();
    python::WrappedForwards::End();
    Session()->AddOwnWork(ExportSession::Work::kRelease, std::chrono::steady_clock::now() - start);
    Session()->Release();
    if (Session()->options().report) {
      std::string line = Session()->ReportLine();
      if (!line.empty()) PySys_WriteStderr("%s", line.c_str());
    }
  }
  EndSession();
  return original(*args, **kwargs);
}

}  // namespace python
}  // namespace hiertag
