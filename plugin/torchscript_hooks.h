// TorchScript hooks: hiertag in torch's TorchScript-based ONNX exporter
// (torch.onnx.export(..., dynamo=False)). Plugin-internal; knows Python. The
// stages of a session, and hiertag's work in each, are in export_session.h;
// python_hooks.cpp installs these hooks where the running torch keeps the
// functions, each receiving the function it replaces and the call's arguments,
// and with no export session (HIERTAG unset, empty or 0) calling straight
// through. The exporter is the module defining torch.onnx.utils.export
// (torch.onnx.utils in torch 2.4 to 2.8, torch.onnx._internal.torchscript_exporter
// .utils from 2.9 on); onnx_proto_utils is the module it calls _export_file through.
//
//   utils._setup_trace_module_map    reads the options, builds the module table
//                                    from named_modules(), gives each instance
//                                    its own scope name (scope_names.h), wraps
//                                    each module's forward (ModuleCalls)
//   torch._C.ScriptFunction.__call__ marks script-function calls while tracing
//   torch._C.Graph._export_onnx      plans the tagged file on torch's bytes
//   onnx_proto_utils._export_file    writes the planned chunks to torch's file
//   utils._reset_trace_module_map    ends the session (torch's finally), unwraps
//                                    every forward, prints the report
//   the graph passes of the export   handed to the session's stages
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>

namespace hiertag {
namespace python __attribute__((visibility("hidden"))) {

  namespace py = pybind11;

  // The graph passes of the export (utils._optimize_graph, _model_to_graph) that
  // may remove or merge nodes, observed with RecordRewrites. CSE has its own
  // observer; the conversion and canonicalize return new graphs (scopes copied
  // one to one); dead code elimination removes only unused nodes.
  inline constexpr const char* kObservedPasses[] = {
      "_jit_pass_constant_propagation", "_jit_pass_peephole",
      "_jit_pass_fuse_addmm",           "_jit_pass_onnx_remove_inplace_ops_for_onnx",
      "_jit_pass_onnx_preprocess",      "_jit_pass_prepare_division_for_onnx",
      "_jit_pass_erase_number_types",   "_jit_pass_onnx_scalar_type_analysis",
      "_jit_pass_onnx_peephole",        "_jit_pass_onnx_eval_peephole",
      "_jit_pass_onnx_constant_fold",   "_jit_pass_onnx_graph_shape_type_inference",
  };

  py::object SetupTraceModuleMap(const py::object& original, py::args args, py::kwargs kwargs);
  py::object ResetTraceModuleMap(const py::object& original, py::args args, py::kwargs kwargs);
  py::object CallScriptFunction(const py::object& original, py::args args, py::kwargs kwargs);
  py::object SubstituteFunctions(const py::object& original, py::args args, py::kwargs kwargs);
  py::object EliminateCommonSubexpression(const py::object& original, py::args args, py::kwargs kwargs);
  py::object EliminateUnusedItems(const py::object& original, py::args args, py::kwargs kwargs);
  py::object AssignScopedNames(const py::object& original, py::args args, py::kwargs kwargs);
  py::object ExportOnnx(const py::object& original, py::args args, py::kwargs kwargs);
  py::object ExportFile(const py::object& original, py::args args, py::kwargs kwargs);

  // Observes the graph pass `pass` (one of kObservedPasses) over the call.
  py::object ObservePass(const char* pass, const py::object& original, py::args args, py::kwargs kwargs);

  // ObservePass for kObservedPasses[kPass]: a hook of the one shape every hook has.
  template <size_t kPass>
  py::object ObserveListedPass(const py::object& original, py::args args, py::kwargs kwargs) {
    return ObservePass(kObservedPasses[kPass], original, std::move(args), std::move(kwargs));
  }

}  // namespace python
}  // namespace hiertag
