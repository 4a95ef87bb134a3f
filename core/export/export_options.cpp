// Export options: the environment variables of one export, validated.
#include "hiertag/core/export/export_options.h"

#include <cctype>
#include <sstream>

namespace hiertag {
namespace {

std::string Trimmed(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t");
  size_t end = text.find_last_not_of(" \t");
  return begin == std::string::npos ? "" : text.substr(begin, end - begin + 1);
}

bool IsIdentifier(const std::string& name) {
  if (name.empty() || !(std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_')) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// A class name as torch.nn and torch.ao spell all of theirs: an identifier whose first
// letter (after the underscores of a private one, _LSTMLayer) is a capital. A lower-case
// word ("yes", "true", "maybe") is a switch mistyped, not a class: every class the list
// can pick is a torch class, so such a word would never have an effect.
bool IsClassName(const std::string& name) {
  if (!IsIdentifier(name) || name == "True" || name == "False" || name == "None") return false;
  size_t first = name.find_first_not_of('_');
  return first != std::string::npos && std::isupper(static_cast<unsigned char>(name[first]));
}

}  // namespace

std::optional<TorchModuleSegments> ParseTorchModuleSegments(std::string_view value, std::string* error) {
  TorchModuleSegments segments;
  std::string text(value);
  if (text.empty() || text == "0") return segments;
  if (text == "1") {
    segments.all = true;
    return segments;
  }
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    std::string name = Trimmed(item);
    if (!IsClassName(name)) {
      *error = "'" + text +
               "' is not valid: use 0 (none), 1 (all) or a comma list of class names, each starting with a capital "
               "letter (LayerNorm,Embedding)";
      return std::nullopt;
    }
    segments.classes.insert(name);
  }
  return segments;
}

bool TorchModuleSegments::KeepsSegment(std::string_view qualified, std::string_view short_name) const {
  return !IsTorchModuleClass(qualified) || all || classes.count(short_name) > 0;
}

bool IsTorchModuleClass(std::string_view qualified) {
  return qualified.substr(0, 9) == "torch.nn." || qualified.substr(0, 9) == "torch.ao.";
}

std::vector<std::string> UnknownTorchModules(const TorchModuleSegments& segments,
                                             const std::function<bool(std::string_view)>& is_torch_class) {
  std::vector<std::string> unknown;
  for (const std::string& name : segments.classes) {
    if (!is_torch_class(name)) unknown.push_back(name);  // the set's order: sorted
  }
  return unknown;
}

std::string UnknownTorchModulesNote(const std::vector<std::string>& names, std::string_view source) {
  if (names.empty()) return "";
  std::string listed;
  for (const std::string& name : names) listed += (listed.empty() ? "'" : ", '") + name + "'";
  return std::string(source) + " names " + listed +
         (names.size() == 1 ? ", which is not a torch.nn or torch.ao class: it has no effect"
                            : ", which are not torch.nn or torch.ao classes: they have no effect") +
         " (the list picks the torch classes that keep a tag segment; every other class has one)";
}

std::optional<ExportOptions> ReadExportOptions(const EnvironmentLookup& lookup, std::string* error) {
  ExportOptions options;
  const char* flag = lookup("HIERTAG");
  std::string value = flag == nullptr ? "" : flag;
  if (value.empty() || value == "0") return options;
  if (value != "1") {
    *error =
        "hiertag: HIERTAG='" + value + "' is not valid: use 1 (tag this export) or 0, empty or unset (plain export)";
    return std::nullopt;
  }
  options.tag = true;
  const char* torch_modules = lookup("HIERTAG_TORCH_MODULES");
  std::string reason;
  std::optional<TorchModuleSegments> segments =
      ParseTorchModuleSegments(torch_modules == nullptr ? "" : torch_modules, &reason);
  if (!segments) {
    *error = "hiertag: HIERTAG_TORCH_MODULES=" + reason;
    return std::nullopt;
  }
  options.torch_modules = std::move(*segments);
  const char* report = lookup("HIERTAG_REPORT");
  options.report = report != nullptr && std::string(report) == "1";
  const char* inject = lookup("HIERTAG_INJECT_FAILURE");
  if (inject != nullptr && inject[0] != '\0') {
    std::string step = inject;
    std::string steps;
    bool known = false;
    for (std::string_view name : kInjectableSteps) {
      known |= name == step;
      steps += (steps.empty() ? "" : ", ") + std::string(name);
    }
    if (!known) {
      *error = "hiertag: HIERTAG_INJECT_FAILURE='" + step + "' is not a step of the export: use one of " + steps;
      return std::nullopt;
    }
    options.inject_failure_at = step;
  }
  return options;
}

}  // namespace hiertag
