// Scope names: instance and borrowed scope name formats.
#include "hiertag/core/export/scope_names.h"

#include <charconv>

namespace hiertag {
namespace {

std::optional<int> ParseLeadingInt(std::string_view text, std::string_view* rest) {
  int value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data() || value < 0) return std::nullopt;
  *rest = text.substr(end - text.data());
  return value;
}

}  // namespace

std::string MarkInstanceScopeName(int module_index, std::string_view torch_scope_name) {
  std::string out(kInstanceScopePrefix);
  out += std::to_string(module_index);
  out += '|';
  out += torch_scope_name;
  return out;
}

std::string MarkDirectScopeName(int module_index, std::string_view torch_scope_name) {
  std::string out(kDirectScopePrefix);
  out += std::to_string(module_index);
  out += '|';
  out += torch_scope_name;
  return out;
}

std::string_view ScopeNameAsRecorded(std::string_view name) { return name.substr(0, name.find('\0')); }

std::optional<ParsedScopeName> ParseScopeName(std::string_view name) {
  size_t separator = name.find(kScopeSeparator);
  if (separator == std::string_view::npos) return std::nullopt;
  ParsedScopeName parsed;
  parsed.class_part = name.substr(0, separator);
  parsed.variable_part = name.substr(separator + kScopeSeparator.size());
  for (std::string_view prefix : {kInstanceScopePrefix, kDirectScopePrefix}) {
    if (parsed.class_part.substr(0, prefix.size()) != prefix) continue;
    std::string_view rest;
    auto index = ParseLeadingInt(parsed.class_part.substr(prefix.size()), &rest);
    if (index && !rest.empty() && rest.front() == '|') {
      parsed.module_index = index;
      parsed.direct = prefix == kDirectScopePrefix;
      parsed.class_part = rest.substr(1);
    }
    break;
  }
  return parsed;
}

std::string UnmangleTorchScriptTypeName(std::string_view name) {
  constexpr std::string_view kPrefix = "__torch__.";
  constexpr std::string_view kMangle = "___torch_mangle";
  if (name.substr(0, kPrefix.size()) == kPrefix) name.remove_prefix(kPrefix.size());
  std::string out;
  while (!name.empty()) {
    size_t dot = name.find('.');
    std::string_view atom = name.substr(0, dot);
    if (atom.substr(0, kMangle.size()) != kMangle) {
      if (!out.empty()) out += '.';
      out += atom;
    }
    if (dot == std::string_view::npos) break;
    name.remove_prefix(dot + 1);
  }
  return out;
}

}  // namespace hiertag
