// Tag format: the keys hiertag writes into an ONNX file and the tag grammar.
//
// Every constant a reader of a tagged file needs lives here, so the plugin, the
// command-line tool and the tests agree on one spelling. No torch, no protobuf.
//
// Grammar (README "Tag grammar"):
//   tag       := "/" segment *( "/" segment )
//   segment   := class [ "." index ]            plain segment
//              | class "[" qualifier "]"        disambiguated segment
//   class     := 1*( any char but "/" "." "[" "]" "%" "#" | "%" HEXDIG HEXDIG )
//                short Python class name, %-escaped where it holds one of those
//   index     := 1*DIGIT                       the module's attribute name when it is a list index
//   qualifier := relative | "~" absolute
//   relative  := path-text, not starting with "~"
//                the module's qualified path relative to its parent tag's module,
//                for a module that lies inside that module
//   absolute  := path-text
//                the module's full qualified path, for a module its caller (the
//                parent tag's module) does not own (the tag tree is the call tree)
//   path-text := 1*( any char but "/" "[" "]" "%" "#" | "%" HEXDIG HEXDIG )
//
// A call reference names a tag, or one of its calls (in hiertag.shared_with,
// hiertag.spans and hiertag.rewrites, for a tag with several calls):
//   call-ref  := tag [ "#" 1*DIGIT ]
//
// Writers escape "~" too (%7E), so only an absolute qualifier starts with one.
// Readers take a "~" after a qualifier's first character literally: files of
// format 1 have it unescaped.
//
// Writers also escape, byte by byte, every control character (C0, DEL, C1:
// "\n" -> %0A, ESC -> %1B, U+0085 -> %C2%85) and every byte of ill-formed
// UTF-8, in class names and qualifiers alike: a tag is one printable line of
// valid UTF-8 whatever the Python name holds, and the user can type it. Other
// characters (quotes, spaces, non-ASCII letters) stay as they are. Readers
// decode any %HH, and take the characters earlier writers left raw as they are.
//
// Example: /BertModel/BertEncoder/BertLayer.0/BertAttention/BertSdpaSelfAttention
//          /GPT2LMHeadModel/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]
//          /Transformer/EncoderLayer.0/SublayerConnection.0/Linear[~generator.proj]
#pragma once

#include <cstdint>
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
// NodeProto.metadata_props key holding, as a decimal string, the 0-based ordinal
// of the call of the node's tag that the node belongs to (see "calls" below).
// Written only when the node's tag has more than one call; absent means 0.
inline constexpr std::string_view kCallKey = "hiertag.call";
// NodeProto.metadata_props key listing, as a JSON array of tags, the modules whose
// computations an export pass fused into this node (a Conv and its parent's
// BatchNorm, by the exporter's eval peephole). The node's tag is their common
// ancestor. Written only on such nodes, always with kRewriteKey.
inline constexpr std::string_view kSpansKey = "hiertag.spans";
// NodeProto.metadata_props key naming the torch pass that fused the modules of
// kSpansKey into this node (e.g. "_jit_pass_onnx_eval_peephole").
inline constexpr std::string_view kRewriteKey = "hiertag.rewrite";
// ModelProto.metadata_props key holding the module table (JSON object: tag -> entry):
// every tagged module called during the export and its ancestors, nodes or not.
// An entry is {"path": qualified name, "class": torch.typename} and optionally
//   "calls":        [n, ...] one element per call of the tag, in call order: that
//                   call's ordinal among all calls of the instance `path` during
//                   the trace. Absent: [0], one call.
//   "parent_calls": [p, ...] as long as "calls": the ordinal of the parent tag's
//                   call in which call k ran. Absent: all 0.
//   "folded_into":  [initializer, ...] the exporter constant-folded (part of) the
//                   module's computation into these initializers of the main graph.
inline constexpr std::string_view kModuleTableKey = "hiertag.modules";
// ModelProto.metadata_props key listing, as a JSON array, each rewrite by an export
// pass that crossed a module boundary:
//   {"pass": torch pass, "kind": "fused" | "removed" | "folded" | "rewired",
//    "modules": [tag or call reference, ...], "node": ONNX node name or "",
//    optionally "cause": "tool" | "carry" and "reason": text}
// fused: the node carries the modules' computations (its kSpansKey); removed: nodes
// of the modules were removed together, so the value that crossed between them no
// longer exists; folded: their computations were folded into initializers;
// rewired: the listed call's nodes now read a value it never received (an export
// pass), or hiertag carry declares its boundary not established, with whose doing
// that is ("cause") and why ("reason").
inline constexpr std::string_view kRewritesKey = "hiertag.rewrites";
// ModelProto.metadata_props key holding the format version of the entries
// above: kFormatVersion, the only one written. Readers also take the older
// files: format 2 has no call references, and format 1 none of kCallKey,
// kSpansKey, kRewriteKey, kRewritesKey and the optional table fields, and its
// tag tree is the module tree (from 2 on, the call tree: a tag's parent is the
// module whose forward called it).
inline constexpr std::string_view kFormatVersionKey = "hiertag.format_version";
inline constexpr std::string_view kFormatVersion = "3";

