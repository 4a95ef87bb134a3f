// Python hooks: installs hiertag into torch's TorchScript-based ONNX exporter.
//
// The only file that knows about Python. Its static initializer (run when
// libhiertag.so loads libhiertag_python.so, with the GIL held) first finds every
// function it hooks, then wraps them all, once per process. Every hook has one
// shape: it receives the function it replaces and the call's arguments, and
// with no export session (HIERTAG unset, empty or 0) calls straight through.
// The stages of a session, and hiertag's work in each, are in export_session.h;
// here is only the Python side:
// The TorchScript exporter is the module defining torch.onnx.utils.export
// (torch.onnx.utils in torch 2.4 to 2.8, torch.onnx._internal.torchscript_exporter
// .utils from 2.9 on): its functions are hooked there, where its export looks them
// up, and onnx_proto_utils is the module it calls _export_file through.
//   utils._setup_trace_module_map    reads the options, builds the module table
//                                    from named_modules(), gives each instance
//                                    its own scope name (scope_names.h), wraps
//                                    each module's forward (ModuleCalls)
//   torch._C.ScriptFunction.__call__ marks script-function calls while tracing
//   torch._C.Graph._export_onnx      plans the tagged file on torch's bytes
//   onnx_proto_utils._export_file    writes the planned chunks to torch's file
//   utils._reset_trace_module_map    ends the session (torch's finally), unwraps
//                                    every forward, prints the report
//   exporter._compat.export_compat   torch's default (dynamo) export: refused with
//                                    HIERTAG=1 before anything is written; where
//                                    that module cannot import (no onnxscript),
//                                    the dynamo exporter cannot run: no hook
//   the graph passes of the export   handed to the session's stages
// If this torch lacks a function hiertag hooks, nothing is wrapped: loading
// raises ImportError naming the torch version and the function, and HIERTAG=1
// exports fail with the same reason rather than run untagged.
#include <pybind11/eval.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind.h>

#include <chrono>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dynamo_hooks.h"
#include "hiertag/core/export/export_options.h"
#include "hiertag/core/export/scope_names.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/passes/mark_inlined_calls.h"
#include "hiertag/plugin/export_session.h"
#include "hiertag/plugin/install_markers.h"
#include "python_modules.h"

namespace py = pybind11;

