// Scope names: how hiertag marks the scopes torch records, and how it reads them.
//
// torch names a module call's scope "<class part>::<variable part>" and derives
// ONNX node names from the variable parts only (passes/onnx/naming.cpp), so
// hiertag puts what it needs into the class part and never touches the variable
// part: node names stay byte-identical to an untagged export.
//
//   instance scope   "hiertag.m<index>|<torch.typename>::<var>"
//                    pushed by the tracer for module instance <index> of the
//                    module table (the plugin rewrites the values of
//                    torch.jit._trace._trace_module_map before tracing).
//   direct scope     "hiertag.d<index>|<torch.typename>::<var>"
//                    pushed by hiertag (ModuleCalls) for module instance <index>
//                    when its forward is entered without __call__
//                    (`child.forward(x)`), where torch records no call; removed
//                    again before torch names the nodes.
//   borrowed scope   "hiertag.borrowed::" a child of a recorded scope,
//                    given for the duration of the export to nodes torch left
//                    without the scope they belong to (BorrowedScopes); removed
//                    again before torch names the nodes. Every loan has this
//                    one name: BorrowedScopes tells them apart by the scope
//                    object it made. (A name per loan interned a torch Symbol
//                    per loan, under torch's global lock and in a table the
//                    process never frees; reading a loan back parsed it.)
// No torch dependency.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace hiertag {

inline constexpr std::string_view kScopeSeparator = "::";
inline constexpr std::string_view kInstanceScopePrefix = "hiertag.m";
inline constexpr std::string_view kDirectScopePrefix = "hiertag.d";
inline constexpr std::string_view kBorrowedScopeName = "hiertag.borrowed::";

// "pkg.Class::var" -> "hiertag.m12|pkg.Class::var".
std::string MarkInstanceScopeName(int module_index, std::string_view torch_scope_name);

// "pkg.Class::var" -> "hiertag.d12|pkg.Class::var".
std::string MarkDirectScopeName(int module_index, std::string_view torch_scope_name);

// The scope name as torch hands it back: Scope::name().toUnqualString() is a C
// string, so a name holding a NUL (an attribute or class name with "\0") comes
// back cut at it. Compare recorded scopes with this, not with the name pushed.
std::string_view ScopeNameAsRecorded(std::string_view name);

struct ParsedScopeName {
  std::string_view class_part;
  std::string_view variable_part;
  std::optional<int> module_index;  // set for instance and direct scopes
  bool direct = false;              // a direct scope: hiertag's, not torch's
};

// Splits at the first "::" as torch does. std::nullopt for a name without "::".
std::optional<ParsedScopeName> ParseScopeName(std::string_view name);

// "__torch__.pkg.mod.___torch_mangle_3.Class" -> "pkg.mod.Class": the Python
// class name behind a TorchScript type name.
std::string UnmangleTorchScriptTypeName(std::string_view name);

}  // namespace hiertag