// Every key hiertag writes into metadata_props but the node's tag
// (kHierarchyTagKey) starts with this prefix: removing them all removes hiertag's entries.
inline constexpr std::string_view kKeyPrefix = "hiertag.";
// ModelProto.metadata_props key naming where the tags came from when hiertag's
// plugin did not make them: "dynamo" (hiertag import-dynamo). Absent: the plugin.
inline constexpr std::string_view kSourceKey = "hiertag.source";
// ModelProto.metadata_props key of a file `hiertag carry` tagged from its
// tagged original: a JSON object of its counts (nodes by how they were tagged,
// module calls by how they were established) and "by" (--by).
inline constexpr std::string_view kCarryKey = "hiertag.carry";

struct TagSegment {
  std::string class_name;
  std::optional<long long> index;        // ".N"
  std::optional<std::string> qualifier;  // "[relative.path]" or "[~full.path]", unescaped
  bool absolute = false;                 // the qualifier is the full path ("~")
};

// Renders one segment; the qualifier is percent-escaped, after "~" when absolute.
std::string FormatSegment(const TagSegment& segment);

// "/" + each FormatSegment, joined.
std::string FormatTag(const std::vector<TagSegment>& segments);

// The tag as this writer spells it: parsed and formatted again (a control
// character a file written before holds raw comes out %-escaped); std::nullopt
// when it does not parse. Two spellings of one module's tag have one canonical
// form.
std::optional<std::string> CanonicalTag(std::string_view tag);

// Parses a whole tag. Returns std::nullopt and sets *error (when given) to a
// one-line reason if the tag does not follow the grammar.
std::optional<std::vector<TagSegment>> ParseTag(std::string_view tag, std::string* error = nullptr);

// True when `ancestor` equals `tag` or is a proper segment-wise prefix of it.
bool IsTagAncestorOrSelf(std::string_view ancestor, std::string_view tag);

// The tag of the parent module; "" for a root tag.
std::string_view ParentTag(std::string_view tag);

// Percent-escapes the characters a qualifier may not hold ("/", "[", "]", "%",
// "#"), "~", which at a qualifier's start marks it absolute, control characters
// and ill-formed UTF-8.
std::string EscapeQualifier(std::string_view raw);

// Percent-escapes the characters a class name may not hold ("/", ".", "[", "]",
// "%", "#"), control characters and ill-formed UTF-8; ordinary class names are
// unchanged.
std::string EscapeClassName(std::string_view raw);

// A tag, or one call of it.
struct CallRef {
  std::string tag;
  std::optional<int64_t> call;  // std::nullopt: every call of the tag
};

// "TAG" or "TAG#K".
std::string FormatCallRef(std::string_view tag, std::optional<int64_t> call);
// Splits at the last "#" when digits follow it; std::nullopt when something
// else does. The tag part is not checked against the grammar.
std::optional<CallRef> ParseCallRef(std::string_view text);

}  // namespace hiertag
