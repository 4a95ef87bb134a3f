// Python modules: the model's modules read, and their forwards wrapped.
#include "python_modules.h"

#include <pybind11/eval.h>

#include <cstdlib>
#include <memory>
#include <set>
#include <utility>

#include "hiertag/core/export/scope_names.h"

namespace hiertag::python {

// A Python string made once and kept for the process: an attribute name the
// set-up asks of every module (pybind11's attr("name") makes the string anew
// at each call).
py::handle Interned(const char* text) {
  PyObject* interned = PyUnicode_InternFromString(text);
  if (interned == nullptr) throw py::error_already_set();
  return interned;
}

namespace {

// The qualified names of the model's parameters and buffers: what
// model.named_parameters() and model.named_buffers() yield. Those walk
// named_modules() again, in Python; with torch's own methods (nn.Module's,
// not overridden, every module's _parameters and _buffers a dict) the names
// are read here from the modules the session's walk visits, in its order,
// each tensor once (the first name it has, as torch's memo keeps it) and
// None entries skipped, as torch does. Otherwise the methods are called.
class MemberNames {
 public:
  explicit MemberNames(const py::handle& model) : model_(model) {
    py::object module_class = py::module_::import("torch").attr("nn").attr("Module");
    py::handle model_class = reinterpret_cast<PyObject*>(Py_TYPE(model.ptr()));
    from_dicts_ = !py::isinstance(model, py::module_::import("torch").attr("jit").attr("ScriptModule"));
    for (const char* method : {"named_parameters", "named_buffers", "_named_members"}) {
      from_dicts_ = from_dicts_ && py::getattr(model_class, method, py::none()).is(module_class.attr(method));
    }
  }

  // Adds the members `module`, at `path` in the model, holds itself. Called
  // for each module named_modules() yields, in its order.
  void AddOwnMembers(const py::handle& module, const std::string& path) {
    static const py::handle kParameters = Interned("_parameters");
    static const py::handle kBuffers = Interned("_buffers");
    if (!from_dicts_) return;
    for (const py::handle& dict : {kParameters, kBuffers}) {
      py::object members = py::getattr(module, dict);
      if (!PyDict_CheckExact(members.ptr())) {
        from_dicts_ = false;
        return;
      }
      std::unordered_set<PyObject*>& seen = dict.is(kParameters) ? seen_parameters_ : seen_buffers_;
      Py_ssize_t position = 0;
      PyObject* key = nullptr;
      PyObject* value = nullptr;
      while (PyDict_Next(members.ptr(), &position, &key, &value)) {
        if (value == Py_None || !seen.insert(value).second) continue;
        Py_ssize_t size = 0;
        const char* text = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &size) : nullptr;
        if (text == nullptr) {  // not a str, or not encodable: what torch's methods do with it
          from_dicts_ = false;
          PyErr_Clear();
          return;
        }
        name_.assign(path);
        if (!path.empty()) name_.push_back('.');
        name_.append(text, static_cast<size_t>(size));
        names_.insert(name_);
      }
    }
  }

  std::unordered_set<std::string> Take() {
    if (!from_dicts_) {
      names_.clear();
      for (const char* members : {"named_parameters", "named_buffers"}) {
        for (py::handle item : model_.attr(members)()) names_.insert(item.cast<py::tuple>()[0].cast<std::string>());
      }
    }
    return std::move(names_);
  }

 private:
  py::handle model_;
  bool from_dicts_ = true;
  std::unordered_set<PyObject*> seen_parameters_;
  std::unordered_set<PyObject*> seen_buffers_;
  std::unordered_set<std::string> names_;
  std::string name_;  // a name being built
};

// nn.Module.named_modules as torch defined it, read when the plugin loads (a
// later patch of it is another method).
py::object& TorchNamedModules() {
  static auto* method = new py::object();
  return *method;
}

// What model.named_modules() yields, (path, module) in its order. Where
// torch's own method would run in every module met (its class's
// named_modules is torch's, not overridden, nor set on the instance, nor
// intercepted by a __getattribute__; each module's _modules a dict; identity
// hashing, which its memo set relies on) the modules' _modules dicts are
// walked here as it walks them: each module once, at the first path that
// reaches it, before its children; None entries skipped. Otherwise the
// method is called. (The generator's frames were a quarter of ResNet-50's set-up.)
class NamedModules {
 public:
  explicit NamedModules(const py::handle& model) {
    if (!TorchNamedModules() || !Walk(model, "")) {
      modules_.clear();
      for (py::handle item : model.attr("named_modules")()) {
        auto pair = item.cast<py::tuple>();
        modules_.emplace_back(pair[0].cast<std::string>(), py::reinterpret_borrow<py::object>(pair[1]));
      }
    }
  }

