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
#include <string>
#include <string_view>

#include "hiertag/plugin/install_markers.h"

#ifndef HIERTAG_TORCH_VERSION
#define HIERTAG_TORCH_VERSION "unknown"
#endif

namespace hiertag {
namespace {

bool PythonIsRunning() {
  using IsInitialized = int (*)();
  auto is_initialized = reinterpret_cast<IsInitialized>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return is_initialized != nullptr && is_initialized() != 0;
}

// Refuses to install: says "hiertag: plugin not installed: REASON" on stderr,
// records REASON on torch._C (install_markers.h: hiertag._why_not_installed
// reads it, and hiertag.tagging() refuses with it) unless a reason is there
// already, and raises ImportError with that line in the loading Python thread
// (which holds the GIL while ctypes loads the library), so
// torch.ops.load_library fails at once rather than leaving exports untagged.
// Python's API is looked up at run time: this library does not link Python.
void Refuse(const std::string& reason) {
  std::string message = "hiertag: plugin not installed: " + reason;
  std::fprintf(stderr, "%s\n", message.c_str());
  using Ensure = int (*)();
  using Release = void (*)(int);
  using SetString = void (*)(void*, const char*);
  using SysGet = void* (*)(const char*);
  using DictGet = void* (*)(void*, const char*);
  using GetAttr = void* (*)(void*, const char*);
  using HasAttr = int (*)(void*, const char*);
  using SetAttr = int (*)(void*, const char*, void*);
  using FromString = void* (*)(const char*);
  using DecRef = void (*)(void*);
  using ErrClear = void (*)();
  auto ensure = reinterpret_cast<Ensure>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto set_string = reinterpret_cast<SetString>(dlsym(RTLD_DEFAULT, "PyErr_SetString"));
  auto import_error = reinterpret_cast<void**>(dlsym(RTLD_DEFAULT, "PyExc_ImportError"));
  auto sys_get = reinterpret_cast<SysGet>(dlsym(RTLD_DEFAULT, "PySys_GetObject"));
  auto dict_get = reinterpret_cast<DictGet>(dlsym(RTLD_DEFAULT, "PyDict_GetItemString"));
  auto get_attr = reinterpret_cast<GetAttr>(dlsym(RTLD_DEFAULT, "PyObject_GetAttrString"));
  auto has_attr = reinterpret_cast<HasAttr>(dlsym(RTLD_DEFAULT, "PyObject_HasAttrString"));
  auto set_attr = reinterpret_cast<SetAttr>(dlsym(RTLD_DEFAULT, "PyObject_SetAttrString"));
  auto from_string = reinterpret_cast<FromString>(dlsym(RTLD_DEFAULT, "PyUnicode_FromString"));
  auto dec_ref = reinterpret_cast<DecRef>(dlsym(RTLD_DEFAULT, "Py_DecRef"));
  auto clear = reinterpret_cast<ErrClear>(dlsym(RTLD_DEFAULT, "PyErr_Clear"));
  if (!ensure || !release || !set_string || !import_error || !sys_get || !dict_get || !get_attr || !has_attr ||
      !set_attr || !from_string || !dec_ref || !clear) {
    return;
  }
  int gil = ensure();
  void* modules = sys_get("modules");                                       // borrowed
  void* torch = modules != nullptr ? dict_get(modules, "torch") : nullptr;  // borrowed
  if (void* c = torch != nullptr ? get_attr(torch, "_C") : nullptr) {
    if (!has_attr(c, kInstallFailureMarker)) {
      if (void* text = from_string(reason.c_str())) {
        set_attr(c, kInstallFailureMarker, text);
        dec_ref(text);
      }
    }
    dec_ref(c);
  }
  clear();
  set_string(*import_error, message.c_str());
  release(gil);
}

// torch.__version__ of the running interpreter, "" when it has not imported
// torch (nothing is imported here).
std::string RunningTorchVersion() {
  using SysGet = void* (*)(const char*);
  using DictGet = void* (*)(void*, const char*);
  using GetAttr = void* (*)(void*, const char*);
  using AsUtf8 = const char* (*)(void*);
  using DecRef = void (*)(void*);
  using Ensure = int (*)();
  using Release = void (*)(int);
  using ErrClear = void (*)();
  auto sys_get = reinterpret_cast<SysGet>(dlsym(RTLD_DEFAULT, "PySys_GetObject"));
  auto dict_get = reinterpret_cast<DictGet>(dlsym(RTLD_DEFAULT, "PyDict_GetItemString"));
  auto get_attr = reinterpret_cast<GetAttr>(dlsym(RTLD_DEFAULT, "PyObject_GetAttrString"));
  auto as_utf8 = reinterpret_cast<AsUtf8>(dlsym(RTLD_DEFAULT, "PyUnicode_AsUTF8"));
  auto dec_ref = reinterpret_cast<DecRef>(dlsym(RTLD_DEFAULT, "Py_DecRef"));
  auto ensure = reinterpret_cast<Ensure>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto clear = reinterpret_cast<ErrClear>(dlsym(RTLD_DEFAULT, "PyErr_Clear"));
  if (!sys_get || !dict_get || !get_attr || !as_utf8 || !dec_ref || !ensure || !release || !clear) return "";
  int gil = ensure();
  std::string version;
  void* modules = sys_get("modules");                                       // borrowed
  void* torch = modules != nullptr ? dict_get(modules, "torch") : nullptr;  // borrowed
  if (torch != nullptr) {
    if (void* text = get_attr(torch, "__version__")) {
      if (const char* utf8 = as_utf8(text)) version = utf8;
      dec_ref(text);
    }
  }
  clear();
  release(gil);
  return version;
}

// "2.14.1" of "2.14.1+cu130": builds of one release differ only in their
// devices (CPU, CUDA), not in the CPU libraries the plugin links.
std::string_view Release(std::string_view version) { return version.substr(0, version.find('+')); }

void LoadPythonSide() {
  if (!PythonIsRunning()) return;
  std::string running = RunningTorchVersion();
  if (Release(running) != Release(HIERTAG_TORCH_VERSION)) {
    Refuse(std::string("it was built for torch " HIERTAG_TORCH_VERSION ", and this is torch ") +
           (running.empty() ? "(not imported)" : running) +
           "; build hiertag against this torch (pip install --no-build-isolation <hiertag source>)");
    return;
  }
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LoadPythonSide), &info) == 0 || info.dli_fname == nullptr) {
    Refuse("cannot locate libhiertag.so, so neither libhiertag_python.so beside it");
    return;
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) + "libhiertag_python.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    Refuse(why != nullptr ? why : path + " cannot be loaded");
  }
}

struct LoadAtStartup {
  LoadAtStartup() { LoadPythonSide(); }
} load_at_startup;

}  // namespace
}  // namespace hiertag
