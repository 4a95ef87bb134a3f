// Loading libhiertag.so into a process without Python: a separate test binary
// that links neither torch's Python side nor the passes, so the library under
// test is the only copy of hiertag in the process.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>

namespace {

// Check that a C++ program can load the plugin: nothing is installed, nothing fails.
TEST(PluginLoader, LoadsWithoutPython) {
  void* handle = dlopen(HIERTAG_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(handle, nullptr) << dlerror();
  EXPECT_EQ(dlopen("libhiertag_python.so", RTLD_NOW | RTLD_NOLOAD), nullptr);
}

// Check that loading a second copy from another path (its own static
// initializers run again) neither crashes nor fails.
TEST(PluginLoader, SecondCopyLoadsToo) {
  ASSERT_NE(dlopen(HIERTAG_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL), nullptr) << dlerror();
  std::filesystem::path copy = std::filesystem::temp_directory_path() / "hiertag_copy_libhiertag.so";
  std::filesystem::copy_file(HIERTAG_PLUGIN_PATH, copy, std::filesystem::copy_options::overwrite_existing);
  void* handle = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::filesystem::remove(copy);
  EXPECT_NE(handle, nullptr) << dlerror();
}

}  // namespace