  std::vector<std::pair<std::string, py::object>>& modules() { return modules_; }

 private:
  // Whether a module's class walks its modules as torch's method does.
  bool TorchWalks(PyTypeObject* type) {
    static const py::handle kNamedModules = Interned("named_modules");
    static const py::handle kGetAttribute = Interned("__getattribute__");
    static const auto* kObjectGetAttribute =
        new py::object(py::getattr(reinterpret_cast<PyObject*>(&PyBaseObject_Type), kGetAttribute));
    auto [known, added] = torch_walks_.try_emplace(type, false);
    if (added) {
      py::handle type_object = reinterpret_cast<PyObject*>(type);
      known->second = py::getattr(type_object, kNamedModules, py::none()).is(TorchNamedModules()) &&
                      py::getattr(type_object, kGetAttribute).is(*kObjectGetAttribute) &&
                      type->tp_hash == PyBaseObject_Type.tp_hash &&
                      type->tp_richcompare == PyBaseObject_Type.tp_richcompare;
    }
    return known->second;
  }

  // Whether the instance sets a named_modules of its own.
  static bool OwnNamedModules(const py::handle& module) {
    static const py::handle kDict = Interned("__dict__");
    static const py::handle kNamedModules = Interned("named_modules");
    py::object own = py::getattr(module, kDict, py::none());
    if (!PyDict_Check(own.ptr())) return true;
    int found = PyDict_Contains(own.ptr(), kNamedModules.ptr());
    if (found < 0) throw py::error_already_set();
    return found == 1;
  }

  bool Walk(const py::handle& module, const std::string& path) {
    static const py::handle kModules = Interned("_modules");
    if (!TorchWalks(Py_TYPE(module.ptr())) || OwnNamedModules(module)) return false;
    if (!seen_.insert(module.ptr()).second) return true;
    modules_.emplace_back(path, py::reinterpret_borrow<py::object>(module));
    py::object children = py::getattr(module, kModules);
    if (!PyDict_CheckExact(children.ptr())) return false;
    Py_ssize_t position = 0;
    PyObject* key = nullptr;
    PyObject* child = nullptr;
    while (PyDict_Next(children.ptr(), &position, &key, &child)) {
      if (child == Py_None) continue;
      Py_ssize_t size = 0;
      const char* name = PyUnicode_Check(key) ? PyUnicode_AsUTF8AndSize(key, &size) : nullptr;
      if (name == nullptr) {  // not a str, or not encodable: as torch's method would take it
        PyErr_Clear();
        return false;
      }
      std::string child_path = path;
      if (!path.empty()) child_path.push_back('.');
      child_path.append(name, static_cast<size_t>(size));
      if (!Walk(child, child_path)) return false;
    }
    return true;
  }

  std::unordered_map<PyTypeObject*, bool> torch_walks_;
  std::unordered_set<PyObject*> seen_;
  std::vector<std::pair<std::string, py::object>> modules_;
};

// The wrapper's class and the function every wrapper calls (Install).
py::object& ForwardClass() {
  static auto* type = new py::object();
  return *type;
}
py::object& ForwardFunction() {
  static auto* function = new py::object();
  return *function;
}
// The same call behind a Python function (Install): a wrapper whose function
// has Python code, for a caller that reads it (torch.export's non-strict
// capture names its shape environment after the root forward's code).
py::object& ForwardTrampoline() {
  static auto* function = new py::object();
  return *function;
}

constexpr const char* kForwardClassSource = R"(
class HiertagForward(functools.partial):
    "A module's forward while hiertag records its calls (a tagged export)."
    __slots__ = ()

    def __copy__(self):
        return self.__wrapped__

    def __deepcopy__(self, memo):
        return copy.deepcopy(self.__wrapped__, memo)

    def __reduce_ex__(self, protocol):
        return self.__wrapped__.__reduce_ex__(protocol)


def hiertag_forward(call, *args, **kwargs):
    "A module's forward while hiertag records its calls, as Python code."
    return call(*args, **kwargs)
)";

std::unique_ptr<WrappedForwards>& ActiveWrapping() {
  static auto* active = new std::unique_ptr<WrappedForwards>();
  return *active;
}

