// Json: recursive-descent reader, and the writer of what it read.
#include "hiertag/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "hiertag/tag_format.h"

namespace hiertag {
namespace {

constexpr int kMaxDepth = 256;

class Parser {
 public:
  Parser(std::string_view text, std::string* error) : text_(text), error_(error) {}

  std::optional<Json> Document() {
    Json value;
    if (!Value(&value, 0)) return std::nullopt;
    SkipSpace();
    if (position_ != text_.size()) {
      Fail("unexpected text after the JSON value");
      return std::nullopt;
    }
    return value;
  }

 private:
  bool Fail(const std::string& message) {
    *error_ = message + " at offset " + std::to_string(position_);
    return false;
  }

  void SkipSpace() {
    while (position_ < text_.size() &&
           (text_[position_] == ' ' || text_[position_] == '\n' || text_[position_] == '\r' ||
            text_[position_] == '\t')) {
      ++position_;
    }
  }

  bool Consume(std::string_view word) {
    if (text_.substr(position_, word.size()) != word) return false;
    position_ += word.size();
    return true;
  }

  bool Value(Json* out, int depth) {
    if (depth > kMaxDepth) return Fail("JSON nested too deeply");
    SkipSpace();
    if (position_ >= text_.size()) return Fail("unexpected end of JSON");
    char c = text_[position_];
    if (c == '{') return Object(out, depth);
    if (c == '[') return Array(out, depth);
    if (c == '"') {
      out->kind = Json::Kind::kString;
      return String(&out->text);
    }
    if (Consume("true")) {
      out->kind = Json::Kind::kBool;
      out->boolean = true;
      return true;
    }
    if (Consume("false")) {
      out->kind = Json::Kind::kBool;
      return true;
    }
    if (Consume("null")) return true;
    return Number(out);
  }

  bool Number(Json* out) {
    size_t start = position_;
    while (position_ < text_.size() && std::string_view("+-0123456789.eE").find(text_[position_]) !=
                                           std::string_view::npos) {
      ++position_;
    }
    if (start == position_) return Fail("unexpected character in JSON");
    std::string digits(text_.substr(start, position_ - start));
    char* end = nullptr;
    out->number = std::strtod(digits.c_str(), &end);
    if (end != digits.c_str() + digits.size()) return Fail("malformed JSON number");
    out->kind = Json::Kind::kNumber;
    return true;
  }

  static void AppendUtf8(unsigned code, std::string* out) {
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  bool Hex4(unsigned* code) {
    if (text_.size() - position_ < 4) return Fail("truncated \\u escape");
    *code = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[position_++];
      *code <<= 4;
      if (c >= '0' && c <= '9') *code |= c - '0';
      else if (c >= 'a' && c <= 'f') *code |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') *code |= c - 'A' + 10;
      else return Fail("bad \\u escape");
    }
    return true;
  }

  bool String(std::string* out) {
    ++position_;  // opening quote
    while (position_ < text_.size()) {
      char c = text_[position_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return Fail("control character in a JSON string");
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (position_ >= text_.size()) break;
      char escape = text_[position_++];
      switch (escape) {
        case '"': case '\\': case '/': out->push_back(escape); break;
        case 'b': out->push_back('\b'); break;
        case 'f': out->push_back('\f'); break;
        case 'n': out->push_back('\n'); break;
        case 'r': out->push_back('\r'); break;
        case 't': out->push_back('\t'); break;
        case 'u': {
          unsigned code = 0;
          if (!Hex4(&code)) return false;
          if (code >= 0xD800 && code < 0xDC00 && Consume("\\u")) {
            unsigned low = 0;
            if (!Hex4(&low)) return false;
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(code, out);
          break;
        }
        default: return Fail("bad escape in a JSON string");
      }
    }
    return Fail("unterminated JSON string");
  }

  bool Array(Json* out, int depth) {
    out->kind = Json::Kind::kArray;
    ++position_;
    SkipSpace();
    if (Consume("]")) return true;
    while (true) {
      out->items.emplace_back();
      if (!Value(&out->items.back(), depth + 1)) return false;
      SkipSpace();
      if (Consume("]")) return true;
      if (!Consume(",")) return Fail("expected ',' or ']' in a JSON array");
    }
  }

  bool Object(Json* out, int depth) {
    out->kind = Json::Kind::kObject;
    ++position_;
    SkipSpace();
    if (Consume("}")) return true;
    while (true) {
      SkipSpace();
      if (position_ >= text_.size() || text_[position_] != '"') return Fail("expected a key in a JSON object");
      std::string key;
      if (!String(&key)) return false;
      SkipSpace();
      if (!Consume(":")) return Fail("expected ':' in a JSON object");
      out->members.emplace_back(std::move(key), Json{});
      if (!Value(&out->members.back().second, depth + 1)) return false;
      SkipSpace();
      if (Consume("}")) return true;
      if (!Consume(",")) return Fail("expected ',' or '}' in a JSON object");
    }
  }

  std::string_view text_;
  std::string* error_;
  size_t position_ = 0;
};

}  // namespace

const Json* Json::Find(std::string_view key) const {
  for (const auto& [name, value] : members) {
    if (name == key) return &value;
  }
  return nullptr;
}

std::optional<Json> ParseJson(std::string_view text, std::string* error) {
  return Parser(text, error).Document();
}

std::string WriteJson(const Json& value) {
  switch (value.kind) {
    case Json::Kind::kNull: return "null";
    case Json::Kind::kBool: return value.boolean ? "true" : "false";
    case Json::Kind::kNumber: {
      // Doubles hold every integer up to 2^53 exactly.
      constexpr double kExactIntegers = 9007199254740992.0;
      char buffer[32];
      if (value.number == std::floor(value.number) && std::fabs(value.number) <= kExactIntegers) {
        std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(value.number));
      } else {
        std::snprintf(buffer, sizeof(buffer), "%.17g", value.number);
      }
      return buffer;
    }
    case Json::Kind::kString: return JsonQuote(value.text);
    case Json::Kind::kArray: {
      std::string text = "[";
      for (size_t i = 0; i < value.items.size(); ++i) text += (i ? "," : "") + WriteJson(value.items[i]);
      return text + "]";
    }
    case Json::Kind::kObject: {
      std::string text = "{";
      for (size_t i = 0; i < value.members.size(); ++i) {
        text += (i ? "," : "") + JsonQuote(value.members[i].first) + ":" + WriteJson(value.members[i].second);
      }
      return text + "}";
    }
  }
  return "null";
}

}  // namespace hiertag
