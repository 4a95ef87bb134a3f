// Printable text: names from a model file or a command line, made safe to print.
//
// Module paths and class names are whatever Python allows: a name may hold a
// newline, a tab or an ESC that would break a one-line message or drive the
// terminal. Every line the tool prints, and every error hiertag raises, passes
// the names it quotes through Printable; the tag grammar escapes the same
// characters in tags (tag_format.h). JSON and CSV output carry exact values
// and need none of this.
//
//   control characters  C0 U+0000-U+001F and DEL U+007F: \n \r \t, others \xHH;
//                       C1 U+0080-U+009F: \u00HH
//   ill-formed UTF-8    each byte that starts no well-formed sequence: \xHH
//   everything else     unchanged (a backslash too: the escape is for display)
//
// Example: "encoder.nl\nx" -> "encoder.nl\\nx" (one line), "esc\x1b[31m" -> "esc\\x1b[31m".
// No torch, no protobuf.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace hiertag {

// The length (1-4) of the well-formed UTF-8 sequence at text[at] (RFC 3629: no
// overlong forms, no surrogates, nothing above U+10FFFF), or 0 when the bytes
// there are none.
size_t Utf8SequenceLength(std::string_view text, size_t at);

// True when `sequence`, one well-formed UTF-8 sequence, is a control character
// (C0, DEL or C1).
bool IsControlCharacter(std::string_view sequence);

// `text` with control characters and ill-formed UTF-8 escaped as above.
std::string Printable(std::string_view text);

}  // namespace hiertag
