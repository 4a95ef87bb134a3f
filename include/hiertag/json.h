// Json: a small JSON reader (and writer) for the entries hiertag writes.
//
// Objects keep their members in order as written, so a reader can tell a key
// written twice (JSON parsers usually keep only one of them silently), and a
// value read and written again keeps its members' order.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hiertag {

struct Json {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;                                  // kString
  std::vector<Json> items;                           // kArray
  std::vector<std::pair<std::string, Json>> members;  // kObject, in order

  // The first member named `key`, or nullptr.
  const Json* Find(std::string_view key) const;
};

// Parses a whole document; std::nullopt with a one-line reason on bad input.
std::optional<Json> ParseJson(std::string_view text, std::string* error);

// Compact JSON text of `value`: members in order, integral numbers without a
// fraction (a call ordinal written back as read), others with 17 digits.
std::string WriteJson(const Json& value);

}  // namespace hiertag
