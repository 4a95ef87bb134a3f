// Tag format: the keys hiertag writes into an ONNX file and the tag grammar.
//
// Every constant a reader of a tagged file needs lives here, so the plugin, the
// command-line tool and the tests agree on one spelling. No torch, no protobuf.
//
// Grammar (README "Tag grammar"):
//   tag       := "/" segment *( "/" segment )
//   segment   := class [ "." index ]            plain segment
//              | class "[" qualifier "]"        disambiguated segment
//   class     := 1*( any char but "/" "." "[" "]" )    short Python class name
//   index     := 1*DIGIT                       the module's attribute name when it is a list index
//   qualifier := 1*( any char but "/" "[" "]" "%" | "%" HEXDIG HEXDIG )
//                the module's qualified path relative to its parent in the tag tree
//
// Example: /BertModel/BertEncoder/BertLayer.0/BertAttention/BertSdpaSelfAttention
//          /GPT2LMHeadModel/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hiertag {

// NodeProto.metadata_props key holding the node's tag.
inline constexpr std::string_view kHierarchyTagKey = "hierarchy_tag";
// NodeProto.metadata_props key listing, as a JSON array of tags, the other modules
// whose identical computation torch's common subexpression elimination merged into
// this node. Written only on such nodes.
inline constexpr std::string_view kSharedWithKey = "hiertag.shared_with";
// ModelProto.metadata_props key holding the module table (JSON object: tag -> entry).
inline constexpr std::string_view kModuleTableKey = "hiertag.modules";
// ModelProto.metadata_props key holding the format version of the two entries above.
inline constexpr std::string_view kFormatVersionKey = "hiertag.format_version";
inline constexpr std::string_view kFormatVersion = "1";

struct TagSegment {
  std::string class_name;
  std::optional<long long> index;       // ".N"
  std::optional<std::string> qualifier;  // "[relative.path]", unescaped
};

// Renders one segment; the qualifier is percent-escaped.
std::string FormatSegment(const TagSegment& segment);

// Parses a whole tag. Returns std::nullopt and sets *error (when given) to a
// one-line reason if the tag does not follow the grammar.
std::optional<std::vector<TagSegment>> ParseTag(std::string_view tag,
                                                std::string* error = nullptr);

// True when `ancestor` equals `tag` or is a proper segment-wise prefix of it.
bool IsTagAncestorOrSelf(std::string_view ancestor, std::string_view tag);

// The tag of the parent module; "" for a root tag.
std::string_view ParentTag(std::string_view tag);

// Percent-escapes the characters a qualifier may not hold ("/", "[", "]", "%").
std::string EscapeQualifier(std::string_view raw);

// Minimal JSON string quoting, shared by every writer of hiertag JSON.
std::string JsonQuote(std::string_view text);

}  // namespace hiertag
