// A tagged file as the commands see it: the model, its module table and the
// rewrites that crossed module boundaries.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hiertag/json.h"
#include "hiertag/onnx_model.h"

namespace hiertag {

struct ModuleEntry {
  std::string tag;
  std::string path;
  std::string class_name;
  // Format 2's optional fields; absent or malformed ones (validate reports
  // those) read as their defaults.
  int64_t call_count = 1;                // length of "calls"
  std::vector<int64_t> parent_calls;     // empty: every call ran in the parent's call 0
  std::vector<std::string> folded_into;  // initializer names
  bool ran = true;                       // false: a container whose forward never ran
};

// A rewrite by an export pass across module boundaries (tag_format.h kRewritesKey).
struct Rewrite {
  std::string pass;
  std::string kind;                  // "fused", "removed" or "folded"
  std::vector<std::string> modules;  // tags
  std::string node;                  // the ONNX node's name; "" when it names none
};

struct TaggedFile {
  OnnxModel model;
  Json table;                         // the parsed hiertag.modules object
  std::vector<ModuleEntry> modules;   // the table's well-formed entries, in table order
  // The well-formed records of hiertag.rewrites, then a "fused" record for every
  // node with hiertag.spans that no "fused" record names.
  std::vector<Rewrite> rewrites;
  std::map<std::string, size_t, std::less<>> entry_of_tag;  // index into modules; the first when listed twice

  // The entry of `tag`, or nullptr.
  const ModuleEntry* FindModule(std::string_view tag) const;
};

// Loads `path`. On failure writes one line `<path>: <reason>` to *error.
std::optional<TaggedFile> LoadTaggedFile(const std::string& path, std::string* error);

// The node's hierarchy_tag, or nullptr.
const std::string* NodeTag(const OnnxNode& node);

// "'<name>' (<op_type>)", the way messages name a node.
std::string DescribeNode(const OnnxNode& node);

// The node's metadata value `key` read as a JSON array of strings; std::nullopt
// when absent or not such an array.
std::optional<std::vector<std::string>> NodeTagList(const OnnxNode& node, std::string_view key);

// A JSON array of strings, or std::nullopt.
std::optional<std::vector<std::string>> ReadStrings(const Json& value);

// A JSON array of whole numbers >= 0 (call ordinals), or std::nullopt.
std::optional<std::vector<int64_t>> ReadOrdinals(const Json& value);

// A decimal ordinal as hiertag.call holds it (digits only), or std::nullopt.
std::optional<int64_t> ParseOrdinal(std::string_view text);

}  // namespace hiertag
