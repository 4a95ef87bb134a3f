// Dynamo hooks: hiertag in torch's dynamo (torch.export-based) ONNX exporter.
// Plugin-internal; knows Python. The stages of a tagged export, and hiertag's
// work in each, are in dynamo_session.h; python_hooks.cpp installs these
// hooks where the running torch keeps the functions (when its exporter has
// them), each receiving the function it replaces and the call's arguments:
//
//   _core.export                          with HIERTAG=1: reads the module table,
//                                         wraps every forward (the root's too) to
//                                         record its calls and annotate the FX
//                                         nodes they make (torch.fx.traceback
//                                         .annotate, under preserve_node_meta),
//                                         runs the export, tags the ONNX model
//   _core._prepare_exported_program_for_export
//                                         before the decompositions: a region torch
//                                         made a higher-order op of after the trace
//                                         (torch.no_grad(), autocast) carries the call
//                                         its nodes were made in, which the
//                                         decompositions copy when they inline it
//   _core._exported_program_to_onnx_program
//                                         each ONNX node's call read from its FX node
//                                         (ir_node.meta["node"].meta["custom"])
//   onnx_ir PassBase.__call__             every pass of the ONNX optimizer observed
//   ONNXProgram.optimize                  a user's later optimize() observed, and the
//                                         model tagged again
//   _compat.export_compat                 refuses HIERTAG=1 where this torch's
//                                         exporter lacks what exact tags need
#pragma once

#include <pybind11/pybind11.h>

#include <optional>
#include <string>

namespace hiertag {
namespace python __attribute__((visibility("hidden"))) {

  namespace py = pybind11;

  py::object DynamoExport(const py::object& original, py::args args, py::kwargs kwargs);
  py::object PrepareExportedProgram(const py::object& original, py::args args, py::kwargs kwargs);
  py::object TranslateExportedProgram(const py::object& original, py::args args, py::kwargs kwargs);
  py::object RunOnnxPass(const py::object& original, py::args args, py::kwargs kwargs);
  py::object OptimizeOnnxProgram(const py::object& original, py::args args, py::kwargs kwargs);
  py::object DynamoExportCompat(const py::object& original, py::args args, py::kwargs kwargs);

  // Notes that the hooks of _core.export (`core_export`: torch's own), the
  // preparation, the translation and the passes are installed (they all are,
  // or none is).
  void NoteDynamoHooksInstalled(const py::handle& core_export);

  // Why HIERTAG=1 cannot tag this torch's dynamo exporter, or nullopt when it can.
  std::optional<std::string> DynamoIncapable();

}  // namespace python
}  // namespace hiertag
