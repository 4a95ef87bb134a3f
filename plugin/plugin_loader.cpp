// Plugin loader: the static initializer of libhiertag.so.
//
// libhiertag.so holds the passes and knows nothing about Python, so loading it
// into a process without Python (a C++ program) does nothing and fails nothing.
// When the loading process runs a Python interpreter (torch.ops.load_library),
// it loads libhiertag_python.so from the same directory, whose own static
// initializer installs the plugin into torch's exporter.
#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace hiertag {
namespace {

bool PythonIsRunning() {
  using IsInitialized = int (*)();
  auto is_initialized = reinterpret_cast<IsInitialized>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
  return is_initialized != nullptr && is_initialized() != 0;
}

// Raises ImportError(message) in the loading Python thread (which holds the
// GIL while ctypes loads the library), so torch.ops.load_library fails at once
// rather than leaving exports untagged. Python's API is looked up at run time:
// this library does not link Python.
void RaisePythonImportError(const std::string& message) {
  using Ensure = int (*)();
  using Release = void (*)(int);
  using SetString = void (*)(void*, const char*);
  auto ensure = reinterpret_cast<Ensure>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
  auto release = reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
  auto set_string = reinterpret_cast<SetString>(dlsym(RTLD_DEFAULT, "PyErr_SetString"));
  auto import_error = reinterpret_cast<void**>(dlsym(RTLD_DEFAULT, "PyExc_ImportError"));
  if (ensure == nullptr || release == nullptr || set_string == nullptr || import_error == nullptr) return;
  int gil = ensure();
  set_string(*import_error, message.c_str());
  release(gil);
}

void LoadPythonSide() {
  if (!PythonIsRunning()) return;
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&LoadPythonSide), &info) == 0 || info.dli_fname == nullptr) {
    std::fprintf(stderr, "hiertag: cannot locate libhiertag.so; plugin not installed\n");
    return;
  }
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string() : path.substr(0, slash + 1)) +
         "libhiertag_python.so";
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    std::string message = std::string("hiertag: plugin not installed: ") + dlerror();
    std::fprintf(stderr, "%s\n", message.c_str());
    RaisePythonImportError(message);
  }
}

struct LoadAtStartup {
  LoadAtStartup() { LoadPythonSide(); }
} load_at_startup;

}  // namespace
}  // namespace hiertag