// What a module's forward does: with a wrapping under way, its ForwardCall;
// else the forward it wraps. `generation` is the export that made the
// wrapper, `module` the module's index in it.
py::object CallForward(uint64_t generation, int module, const py::handle& self, const py::object& original,
                       py::args args, py::kwargs kwargs) {
  WrappedForwards* active = WrappedForwards::Active();
  if (active == nullptr) return original(*args, **kwargs);
  if (generation != active->generation()) {
    // A wrapper an earlier export left with the model (it kept
    // `child.forward`): its index means nothing now. It runs the forward it
    // holds, as the kept bound method would, recorded as a call of its
    // module as this export numbers it, or unrecorded when this export's
    // model does not hold the module.
    module = active->IndexNow(self);
    if (module < 0) return original(*args, **kwargs);
  }
  return active->call()(module, self, original, args, kwargs);
}

}  // namespace

std::optional<ExportOptions> ReadOptions(std::string* error) {
  return ReadExportOptions([](const char* name) { return std::getenv(name); }, error);
}

ExportOptions ReadOptionsOrThrow() {
  std::string error;
  std::optional<ExportOptions> options = ReadOptions(&error);
  if (!options) throw py::value_error(error);
  return *options;
}

std::string TorchVersion() { return py::str(py::module_::import("torch").attr("__version__")).cast<std::string>(); }

// Every torch.nn / torch.ao class is a subclass of torch.nn.Module, and
// `import torch` imports them all (torch.ao.nn too).
std::vector<std::string> UnknownTorchModules(const TorchModuleSegments& segments) {
  if (segments.classes.empty()) return {};
  py::module_ torch = py::module_::import("torch");
  py::object typename_of = torch.attr("typename");
  std::set<std::string, std::less<>> torch_classes;
  std::vector<py::object> work = {torch.attr("nn").attr("Module")};
  std::unordered_set<PyObject*> seen;
  while (!work.empty()) {
    py::object type = std::move(work.back());
    work.pop_back();
    if (!seen.insert(type.ptr()).second) continue;
    if (IsTorchModuleClass(typename_of(type).cast<std::string>())) {
      torch_classes.insert(type.attr("__name__").cast<std::string>());
    }
    for (py::handle subclass : type.attr("__subclasses__")()) {
      work.push_back(py::reinterpret_borrow<py::object>(subclass));
    }
  }
  return hiertag::UnknownTorchModules(segments, [&](std::string_view name) { return torch_classes.count(name) > 0; });
}

void WarnOfUnknownTorchModules(const TorchModuleSegments& segments) {
  std::string note = UnknownTorchModulesNote(UnknownTorchModules(segments), "HIERTAG_TORCH_MODULES");
  if (!note.empty()) py::module_::import("sys").attr("stderr").attr("write")("hiertag: " + note + "\n");
}

ModelModules ReadModelModules(const py::handle& model, const ExportOptions& options,
                              const std::function<void(int, const py::object&)>& added) {
  ModelModules result;
  py::module_ torch = py::module_::import("torch");
  py::object script_module = torch.attr("jit").attr("ScriptModule");
  py::object typename_of = torch.attr("typename");
  // A class's names, asked once per class (a model has few classes, many
  // instances); a scripted module's, of each instance.
  struct ClassNames {
    bool scripted = false;
    std::string qualified;
    std::string short_name;
  };
  std::unordered_map<PyTypeObject*, ClassNames> class_names;
  MemberNames members(model);
  NamedModules named_modules(model);
  for (auto& [path, module] : named_modules.modules()) {
    PyTypeObject* type = Py_TYPE(module.ptr());
    auto [names, fresh] = class_names.try_emplace(type);
    if (fresh) {
      names->second.scripted = py::isinstance(module, script_module);
      if (!names->second.scripted) {
        names->second.qualified = typename_of(py::handle(reinterpret_cast<PyObject*>(type))).cast<std::string>();
        names->second.short_name = py::handle(reinterpret_cast<PyObject*>(type)).attr("__name__").cast<std::string>();
      }
    }
    std::string qualified = names->second.qualified;
    std::string short_name = names->second.short_name;
    if (names->second.scripted) {
      qualified =
          UnmangleTorchScriptTypeName(module.attr("_c").attr("_type")().attr("qualified_name")().cast<std::string>());
      short_name = module.attr("original_name").cast<std::string>();
    }
    members.AddOwnMembers(module, path);
    int index =
        result.table.Add(path, qualified, short_name, options.torch_modules.KeepsSegment(qualified, short_name));
    result.instances.push_back(module);
    if (added) added(index, module);
  }
  result.table.Finalize();
  result.member_names = members.Take();
  return result;
}

