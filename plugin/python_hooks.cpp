// Python hooks: installs hiertag into torch's ONNX exporters.
//
// Its static initializer (run when libhiertag.so loads libhiertag_python.so,
// with the GIL held) first finds every function it hooks, then wraps them all,
// once per process. Every hook has one shape: it receives the function it
// replaces and the call's arguments. The hooks themselves are the TorchScript
// exporter's (torchscript_hooks.h: the module map, the graph passes, the file)
// and the dynamo exporter's (dynamo_hooks.h: the export, the translation, the
// optimizer's passes), and, where this torch's dynamo exporter lacks what exact
// tags need, its entry refused with HIERTAG=1 (exporter._compat.export_compat).
// If this torch lacks a function hiertag hooks, nothing is wrapped: loading
// raises ImportError naming the torch version and the function, and HIERTAG=1
// exports fail with the same reason rather than run untagged
// (install_markers.h: hiertag._why_not_installed reads it).
#include <pybind11/eval.h>

#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dynamo_hooks.h"
#include "hiertag/core/export/export_options.h"
#include "hiertag/plugin/install_markers.h"
#include "python_modules.h"
#include "torchscript_hooks.h"

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

// Where a hooked function lives: a module (found when the plugin loads), or
// a class of it (then the hook is a method).
enum class Owner {
  kTorchC,              // torch._C
  kExporter,            // the TorchScript exporter's module (torchscript_hooks.h)
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
// Every hook has one shape: the function it replaces, and the call's arguments.
using Hook = py::object (*)(const py::object& original, py::args args, py::kwargs kwargs);

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
  (sites->push_back({Owner::kTorchC, nullptr, python::kObservedPasses[kPass], python::ObserveListedPass<kPass>}), ...);
}

std::vector<HookSite> HookSites() {
  std::vector<HookSite> sites = {
      {Owner::kExporter, nullptr, "_setup_trace_module_map", python::SetupTraceModuleMap},
      {Owner::kExporter, nullptr, "_reset_trace_module_map", python::ResetTraceModuleMap},
      {Owner::kExporterProtoUtils, nullptr, "_export_file", python::ExportFile},
      {Owner::kDynamoExporter, nullptr, "export_compat", python::DynamoExportCompat, /*owner_may_be_absent=*/true},
      {Owner::kDynamoCore, nullptr, "export", python::DynamoExport, true, true},
      {Owner::kDynamoCore, nullptr, "_prepare_exported_program_for_export", python::PrepareExportedProgram, true, true},
      {Owner::kDynamoCore, nullptr, "_exported_program_to_onnx_program", python::TranslateExportedProgram, true, true},
      {Owner::kDynamoProgram, "ONNXProgram", "optimize", python::OptimizeOnnxProgram, true, true},
      {Owner::kOnnxIrPasses, "PassBase", "__call__", python::RunOnnxPass, true, true},
      // torch 2.4's torch.onnx.export(..., dynamo=True): its older exporter, refused with HIERTAG=1.
      {Owner::kTorchOnnx, nullptr, "dynamo_export", python::DynamoExportCompat, false, false, true},
      {Owner::kTorchC, "ScriptFunction", "__call__", python::CallScriptFunction},
      {Owner::kTorchC, "Graph", "_export_onnx", python::ExportOnnx},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_function_substitution", python::SubstituteFunctions},
      {Owner::kTorchC, nullptr, "_jit_pass_cse", python::EliminateCommonSubexpression},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_eliminate_unused_items", python::EliminateUnusedItems},
      {Owner::kTorchC, nullptr, "_jit_pass_onnx_assign_scoped_names_for_node_and_value", python::AssignScopedNames},
  };
  AddPassSites(&sites, std::make_index_sequence<std::size(python::kObservedPasses)>());
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
