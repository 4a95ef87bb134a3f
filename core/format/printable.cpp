// Printable text: control characters and ill-formed UTF-8 escaped for display.
#include "hiertag/core/format/printable.h"

#include <cstdio>

namespace hiertag {
namespace {

bool IsContinuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

void AppendHex(std::string* out, const char* format, unsigned value) {
  char buffer[8];
  std::snprintf(buffer, sizeof(buffer), format, value);
  *out += buffer;
}

}  // namespace

size_t Utf8SequenceLength(std::string_view text, size_t at) {
  auto byte = [&](size_t i) { return static_cast<unsigned char>(text[at + i]); };
  size_t left = text.size() - at;
  unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xC2 && lead <= 0xDF   ? 2
                  : lead >= 0xE0 && lead <= 0xEF ? 3
                  : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                 : 0;
  if (length == 0 || left < length) return 0;
  for (size_t i = 1; i < length; ++i) {
    if (!IsContinuation(byte(i))) return 0;
  }
  // The second byte's range excludes overlong forms, surrogates and code points above U+10FFFF.
  unsigned char second = byte(1);
  if (lead == 0xE0 && second < 0xA0) return 0;
  if (lead == 0xED && second > 0x9F) return 0;
  if (lead == 0xF0 && second < 0x90) return 0;
  if (lead == 0xF4 && second > 0x8F) return 0;
  return length;
}

bool IsControlCharacter(std::string_view sequence) {
  if (sequence.size() == 1) {
    auto c = static_cast<unsigned char>(sequence[0]);
    return c < 0x20 || c == 0x7F;
  }
  return sequence.size() == 2 && static_cast<unsigned char>(sequence[0]) == 0xC2 &&
         static_cast<unsigned char>(sequence[1]) <= 0x9F;
}

std::string Printable(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t length = Utf8SequenceLength(text, i);
    if (length == 0) {
      AppendHex(&out, "\\x%02x", static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    std::string_view sequence = text.substr(i, length);
    i += length;
    if (!IsControlCharacter(sequence)) {
      out += sequence;
    } else if (sequence == "\n") {
      out += "\\n";
    } else if (sequence == "\r") {
      out += "\\r";
    } else if (sequence == "\t") {
      out += "\\t";
    } else if (length == 1) {
      AppendHex(&out, "\\x%02x", static_cast<unsigned char>(sequence[0]));
    } else {
      AppendHex(&out, "\\u%04x", static_cast<unsigned char>(sequence[1]));
    }
  }
  return out;
}

}  // namespace hiertag