namespace hiertag {
namespace {

using python::ReadOptions;
using python::ReadOptionsOrThrow;
using python::TorchVersion;

constexpr const char* kDynamoExporter = "torch.onnx._internal.exporter._compat";
constexpr const char* kDynamoCore = "torch.onnx._internal.exporter._core";
constexpr const char* kDynamoProgram = "torch.onnx._internal.exporter._onnx_program";
constexpr const char* kOnnxIrPasses = "onnx_ir.passes";
constexpr const char* kTorchOnnx = "torch.onnx";
// torch._C's function for the `hiertag` command's verbs (hiertag.unknown_torch_modules).
constexpr const char* kUnknownTorchModules = "_hiertag_unknown_torch_modules";
#ifndef HIERTAG_TORCH_VERSION
#define HIERTAG_TORCH_VERSION "unknown"
#endif

// The graph passes of the export (utils._optimize_graph, _model_to_graph) that
// may remove or merge nodes, observed with RecordRewrites. CSE has its own
// observer; the conversion and canonicalize return new graphs (scopes copied
// one to one); dead code elimination removes only unused nodes.
constexpr const char* kObservedPasses[] = {
    "_jit_pass_constant_propagation", "_jit_pass_peephole",
    "_jit_pass_fuse_addmm",           "_jit_pass_onnx_remove_inplace_ops_for_onnx",
    "_jit_pass_onnx_preprocess",      "_jit_pass_prepare_division_for_onnx",
    "_jit_pass_erase_number_types",   "_jit_pass_onnx_scalar_type_analysis",
    "_jit_pass_onnx_peephole",        "_jit_pass_onnx_eval_peephole",
    "_jit_pass_onnx_constant_fold",   "_jit_pass_onnx_graph_shape_type_inference",
};

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

// ---- The hooks: (the function each replaces, the call's arguments). ----

using Hook = py::object (*)(const py::object& original, py::args args, py::kwargs kwargs);

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

template <size_t kPass>
py::object ObservePass(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::Graph> graph = GraphArgument(args);
  if (!Session() || !graph) return original(*args, **kwargs);
  py::object result;
  Session()->ObservePass(*graph, kObservedPasses[kPass], [&] { result = original(*args, **kwargs); });
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

// ---- Installation ----

// Where a hooked function lives: a module (found when the plugin loads), or
// a class of it (then the hook is a method).
enum class Owner {
  kTorchC,              // torch._C
  kExporter,            // the TorchScript exporter's module (above)
  kExporterProtoUtils,  // the module the exporter writes files through
  kDynamoExporter,      // kDynamoExporter
  kDynamoCore,          // kDynamoCore
  kDynamoProgram,       // kDynamoProgram
  kOnnxIrPasses,        // kOnnxIrPasses
  kTorchOnnx,           // kTorchOnnx
};

py::object TorchScriptExporter() {
  py::object export_function = py::module_::import("torch.onnx.utils").attr("export");
  return py::module_::import("sys").attr("modules")[export_function.attr("__module__")];
}

py::object FindOwner(Owner owner) {
  switch (owner) {
    case Owner::kTorchC:
      return py::module_::import("torch._C");
    case Owner::kExporter:
      return TorchScriptExporter();
    case Owner::kExporterProtoUtils:
      return TorchScriptExporter().attr("onnx_proto_utils");
    case Owner::kDynamoExporter:
      return py::module_::import(kDynamoExporter);
    case Owner::kDynamoCore:
      return py::module_::import(kDynamoCore);
    case Owner::kDynamoProgram:
      return py::module_::import(kDynamoProgram);
    case Owner::kOnnxIrPasses:
      return py::module_::import(kOnnxIrPasses);
    case Owner::kTorchOnnx:
      return py::module_::import(kTorchOnnx);
  }
  throw std::logic_error("unknown owner");
}

// A function hiertag hooks: an attribute of `owner`, or of its class
// `owner_class` (then the hook is a method).
struct HookSite {
  Owner owner;
  const char* owner_class;  // nullptr: a module-level function
  const char* name;
  Hook hook;
  // The owner module may fail to import in a working environment (the dynamo
  // exporter without its optional dependency onnxscript, or a torch before
  // it): then there is nothing to hook. A module that imports but lacks the
  // function still fails.
  bool owner_may_be_absent = false;
  // One of the dynamo exporter's sites (dynamo_hooks.h): they are hooked all
  // together or not at all; a torch lacking one keeps its dynamo exporter
  // untouched, and HIERTAG=1 refuses it (DynamoIncapable).
  bool dynamo = false;
  // A function only some torch releases have (their older dynamo exporter's entry).
  bool function_may_be_absent = false;
};

template <size_t... kPass>
void AddPassSites(std::vector<HookSite>* sites, std::index_sequence<kPass...>) {
  (sites->push_back({Owner::kTorchC, nullptr, kObservedPasses[kPass], ObservePass<kPass>}), ...);
}

std::vector<HookSite> HookSites() {
  std::vector<HookSite> sites = {
      {Owner::kExporter, nullptr, "_setup_trace_module_map", SetupTraceModuleMap},
      {Owner::kExporter, nullptr, "_reset_trace_module_map", ResetTraceModuleMap},
      {Owner::kExporterProtoUtils, nullptr, "_export_file", ExportFile},
      {Owner::kDynamoExporter, nullptr, "export_compat", python::DynamoExportCompat, /*owner_may_be_absent=*/true},
      {Owner::kDynamoCore, nullptr, "export", python::DynamoExport, true, true},
      {Owner::kDynamoCore, nullptr, "_prepare_exported_program_for_export", python::PrepareExportedProgram, true, true},
      {Owner::kDynamoCore, nullptr, "_exported_program_to_onnx_program", python::TranslateExportedProgram, true, true},
      {Owner::kDynamoProgram, "ONNXProgram", "optimize", python::OptimizeOnnxProgram, true, true},
      {Owner::kOnnxIrPasses, "PassBase", "__call__", python::RunOnnxPass, true, true},
      // torch 2.4's torch.onnx.export(..., dynamo=True): its older exporter, refused with HIERTAG=1.
      {Owner::kTorchOnnx, nullptr, "dynamo_export", python::DynamoExportCompat, false, false, true},
      {Owner::kTorchC, "ScriptFunction", "__call__", CallScriptFunction},
      {Owner::kTorchC, "Graph", "_export_onnx", ExportOnnx},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_function_substitution", SubstituteFunctions},
      {Owner::kTorchC, nullptr, "_jit_pass_cse", EliminateCommonSubexpression},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_eliminate_unused_items", EliminateUnusedItems},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_assign_scoped_names_for_node_and_value", AssignScopedNames},
  };
  AddPassSites(&sites, std::make_index_sequence<std::size(kObservedPasses)>());
  return sites;
}

// "torch.onnx.utils._setup_trace_module_map": how an error names a site.
std::string SiteName(const HookSite& site, const py::object& owner) {
  std::string module;
  if (owner && py::hasattr(owner, "__name__")) module = py::str(owner.attr("__name__"));
  if (module.empty()) {
    module = site.owner == Owner::kTorchC           ? "torch._C"
             : site.owner == Owner::kDynamoExporter ? kDynamoExporter
                                                    : "the TorchScript exporter";
  }
  return module + "." + (site.owner_class ? std::string(site.owner_class) + "." : "") + site.name;
}

void Install() {
  py::module_ c = py::module_::import("torch._C");
  if (py::hasattr(c, kInstalledMarker)) return;
  std::vector<HookSite> sites = HookSites();
  // Find every function first: a torch that lacks one is left exactly as it was.
  std::vector<py::object> owners;
  std::vector<HookSite> present;
  bool dynamo_complete = true;
  for (const HookSite& site : sites) {
    py::object module;
    py::object owner;
    try {
      module = FindOwner(site.owner);
      owner = site.owner_class ? module.attr(site.owner_class) : module;
    } catch (py::error_already_set& error) {
      if (site.owner_may_be_absent && (error.matches(PyExc_ImportError) || site.dynamo)) {
        dynamo_complete = dynamo_complete && !site.dynamo;
        continue;
      }
      owner = py::object();
    }
    if (!owner || !py::hasattr(owner, site.name)) {
      if (owner && site.function_may_be_absent) continue;
      if (site.dynamo) {
        dynamo_complete = false;
        continue;
      }
      throw std::runtime_error("torch " + TorchVersion() + " has no " + SiteName(site, module) +
                               " (hiertag was built for torch " HIERTAG_TORCH_VERSION ")");
    }
    owners.push_back(owner);
    present.push_back(site);
  }
  // The dynamo exporter's sites together or not at all.
  sites.clear();
  std::vector<py::object> kept_owners;
  for (size_t i = 0; i < present.size(); ++i) {
    if (present[i].dynamo && !dynamo_complete) continue;
    sites.push_back(present[i]);
    kept_owners.push_back(owners[i]);
  }
  owners = std::move(kept_owners);
  if (dynamo_complete) python::NoteDynamoHooksInstalled(FindOwner(Owner::kDynamoCore).attr("export"));
  python::WrappedForwards::Install();
  for (size_t i = 0; i < sites.size(); ++i) {
    const HookSite& site = sites[i];
    py::object original = owners[i].attr(site.name);
    Hook hook = site.hook;
    auto call = [original, hook](py::args args, py::kwargs kwargs) { return hook(original, args, kwargs); };
    owners[i].attr(site.name) = site.owner_class ? py::cpp_function(call, py::name(site.name), py::is_method(owners[i]))
                                                 : py::cpp_function(call, py::name(site.name));
  }
  // The names of a HIERTAG_TORCH_MODULES value that no torch.nn / torch.ao class
  // has, found as an export finds them; ValueError with the core's reason for a
  // malformed value. The `hiertag` command's verbs parse their option once
  // with it, and word what they find themselves.
  c.attr(kUnknownTorchModules) = py::cpp_function(
      [](const std::string& text) {
        std::string error;
        std::optional<TorchModuleSegments> segments = ParseTorchModuleSegments(text, &error);
        if (!segments) throw py::value_error(error);
        py::list names;
        for (const std::string& name : python::UnknownTorchModules(*segments)) names.append(name);
        return names;
      },
      py::name(kUnknownTorchModules));
  c.attr(kInstalledMarker) = true;
}

// A torch hiertag cannot hook: HIERTAG=1 exports fail with the reason instead
// of running untagged; other exports run as torch's own.
void GuardExportsAfterFailure(const std::string& reason) {
  py::module_ c = py::module_::import("torch._C");
  if (py::hasattr(c, kInstallFailureMarker)) return;
  c.attr(kInstallFailureMarker) = reason;
  py::module_ onnx = py::module_::import("torch.onnx");
  py::object export_function = onnx.attr("export");
  std::string message = "hiertag: not installed (" + reason + "); HIERTAG=1 cannot tag this export";
  onnx.attr("export") = py::cpp_function(
      [export_function, message](py::args args, py::kwargs kwargs) {
        std::string error;
        std::optional<ExportOptions> options = ReadOptions(&error);
        if (!options || options->tag) throw std::runtime_error(message);
        return export_function(*args, **kwargs);
      },
      py::name("export"));
}

struct InstallAtLoad {
  InstallAtLoad() {
    if (!Py_IsInitialized()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    try {
      Install();
    } catch (const std::exception& error) {
      std::string reason = error.what();
      PyErr_Clear();
      try {
        GuardExportsAfterFailure(reason);
      } catch (const std::exception&) {
        PyErr_Clear();
      }
      PySys_WriteStderr("hiertag: plugin not installed: %.400s\n", reason.c_str());
      // The loader (torch.ops.load_library through ctypes) holds this thread's
      // state and raises this error when the library's initializers return.
      PyErr_SetString(PyExc_ImportError, ("hiertag: plugin not installed: " + reason).c_str());
    }
    PyGILState_Release(gil);
  }
} install_at_load;

}  // namespace
}  // namespace hiertag
