// Export options: what the environment asks of one export (README "Use").
//
//   HIERTAG                "1": tag this export; unset, "" or "0": leave it alone;
//                          anything else is an error.
//   HIERTAG_TORCH_MODULES  "0" (default): torch.nn / torch.ao modules get no tag
//                          segment; "1": every module does; a comma list of class
//                          names ("LayerNorm,Embedding"): only those torch classes;
//                          anything else ("yes", "maybe") is an error.
//   HIERTAG_REPORT         "1": one stderr line per tagged export (export_report.h).
//   HIERTAG_INJECT_FAILURE for tests: the name of a step of the export session
//                          (kInjectableSteps) at which hiertag raises an error,
//                          to show that a failure anywhere leaves torch's
//                          exporter as it was.
//
// Read at every export, so the flags can change between exports in one process.
// No torch, no Python: the environment comes in as a lookup function.
#pragma once

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace hiertag {

// Which torch.nn / torch.ao classes keep a tag segment of their own.
struct TorchModuleSegments {
  bool all = false;
  std::set<std::string, std::less<>> classes;  // short class names

  // True when a module of class `qualified` (torch.typename) named `short_name` gets a segment.
  bool KeepsSegment(std::string_view qualified, std::string_view short_name) const;
};

// The steps of an export session a test can make fail (HIERTAG_INJECT_FAILURE).
inline constexpr std::string_view kInjectableSteps[] = {"module-map",     "trace",         "function-substitution",
                                                        "graph-pass",     "cse",           "unused-items",
                                                        "tagging",        "plan",          "write",
                                                        "dynamo-capture", "dynamo-region", "dynamo-translation",
                                                        "dynamo-pass",    "dynamo-tagging"};

struct ExportOptions {
  bool tag = false;
  TorchModuleSegments torch_modules;
  bool report = false;
  std::string inject_failure_at;  // one of kInjectableSteps, or empty
};

// HIERTAG_TORCH_MODULES' value read: "", "0" (no torch class), "1" (all) or a
// comma list of class names, each starting with a capital letter after any
// underscores, as every torch.nn / torch.ao class's does (so "yes", "true" or
// "maybe" is refused, not taken for a class without effect); std::nullopt with
// the reason ("'TEXT' is not valid: use ...") when it is none of those.
// `hiertag import-dynamo --torch-modules` reads its option with it too.
std::optional<TorchModuleSegments> ParseTorchModuleSegments(std::string_view value, std::string* error);

// Looks a variable up: its value, or nullptr when unset (std::getenv's contract).
using EnvironmentLookup = std::function<const char*(const char*)>;

// The options of one export; std::nullopt with a one-line error (naming the
// variable, its value and the accepted values) when a variable is malformed.
// The other variables are read only when HIERTAG asks for tags.
std::optional<ExportOptions> ReadExportOptions(const EnvironmentLookup& lookup, std::string* error);

// True for a class of torch.nn or torch.ao (torch.typename of the class).
bool IsTorchModuleClass(std::string_view qualified);

// The names of the list no torch.nn / torch.ao class has (a typo, "LayerNrom",
// or a class of the user's, which always has a segment), sorted: such a name
// has no effect, and the export goes on. `is_torch_class` answers for a short
// class name.
std::vector<std::string> UnknownTorchModules(const TorchModuleSegments& segments,
                                             const std::function<bool(std::string_view)>& is_torch_class);

// What to say of those names, one line without a prefix or newline ("" for
// none): "SOURCE names 'LayerNrom', which is not a torch.nn or torch.ao class:
// it has no effect (...)". `source`: where the list came from
// (HIERTAG_TORCH_MODULES for the plugin, --torch-modules for a verb).
std::string UnknownTorchModulesNote(const std::vector<std::string>& names, std::string_view source);

}  // namespace hiertag
