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
    std::fprintf(stderr, "hiertag: plugin not installed: %s\n", dlerror());
  }
}

struct LoadAtStartup {
  LoadAtStartup() { LoadPythonSide(); }
} load_at_startup;

}  // namespace
}  // namespace hiertag
