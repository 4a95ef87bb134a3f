// Json: the one JSON codec of hiertag's entries (nlohmann::ordered_json).
//
// Every JSON value hiertag writes or reads (the module table, tag lists, rewrite
// records, the tool's --json output) goes through here. Objects keep their
// members in the order written. A key written twice in one object is never kept
// silently (JSON parsers usually keep one of them): ParseJson refuses the
// document, and ParseJsonDocument reports the keys the top-level object repeats,
// so that `hiertag validate` can say "tag '/Net/Layer.1' is listed twice".
// Nesting is capped (kMaxJsonDepth) before parsing, so hostile input cannot
// exhaust the stack. No torch.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace hiertag {

using Json = nlohmann::ordered_json;

inline constexpr int kMaxJsonDepth = 256;

struct ParsedJson {
  Json value;
  // Keys the top-level object holds more than once, in order of their second
  // appearance (an object directly inside a top-level array counts as top
  // level). The value holds each such key once, at its first place, with the
  // value written last.
  std::vector<std::string> repeated_top_level_keys;
};

// Parses a whole document. std::nullopt with a one-line reason on bad input:
// malformed JSON, nesting deeper than kMaxJsonDepth, or a key written twice in
// an object below the top level.
std::optional<ParsedJson> ParseJsonDocument(std::string_view text, std::string* error);

// ParseJsonDocument, refusing a repeated top-level key too.
std::optional<Json> ParseJson(std::string_view text, std::string* error);

// Compact JSON text; integers stay integers. Bytes that are not UTF-8 are
// written as U+FFFD (JSON text cannot hold them).
std::string WriteJson(const Json& value);

// Appends member `key` to `object` (a JSON object) without looking for the
// key, which the caller knows is new to it, and returns the member's value.
// ordered_json's operator[] and emplace compare the key with every member in
// turn: building an object of n members with them costs n^2 / 2 comparisons.
Json& AppendNewMember(Json& object, std::string key, Json value);

// Sets the members of one JSON object by key in linear time, with an index of
// its keys (AppendNewMember says why). A key set again keeps its first place and
// takes the new value, as operator[] does. `object` must outlive the writer and
// not move while it writes.
class JsonObjectWriter {
 public:
  explicit JsonObjectWriter(Json& object) : object_(&object) {}
  // Sets member `key` to `value` and returns it; `*repeated` (when given) says
  // whether the key was set before.
  Json& Set(const std::string& key, Json value, bool* repeated = nullptr);

 private:
  Json* object_;
  std::unordered_map<std::string, size_t> index_;  // key -> member index
};

// The member `key` of an object, or nullptr (also when `value` is no object).
const Json* FindMember(const Json& value, std::string_view key);

// A JSON array of strings, or std::nullopt.
std::optional<std::vector<std::string>> ReadStrings(const Json& value);
// A JSON array of strings parsed from text, or std::nullopt.
std::optional<std::vector<std::string>> ReadStringList(std::string_view text);

// A JSON array of whole numbers in [0, 2^40] (call ordinals), or std::nullopt.
std::optional<std::vector<int64_t>> ReadOrdinals(const Json& value);

// A JSON array of strings, as text.
std::string WriteStringList(const std::vector<std::string>& items);

}  // namespace hiertag
