// A tagged file as the commands see it: the model, its module table and the
// rewrites that crossed module boundaries.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tagged_entries.h"
#include "hiertag/core/onnx/onnx_model.h"

namespace hiertag {

using ModuleEntry = TableEntry;

// A rewrite by an export pass across module boundaries (tag_format.h kRewritesKey).
using Rewrite = RewriteEntry;

struct TaggedFile {
  OnnxModel model;
  Json table;                              // the parsed hiertag.modules object
  std::vector<std::string> repeated_tags;  // tags the table lists more than once
  std::vector<ModuleEntry> modules;        // the table's well-formed entries, in table order
  // The well-formed records of hiertag.rewrites, then a "fused" record for every
  // node with hiertag.spans that no "fused" record names.
  std::vector<Rewrite> rewrites;
  std::map<std::string, size_t, std::less<>> entry_of_tag;  // index into modules

  // The entry of `tag`, or nullptr.
  const ModuleEntry* FindModule(std::string_view tag) const;

  // The entry a user names by `tag`: the entry of `tag` itself, else of the one
  // listed tag with the same canonical spelling (CanonicalTag), so a tag that a
  // file written before holds with a raw control character is also named as
  // `hiertag tree` prints it, %-escaped. nullptr when none or several match.
  const ModuleEntry* ResolveModule(std::string_view tag) const;
};

// The tag as the tool prints it: its canonical spelling (CanonicalTag), which
// ResolveModule accepts; the tag itself when it does not parse.
std::string DisplayTag(std::string_view tag);

// Loads `path`. On failure writes one line `<path>: <reason>` to *error.
std::optional<TaggedFile> LoadTaggedFile(const std::string& path, std::string* error);
// The same from a serialized ModelProto (no external data read); `name` starts
// its errors as the path does LoadTaggedFile's.
std::optional<TaggedFile> ParseTaggedFile(std::string bytes, const std::string& name, std::string* error);
// The same over bytes `owner` keeps alive (OnnxModel::Parse), read in place.
std::optional<TaggedFile> ParseTaggedFile(std::shared_ptr<const void> owner, std::string_view bytes,
                                          const std::string& name, std::string* error);

// The node's hierarchy_tag, or nullptr.
const std::string_view* NodeTag(const OnnxNode& node);

// "'<name>' (<op_type>)", the way messages name a node.
std::string DescribeNode(const OnnxNode& node);

// The node's metadata value `key` read as a JSON array of strings; std::nullopt
// when absent or not such an array.
std::optional<std::vector<std::string>> NodeTagList(const OnnxNode& node, std::string_view key);

// A decimal ordinal as hiertag.call holds it (digits only), or std::nullopt.
std::optional<int64_t> ParseOrdinal(std::string_view text);

}  // namespace hiertag
