// Tagged entries: the module table and the rewrite records as hiertag writes
// them into an ONNX file (tag_format.h names the keys), written and read in one
// place for the plugin, the tool and the tests. No torch.
//
// hiertag.modules:  {"/Net": {"path": "", "class": "pkg.Net"},
//                    "/Net/Block": {"path": "block", "class": "pkg.Block",
//                                   "calls": [0, 1], "parent_calls": [0, 0]}, ...}
// hiertag.rewrites: [{"pass": "_jit_pass_onnx_eval_peephole", "kind": "fused",
//                     "modules": ["/Net", "/Net/Conv"], "node": "/conv/Conv"}, ...]
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hiertag/core/format/json.h"

namespace hiertag {

// One entry of hiertag.modules (tag_format.h kModuleTableKey).
struct TableEntry {
  std::string tag;
  std::string path;        // qualified name in named_modules(); "" for the root
  std::string class_name;  // torch.typename of the module's class
  // Each call's ordinal among its instance's calls; empty means [0] (one call).
  std::vector<int64_t> calls;
  // The parent tag's call each call ran in; empty means every one ran in call 0.
  std::vector<int64_t> parent_calls;
  bool ran = true;                       // false: a container whose forward never ran
  std::vector<std::string> folded_into;  // a module that left no node: what it became

  int64_t call_count() const { return calls.empty() ? 1 : static_cast<int64_t>(calls.size()); }
};

// One record of hiertag.rewrites (tag_format.h kRewritesKey).
struct RewriteEntry {
  std::string pass;                  // the torch pass
  std::string kind;                  // "fused", "removed", "folded" or "rewired"
  std::vector<std::string> modules;  // tags
  std::string node;                  // the ONNX node's name; "" when it names none
  // Why the boundary is gone, in words, when the writer says (hiertag carry's
  // declarations, which name their cause); "" otherwise, and then not written.
  std::string reason = "";
  // Whose doing a declaration says it is: "tool" (the transformation cut the
  // boundary) or "carry" (carry could not establish it); "" otherwise, and then
  // not written.
  std::string cause = "";
};

// The table as JSON text: entries in the order given; optional fields only when
// they differ from their defaults (calls other than [0], parent_calls not all 0,
// ran false, folded_into non-empty).
std::string WriteModuleTable(const std::vector<TableEntry>& entries);
Json ModuleTableEntryJson(const TableEntry& entry);

// The entry of `tag` from its JSON object; std::nullopt when "path" or "class"
// is missing or no string. Optional fields that are malformed read as their
// defaults (`hiertag validate` reports them).
std::optional<TableEntry> ReadModuleTableEntry(const std::string& tag, const Json& entry);

std::string WriteRewrites(const std::vector<RewriteEntry>& records);
Json RewriteJson(const RewriteEntry& record);
// A record from its JSON object; std::nullopt when a field is missing or mistyped.
std::optional<RewriteEntry> ReadRewrite(const Json& record);

}  // namespace hiertag
