// What the plugin leaves on torch._C for the Python package to read, so that
// whether and why the plugin is installed is a question with a typed answer
// (hiertag._why_not_installed), never a line scraped from stderr.
#pragma once

namespace hiertag {

// True once every hook is installed (python_hooks.cpp).
constexpr const char* kInstalledMarker = "_hiertag_plugin_installed";
// Why the plugin is not installed (a str): set by the loader (plugin_loader.cpp:
// another torch release, libhiertag_python.so not loadable) or by the hooks'
// installer (a torch it cannot hook), once, by whichever refused first.
constexpr const char* kInstallFailureMarker = "_hiertag_plugin_install_failure";

}  // namespace hiertag