void WrappedForwards::Install() {
  ForwardFunction() = py::cpp_function(&CallForward, py::name("_hiertag_forward"));
  py::dict scope;
  scope["__name__"] = "hiertag";
  scope["functools"] = py::module_::import("functools");
  scope["copy"] = py::module_::import("copy");
  py::exec(kForwardClassSource, scope);
  ForwardClass() = scope["HiertagForward"];
  ForwardTrampoline() = scope["hiertag_forward"];
  TorchNamedModules() = py::module_::import("torch").attr("nn").attr("Module").attr("named_modules");
}

WrappedForwards& WrappedForwards::Begin(ForwardCall call) {
  static uint64_t exports = 0;
  End();
  ActiveWrapping() = std::make_unique<WrappedForwards>();
  WrappedForwards& wrapping = *ActiveWrapping();
  wrapping.generation_ = ++exports;
  wrapping.call_ = std::move(call);
  return wrapping;
}

WrappedForwards* WrappedForwards::Active() { return ActiveWrapping().get(); }

int WrappedForwards::IndexNow(const py::handle& module) {
  if (index_of_module_.empty()) {
    for (const Wrapped& record : wrapped_) index_of_module_[record.module.ptr()] = record.index;
  }
  auto found = index_of_module_.find(module.ptr());
  return found == index_of_module_.end() ? -1 : found->second;
}

// Stands in for a module's forward: ForwardClass()(CallForward, generation,
// index, module, forward) in the instance __dict__, with __wrapped__ set
// (inspect.signature follows it to the original, as for functools.wraps). A
// partial, not an instance of a pybind11 class: pybind11 registers each
// instance of its classes in a table and unregisters it when freed: with the
// wrapper's creation and deallocation, about a fifth of ResNet-50's set-up and
// release (perf).
void WrappedForwards::Wrap(const py::handle& module, int index, bool python_code) {
  static const py::handle kDict = Interned("__dict__");
  static const py::handle kForward = Interned("forward");
  static const py::handle kWrapped = Interned("__wrapped__");
  py::dict own = py::getattr(module, kDict);
  PyObject* own_forward = PyDict_GetItemWithError(own.ptr(), kForward.ptr());  // borrowed
  if (own_forward == nullptr && PyErr_Occurred()) throw py::error_already_set();
  Wrapped record{py::reinterpret_borrow<py::object>(module), py::reinterpret_borrow<py::object>(own_forward), index};
  py::object forward = py::getattr(module, kForward);
  // A wrapper an earlier export left in its place (the model set a kept
  // `forward` back) is not wrapped again: the two would call each other.
  while (py::isinstance(forward, ForwardClass())) forward = py::getattr(forward, kWrapped);
  py::object wrapper = python_code
                           ? ForwardClass()(ForwardTrampoline(), ForwardFunction(), generation_, index, module, forward)
                           : ForwardClass()(ForwardFunction(), generation_, index, module, forward);
  if (PyObject_SetAttr(wrapper.ptr(), kWrapped.ptr(), forward.ptr()) != 0 ||
      PyDict_SetItem(own.ptr(), kForward.ptr(), wrapper.ptr()) != 0) {
    throw py::error_already_set();
  }
  wrapped_.push_back(std::move(record));
}

void WrappedForwards::End() {
  std::unique_ptr<WrappedForwards> wrapping = std::move(ActiveWrapping());
  if (!wrapping) return;
  static const py::handle kDict = Interned("__dict__");
  static const py::handle kForward = Interned("forward");
  for (Wrapped& record : wrapping->wrapped_) {
    py::object own = py::getattr(record.module, kDict);
    if (record.own_forward) {
      if (PyDict_SetItem(own.ptr(), kForward.ptr(), record.own_forward.ptr()) != 0) throw py::error_already_set();
    } else if (PyDict_DelItem(own.ptr(), kForward.ptr()) != 0) {
      if (!PyErr_ExceptionMatches(PyExc_KeyError)) throw py::error_already_set();
      PyErr_Clear();  // the model removed it itself
    }
  }
}

}  // namespace hiertag::python
