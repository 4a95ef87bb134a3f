// Tests of Printable: control characters and ill-formed UTF-8 escaped for display, the rest unchanged.
#include "hiertag/core/format/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace hiertag {
namespace {

TEST(PrintableTest, ControlCharactersAreEscaped) {
  // Check that line breaks, tabs, ESC, NUL, DEL and a C1 control come out as escapes on one line.
  EXPECT_EQ(Printable("line\nbreak"), "line\\nbreak");
  EXPECT_EQ(Printable("a\r\tb"), "a\\r\\tb");
  EXPECT_EQ(Printable("esc\x1b[31m"), "esc\\x1b[31m");
  EXPECT_EQ(Printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(Printable("del\x7f"), "del\\x7f");
  EXPECT_EQ(Printable("csi\xc2\x9b"
                      "2J"),
            "csi\\u009b2J");
  EXPECT_EQ(Printable("nel\xc2\x85"), "nel\\u0085");
}

TEST(PrintableTest, PrintableTextIsUnchanged) {
  // Check that quotes, backslashes, spaces and letters beyond ASCII pass as they are.
  for (std::string text : {"say \"hi\"", "it's", "back\\slash", "a/b[c]%d#e~f",
                           "gr\xc3\xb6\xc3\x9f"
                           "e",
                           "\xe5\xb1\xa4", "\xf0\x9f\x99\x82", "nbsp\xc2\xa0", ""}) {
    EXPECT_EQ(Printable(text), text);
  }
}

TEST(PrintableTest, IllFormedUtf8IsEscapedByteByByte) {
  // Check that bytes starting no well-formed sequence come out as \xHH and the rest of the text is kept.
  EXPECT_EQ(Printable("a\xff"
                      "b"),
            "a\\xffb");
  EXPECT_EQ(Printable("\xc3"), "\\xc3");           // truncated sequence
  EXPECT_EQ(Printable("\xc0\x80"), "\\xc0\\x80");  // overlong NUL
  EXPECT_EQ(Printable("\xed\xa0\x80"
                      "x"),
            "\\xed\\xa0\\x80x");                                     // a UTF-16 surrogate
  EXPECT_EQ(Printable("\xf4\x90\x80\x80"), "\\xf4\\x90\\x80\\x80");  // above U+10FFFF
  EXPECT_EQ(Printable("\x80\xc3\xbc"), "\\x80\xc3\xbc");             // a stray continuation byte, then "ü"
}

TEST(PrintableTest, SequenceLengthsFollowRfc3629) {
  // Check the length of well-formed sequences and 0 for ill-formed ones.
  EXPECT_EQ(Utf8SequenceLength("a", 0), 1u);
  EXPECT_EQ(Utf8SequenceLength("\xc3\xbc", 0), 2u);
  EXPECT_EQ(Utf8SequenceLength("\xe5\xb1\xa4", 0), 3u);
  EXPECT_EQ(Utf8SequenceLength("\xf0\x9f\x99\x82", 0), 4u);
  EXPECT_EQ(Utf8SequenceLength("\xe0\x80\x80", 0), 0u);  // overlong
  EXPECT_EQ(Utf8SequenceLength("\xe5\xb1", 0), 0u);      // truncated
  EXPECT_EQ(Utf8SequenceLength("\xbc", 0), 0u);          // continuation byte alone
}

TEST(PrintableTest, ControlCharacterIsC0DelOrC1) {
  // Check which sequences count as control characters, and that the neighbours of the ranges do not.
  EXPECT_TRUE(IsControlCharacter("\n"));
  EXPECT_TRUE(IsControlCharacter(std::string(1, '\0')));
  EXPECT_TRUE(IsControlCharacter("\x7f"));
  EXPECT_TRUE(IsControlCharacter("\xc2\x80"));
  EXPECT_TRUE(IsControlCharacter("\xc2\x9f"));
  EXPECT_FALSE(IsControlCharacter(" "));
  EXPECT_FALSE(IsControlCharacter("~"));
  EXPECT_FALSE(IsControlCharacter("\xc2\xa0"));
  EXPECT_FALSE(IsControlCharacter("\xc3\xbc"));
}

}  // namespace
}  // namespace hiertag
