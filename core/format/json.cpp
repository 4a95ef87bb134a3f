// Json: nlohmann's parser with a nesting cap and a repeated-key check.
#include "hiertag/core/format/json.h"

#include <set>

namespace hiertag {
namespace {

// Ordinals beyond this are no call count of a real export.
constexpr int64_t kMaxOrdinal = int64_t{1} << 40;

// The deepest nesting of arrays and objects in `text` (strings skipped), stopping
// early once past `limit`. Malformed text is left for the parser to reject.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0;
  int deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size() && deepest <= limit; ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

std::optional<ParsedJson> ParseJsonDocument(std::string_view text, std::string* error) {
  if (NestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    *error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return std::nullopt;
  }
  ParsedJson parsed;
  std::vector<std::set<std::string>> keys_of_open_objects;
  std::string repeated_below_top;
  auto observe = [&](int depth, Json::parse_event_t event, Json& value) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys_of_open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys_of_open_objects.pop_back();
        break;
      case Json::parse_event_t::key: {
        const std::string& key = value.get_ref<const std::string&>();
        if (keys_of_open_objects.back().insert(key).second) break;
        if (keys_of_open_objects.size() == 1) {
          parsed.repeated_top_level_keys.push_back(key);
        } else if (repeated_below_top.empty()) {
          repeated_below_top = key;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    parsed.value = Json::parse(text.begin(), text.end(), observe);
  } catch (const Json::exception& failure) {
    // A syntax error (parse_error) or a number too large for a double (out_of_range 406: "1e400").
    std::string what = failure.what();
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ..."
    size_t start = what.find("] ");
    *error = start == std::string::npos ? what : what.substr(start + 2);
    return std::nullopt;
  }
  if (!repeated_below_top.empty()) {
    *error = "key '" + repeated_below_top + "' written twice in one JSON object";
    return std::nullopt;
  }
  return parsed;
}

std::optional<Json> ParseJson(std::string_view text, std::string* error) {
  std::optional<ParsedJson> parsed = ParseJsonDocument(text, error);
  if (!parsed) return std::nullopt;
  if (!parsed->repeated_top_level_keys.empty()) {
    *error = "key '" + parsed->repeated_top_level_keys.front() + "' written twice in one JSON object";
    return std::nullopt;
  }
  return std::move(parsed->value);
}

std::string WriteJson(const Json& value) { return value.dump(-1, ' ', false, Json::error_handler_t::replace); }

const Json* FindMember(const Json& value, std::string_view key) {
  if (!value.is_object()) return nullptr;
  auto found = value.find(std::string(key));
  return found == value.end() ? nullptr : &*found;
}

std::optional<std::vector<std::string>> ReadStrings(const Json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<std::string> strings;
  for (const Json& item : value) {
    if (!item.is_string()) return std::nullopt;
    strings.push_back(item.get<std::string>());
  }
  return strings;
}

std::optional<std::vector<std::string>> ReadStringList(std::string_view text) {
  std::string error;
  std::optional<Json> value = ParseJson(text, &error);
  return value ? ReadStrings(*value) : std::nullopt;
}

std::optional<std::vector<int64_t>> ReadOrdinals(const Json& value) {
  if (!value.is_array()) return std::nullopt;
  std::vector<int64_t> ordinals;
  for (const Json& item : value) {
    if (!item.is_number_integer() && !item.is_number_unsigned()) return std::nullopt;
    if (item.is_number_unsigned() ? item.get<uint64_t>() > static_cast<uint64_t>(kMaxOrdinal)
                                  : (item.get<int64_t>() < 0 || item.get<int64_t>() > kMaxOrdinal)) {
      return std::nullopt;
    }
    ordinals.push_back(item.get<int64_t>());
  }
  return ordinals;
}

std::string WriteStringList(const std::vector<std::string>& items) { return WriteJson(Json(items)); }

}  // namespace hiertag
