// Json: nlohmann's parser with a nesting cap and a repeated-key check.
#include "hiertag/core/format/json.h"

#include <utility>

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

// Builds the document from nlohmann's SAX events. nlohmann's own DOM parser
// adds each member of an ordered_json object through operator[], which
// compares the key with every member before it: n^2 / 2 comparisons for an
// object of n members (a module table of 20,000 tags took 0.8 s). Here each
// open object is written by a JsonObjectWriter, which keeps an index of its keys.
class DocumentBuilder {
 public:
  bool null() { return Put(Json(nullptr)); }
  bool boolean(bool value) { return Put(Json(value)); }
  bool number_integer(Json::number_integer_t value) { return Put(Json(value)); }
  bool number_unsigned(Json::number_unsigned_t value) { return Put(Json(value)); }
  bool number_float(Json::number_float_t value, const Json::string_t& /*text*/) { return Put(Json(value)); }
  bool string(Json::string_t& value) { return Put(Json(std::move(value))); }
  bool binary(Json::binary_t& value) { return Put(Json(std::move(value))); }
  bool start_object(std::size_t /*elements*/) {
    Json* object = Place(Json::object());
    open_.push_back(object);
    writers_.emplace_back(*object);
    return true;
  }
  bool key(Json::string_t& key) {
    key_ = std::move(key);
    return true;
  }
  bool end_object() {
    open_.pop_back();
    writers_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) {
    open_.push_back(Place(Json::array()));
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/, const Json::exception& ex) {
    error_ = ex.what();
    return false;
  }

  const std::string& error() const { return error_; }
  const std::string& repeated_below_top() const { return repeated_below_top_; }
  ParsedJson Take() { return std::move(parsed_); }

 private:
  bool Put(Json value) {
    Place(std::move(value));
    return true;
  }

  // Places `value` in the innermost open container (or as the document) and returns where it lies.
  Json* Place(Json value) {
    if (open_.empty()) {
      parsed_.value = std::move(value);
      return &parsed_.value;
    }
    Json& parent = *open_.back();
    if (parent.is_array()) {
      Json::array_t& items = parent.get_ref<Json::array_t&>();
      items.push_back(std::move(value));
      return &items.back();
    }
    bool repeated = false;
    Json& member = writers_.back().Set(key_, std::move(value), &repeated);
    // The outermost open object's repeated keys are reported (an object inside a
    // top-level array counts as outermost, as it always did); any deeper one
    // refuses the document.
    if (repeated && writers_.size() == 1) {
      parsed_.repeated_top_level_keys.push_back(key_);
    } else if (repeated && repeated_below_top_.empty()) {
      repeated_below_top_ = key_;
    }
    return &member;
  }

  ParsedJson parsed_;
  // The open arrays and objects, outermost first. A container grows only while
  // it is the innermost open one, so no pointer here moves while it is open.
  std::vector<Json*> open_;
  std::vector<JsonObjectWriter> writers_;  // one per open object, outermost first
  std::string key_;                        // the key of the member coming next
  std::string repeated_below_top_;
  std::string error_;
};

}  // namespace

std::optional<ParsedJson> ParseJsonDocument(std::string_view text, std::string* error) {
  if (NestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    *error = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    return std::nullopt;
  }
  DocumentBuilder builder;
  if (!Json::sax_parse(text.begin(), text.end(), &builder)) {
    // "[json.exception.parse_error.101] parse error at line 1, column 3: ...";
    // a number too large for a double is out_of_range 406 ("1e400").
    const std::string& what = builder.error();
    size_t start = what.find("] ");
    *error = start == std::string::npos ? what : what.substr(start + 2);
    return std::nullopt;
  }
  if (!builder.repeated_below_top().empty()) {
    *error = "key '" + builder.repeated_below_top() + "' written twice in one JSON object";
    return std::nullopt;
  }
  return builder.Take();
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

Json& AppendNewMember(Json& object, std::string key, Json value) {
  // The members as the vector they are, appended to without a lookup.
  Json::object_t::Container& members = object.get_ref<Json::object_t&>();
  members.emplace_back(std::move(key), std::move(value));
  return members.back().second;
}

Json& JsonObjectWriter::Set(const std::string& key, Json value, bool* repeated) {
  Json::object_t::Container& members = object_->get_ref<Json::object_t&>();
  auto [known, added] = index_.try_emplace(key, members.size());
  if (repeated != nullptr) *repeated = !added;
  if (added) return AppendNewMember(*object_, key, std::move(value));
  Json& member = members[known->second].second;
  member = std::move(value);
  return member;
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
