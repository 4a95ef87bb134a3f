// Plugin loader: the static initializer of libhiertag.so.
//
// libhiertag.so links neither torch nor Python, so loading it into a process
// without Python (a C++ program) does nothing and fails nothing. When the
// loading process runs a Python interpreter (torch.ops.load_library), it checks
// that the torch imported there is the release this build was compiled against
// (a plugin built for another torch fails at its first unresolved symbol, or
// worse, runs against another C++ ABI), then loads libhiertag_python.so from
// the same directory: the passes and the export session, whose own static
// initializer installs them into torch's exporter.
#include <dlfcn.h>

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "hiertag/plugin/install_markers.h"

#ifndef HIERTAG_TORCH_VERSION
#define HIERTAG_TORCH_VERSION "unknown"
#endif

namespace hiertag {
namespace {

// The few functions of Python's C API the loader calls, looked up at run time:
// this library does not link Python.
struct PythonApi {
  int (*is_initialized)();
  int (*gil_ensure)();
  void (*gil_release)(int);
  void* (*sys_get)(const char*);          // borrowed
  void* (*dict_get)(void*, const char*);  // borrowed
  void* (*get_attr)(void*, const char*);  // new reference
  int (*has_attr)(void*, const char*);
  int (*set_attr)(void*, const char*, void*);
  void* (*from_string)(const char*);  // new reference
  const char* (*as_utf8)(void*);
  void (*dec_ref)(void*);
  void (*err_clear)();
  void (*err_set_string)(void*, const char*);
  void** import_error;  // &PyExc_ImportError
};

template <typename Function>
bool LookUp(const char* name, Function* function) {
  *function = reinterpret_cast<Function>(dlsym(RTLD_DEFAULT, name));
  return *function != nullptr;
}

// Python's API when this process runs an initialized interpreter, else nullptr.
const PythonApi* RunningPython() {
  static const std::optional<PythonApi> api = []() -> std::optional<PythonApi> {
    PythonApi found{};
    bool all = LookUp("Py_IsInitialized", &found.is_initialized) && LookUp("PyGILState_Ensure", &found.gil_ensure) &&
               LookUp("PyGILState_Release", &found.gil_release) && LookUp("PySys_GetObject", &found.sys_get) &&
               LookUp("PyDict_GetItemString", &found.dict_get) && LookUp("PyObject_GetAttrString", &found.get_attr) &&
               LookUp("PyObject_HasAttrString", &found.has_attr) && LookUp("PyObject_SetAttrString", &found.set_attr) &&
               LookUp("PyUnicode_FromString", &found.from_string) && LookUp("PyUnicode_AsUTF8", &found.as_utf8) &&
               LookUp("Py_DecRef", &found.dec_ref) && LookUp("PyErr_Clear", &found.err_clear) &&
               LookUp("PyErr_SetString", &found.err_set_string) && LookUp("PyExc_ImportError", &found.import_error);
    if (!all) return std::nullopt;
    return found;
  }();
  return api && api->is_initialized() != 0 ? &*api : nullptr;
}

// sys.modules["torch"] (borrowed), nullptr when torch is not imported; with the GIL held.
void* ImportedTorch(const PythonApi& python) {
  void* modules = python.sys_get("modules");
  return modules != nullptr ? python.dict_get(modules, "torch") : nullptr;
}

// Refuses to install: says "hiertag: plugin not installed: REASON" on stderr,
// records REASON on torch._C (install_markers.h: hiertag._why_not_installed
// reads it, and hiertag.tagging() refuses with it) unless a reason is there
// already, and raises ImportError with that line in the loading Python thread
// (which holds the GIL while ctypes loads the library), so
// torch.ops.load_library fails at once rather than leaving exports untagged.
void Refuse(const PythonApi& python, const std::string& reason) {
  std::string message = "hiertag: plugin not installed: " + reason;
  std::fprintf(stderr, "%s\n", message.c_str());
  int gil = python.gil_ensure();
  void* torch = ImportedTorch(python);
  if (void* c = torch != nullptr ? python.get_attr(torch, "_C") : nullptr) {
    if (!python.has_attr(c, kInstallFailureMarker)) {
      if (void* text = python.from_string(reason.c_str())) {
        python.set_attr(c, kInstallFailureMarker, text);
        python.dec_ref(text);
      }
    }
    python.dec_ref(c);
  }
  python.err_clear();
  python.err_set_string(*python.import_error, message.c_str());
  python.gil_release(gil);
}

// torch.__version__ of the running interpreter, "" when it has not imported
// torch (nothing is imported here).
std::string RunningTorchVersion(const PythonApi& python) {
  int gil = python.gil_ensure();
  std::string version;
  if (void* torch = ImportedTorch(python)) {
    if (void* text = python.get_attr(torch, "__version__")) {
      if (const char* utf8 = python.as_utf8(text)) version = utf8;
      python.dec_ref(text);
    }
  }
  python.err_clear();
  python.gil_release(gil);
  return version;
}

// "2.14.1" of "2.14.1+cu130": builds of one release differ only in their
// devices (CPU, CUDA), not in the CPU libraries the plugin links.
std::string_view Release(std::string_view version) { return version.substr(0, version.find('+')); }

void LoadPythonSide() {
  const PythonApi* python = RunningPython();
  if (python == nullptr) return;
  std::string running = RunningTorchVersion(*python);
  if (Release(running) != Release(HIERTAG_TORCH_VERSION)) {
    Refuse(*python, std::string("it was built for torch " HIERTAG_TORCH_VERSION ", and this is torch ") +
                        (running.empty() ? "(not imported)" : running) +
                        "; build hiertag against this torch (pip install --no-build-isolation <hiertag source>)");
    return;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LoadPythonSide), &info) == 0 || info.dli_fname == nullptr) {
    Refuse(*python, "cannot locate libhiertag.so, so neither libhiertag_python.so beside it");
    return;
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "libhiertag_python.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    Refuse(*python, why != nullptr ? why : path + " cannot be loaded");
  }
}

struct LoadAtStartup {
  LoadAtStartup() { LoadPythonSide(); }
} load_at_startup;

}  // namespace
}  // namespace hiertag
