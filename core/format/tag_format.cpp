// Tag grammar: formatting, parsing and ancestry of hierarchy tags.
#include "hiertag/core/format/tag_format.h"

#include <cctype>
#include <cstdio>

#include "hiertag/core/format/printable.h"

namespace hiertag {
namespace {

// Marks an absolute qualifier (the full path of a module the caller does not own).
constexpr char kAbsoluteMark = '~';

// "#" separates a tag from a call number in call references (FormatCallRef).
bool IsReservedInQualifier(char c) { return c == '/' || c == '[' || c == ']' || c == '%' || c == '#'; }

bool IsReservedInClass(char c) { return IsReservedInQualifier(c) || c == '.'; }

// Escapes the reserved ASCII characters, and every byte of a control character
// or of ill-formed UTF-8: a tag is one printable line of valid UTF-8 (protobuf
// strings must be) whatever a Python name holds.
std::string PercentEscaped(std::string_view raw, bool (*reserved)(char), char also = '\0') {
  std::string out;
  out.reserve(raw.size());
  auto escape = [&out](char c) {
    char buffer[4];
    std::snprintf(buffer, sizeof(buffer), "%%%02X", static_cast<unsigned char>(c));
    out += buffer;
  };
  for (size_t i = 0; i < raw.size();) {
    size_t length = Utf8SequenceLength(raw, i);
    if (length == 0) {
      escape(raw[i++]);
      continue;
    }
    std::string_view sequence = raw.substr(i, length);
    i += length;
    bool reserved_ascii = length == 1 && (reserved(sequence[0]) || (also != '\0' && sequence[0] == also));
    if (reserved_ascii || IsControlCharacter(sequence)) {
      for (char c : sequence) escape(c);
    } else {
      out += sequence;
    }
  }
  return out;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool SetError(std::string* error, std::string message) {
  if (error != nullptr) *error = std::move(message);
  return false;
}

// Unescapes %HH; false (with the reason) on a bad escape or a reserved character.
bool Unescape(std::string_view escaped, bool (*reserved)(char), std::string_view segment, const char* part,
              std::string* out, std::string* error) {
  for (size_t i = 0; i < escaped.size(); ++i) {
    char c = escaped[i];
    if (c == '%') {
      int hi = i + 2 < escaped.size() ? HexValue(escaped[i + 1]) : -1;
      int lo = i + 2 < escaped.size() ? HexValue(escaped[i + 2]) : -1;
      if (hi < 0 || lo < 0) return SetError(error, "segment '" + std::string(segment) + "' has a bad %-escape");
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (reserved(c)) {
      return SetError(
          error, "segment '" + std::string(segment) + "' has an unescaped '" + std::string(1, c) + "' in its " + part);
    } else {
      out->push_back(c);
    }
  }
  return true;
}

bool ParseSegment(std::string_view text, TagSegment* out, std::string* error) {
  if (text.empty()) return SetError(error, "empty segment");
  size_t class_end = 0;
  while (class_end < text.size() && text[class_end] != '.' && text[class_end] != '[' && text[class_end] != ']') {
    ++class_end;
  }
  if (class_end == 0) return SetError(error, "segment '" + std::string(text) + "' has no class name");
  out->class_name.clear();
  if (!Unescape(text.substr(0, class_end), IsReservedInClass, text, "class name", &out->class_name, error)) {
    return false;
  }
  std::string_view rest = text.substr(class_end);
  if (rest.empty()) return true;
  if (rest.front() == '.') {
    std::string_view digits = rest.substr(1);
    if (digits.empty() || digits.size() > 18) {
      return SetError(error, "segment '" + std::string(text) + "' has a bad index");
    }
    long long value = 0;
    for (char c : digits) {
      if (!std::isdigit(static_cast<unsigned char>(c))) {
        return SetError(error, "segment '" + std::string(text) + "' has a non-numeric index");
      }
      value = value * 10 + (c - '0');
    }
    out->index = value;
    return true;
  }
  if (rest.front() != '[' || rest.back() != ']' || rest.size() < 3) {
    return SetError(error, "segment '" + std::string(text) + "' has a malformed qualifier");
  }
  std::string_view escaped = rest.substr(1, rest.size() - 2);
  if (escaped.front() == kAbsoluteMark) {
    out->absolute = true;
    escaped.remove_prefix(1);
    if (escaped.empty()) {
      return SetError(error, "segment '" + std::string(text) + "' has an empty path after '~'");
    }
  }
  std::string qualifier;
  if (!Unescape(escaped, IsReservedInQualifier, text, "qualifier", &qualifier, error)) return false;
  out->qualifier = std::move(qualifier);
  return true;
}

}  // namespace

std::string EscapeQualifier(std::string_view raw) { return PercentEscaped(raw, IsReservedInQualifier, kAbsoluteMark); }

std::string EscapeClassName(std::string_view raw) { return PercentEscaped(raw, IsReservedInClass); }

std::string FormatSegment(const TagSegment& segment) {
  std::string out = EscapeClassName(segment.class_name);
  if (segment.qualifier) {
    out += "[";
    if (segment.absolute) out.push_back(kAbsoluteMark);
    out += EscapeQualifier(*segment.qualifier) + "]";
  } else if (segment.index) {
    out += "." + std::to_string(*segment.index);
  }
  return out;
}

std::string FormatTag(const std::vector<TagSegment>& segments) {
  std::string tag;
  for (const TagSegment& segment : segments) tag += "/" + FormatSegment(segment);
  return tag;
}

std::optional<std::string> CanonicalTag(std::string_view tag) {
  std::optional<std::vector<TagSegment>> segments = ParseTag(tag);
  if (!segments) return std::nullopt;
  return FormatTag(*segments);
}

std::optional<std::vector<TagSegment>> ParseTag(std::string_view tag, std::string* error) {
  if (tag.empty() || tag.front() != '/') {
    SetError(error, "tag must start with '/'");
    return std::nullopt;
  }
  std::vector<TagSegment> segments;
  size_t start = 1;
  while (true) {
    size_t end = tag.find('/', start);
    std::string_view piece = tag.substr(start, end == std::string_view::npos ? tag.npos : end - start);
    TagSegment segment;
    if (!ParseSegment(piece, &segment, error)) return std::nullopt;
    segments.push_back(std::move(segment));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return segments;
}

bool IsTagAncestorOrSelf(std::string_view ancestor, std::string_view tag) {
  if (tag.size() < ancestor.size() || tag.compare(0, ancestor.size(), ancestor) != 0) return false;
  return tag.size() == ancestor.size() || tag[ancestor.size()] == '/';
}

std::string_view ParentTag(std::string_view tag) {
  size_t slash = tag.rfind('/');
  if (slash == std::string_view::npos || slash == 0) return {};
  return tag.substr(0, slash);
}

std::string FormatCallRef(std::string_view tag, std::optional<int64_t> call) {
  return call ? std::string(tag) + "#" + std::to_string(*call) : std::string(tag);
}

std::optional<CallRef> ParseCallRef(std::string_view text) {
  size_t hash = text.rfind('#');
  if (hash == std::string_view::npos) return CallRef{std::string(text), std::nullopt};
  std::string_view digits = text.substr(hash + 1);
  if (digits.empty() || digits.size() > 12) return std::nullopt;
  int64_t call = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    call = call * 10 + (c - '0');
  }
  return CallRef{std::string(text.substr(0, hash)), call};
}

}  // namespace hiertag
