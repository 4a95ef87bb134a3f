// Python modules: what both exporters' hooks read of a model and do to it,
// over Python's C API (pybind11). Plugin-internal; knows Python.
//
//   ReadModelModules   the model's module instances as named_modules() yields
//                      them, the module table (ModuleTable) and the names of
//                      its parameters and buffers
//   WrappedForwards    every module's forward wrapped for one export, so each
//                      call (through __call__ or straight to .forward()) runs
//                      the export's ForwardCall; given back at its end
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "hiertag/core/export/export_options.h"
#include "hiertag/core/format/module_table.h"

// Hidden, as pybind11's own types are (their fields would otherwise be
// more visible than their types).
namespace hiertag {
namespace python __attribute__((visibility("hidden"))) {

  namespace py = pybind11;

  // The interned Python string of `text`, with a reference kept for the
  // process. Each call makes the string and looks it up again: call it once
  // and keep the handle (a static), never per use on a hot path.
  py::handle Interned(const char* text);

  // The options of this export, from the environment (HIERTAG, HIERTAG_TORCH_MODULES, ...).
  std::optional<ExportOptions> ReadOptions(std::string * error);
  ExportOptions ReadOptionsOrThrow();
  std::string TorchVersion();

  // The names of the list that are no torch.nn / torch.ao class (core's UnknownTorchModules).
  std::vector<std::string> UnknownTorchModules(const TorchModuleSegments& segments);
  // Those names, on stderr (core's UnknownTorchModulesNote, naming HIERTAG_TORCH_MODULES).
  void WarnOfUnknownTorchModules(const TorchModuleSegments& segments);

  struct ModelModules {
    ModuleTable table;  // finalized
    std::unordered_set<std::string> member_names;
    std::vector<py::object> instances;  // by module index
  };

  // The model's modules in named_modules() order, the root first, each with its
  // class's qualified and short name (a scripted module's from TorchScript), and
  // whether it keeps a segment (options.torch_modules). `added(index, module)`
  // is called as each is added.
  ModelModules ReadModelModules(const py::handle& model, const ExportOptions& options,
                                const std::function<void(int, const py::object&)>& added = {});

  // What a wrapped forward runs while its export records calls: `module` is the
  // module's index in that export, `original` the forward it wraps.
  using ForwardCall = std::function<py::object(int module, const py::handle& self, const py::object& original,
                                               const py::args& args, const py::kwargs& kwargs)>;

  // One export's wrapped forwards (one export at a time per process; the GIL
  // serialises every access). Each wrapper is a functools.partial subclass in
  // the instance __dict__, `__wrapped__` set so that inspect.signature reads the
  // module's own; copied, deep-copied and pickled as the forward it wraps. A
  // wrapper the model keeps past its export (`self.f = child.forward`) runs, in
  // a later export, the forward it holds, recorded as a call of that module as
  // the later export numbers it, or unrecorded if the module is not part of the
  // model exported then.
  class WrappedForwards {
   public:
    // Makes the wrapper's class and function (once, when the plugin installs).
    static void Install();
    // Starts an export's wrapping: its wrapped forwards run `call`.
    static WrappedForwards& Begin(ForwardCall call);
    // The wrapping under way, or nullptr.
    static WrappedForwards* Active();
    // Gives every wrapped module its own forward back (or none) and ends the
    // wrapping; a no-op without one.
    static void End();

    // Wraps `module`'s forward; `index` is its module index in this export.
    // `python_code`: the wrapper's function is Python code calling the wrapper
    // (one frame more per call), for the root of an export that reads its
    // forward's code object.
    void Wrap(const py::handle& module, int index, bool python_code = false);

    uint64_t generation() const { return generation_; }
    // The index this export gave `module`, or -1 when it did not wrap it.
    int IndexNow(const py::handle& module);
    const ForwardCall& call() const { return call_; }

   private:
    struct Wrapped {
      py::object module;
      py::object own_forward;  // null: the instance had no forward attribute of its own
      int index = -1;
    };
    uint64_t generation_ = 0;
    ForwardCall call_;
    std::vector<Wrapped> wrapped_;
    std::unordered_map<PyObject*, int> index_of_module_;  // made at the first call of an earlier export's wrapper
  };

}  // namespace python
}  // namespace hiertag
