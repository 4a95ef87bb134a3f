// Tests of the tag grammar: segment formatting, tag parsing, ancestry, JSON quoting.
#include "hiertag/core/format/tag_format.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hiertag {
namespace {

std::string Join(const std::vector<TagSegment>& segments) {
  std::string tag;
  for (const TagSegment& segment : segments) tag += "/" + FormatSegment(segment);
  return tag;
}

// Parses a tag that must be rejected and returns the reason given.
std::string RejectionReason(std::string_view tag) {
  std::string error;
  auto parsed = ParseTag(tag, &error);
  EXPECT_FALSE(parsed.has_value()) << "'" << tag << "' was accepted";
  EXPECT_FALSE(error.empty()) << "'" << tag << "' was rejected without a reason";
  EXPECT_EQ(error.find('\n'), std::string::npos) << "reason is not one line: " << error;
  return error;
}

TEST(TagFormatTest, PlainSegmentWithIndexRoundTrips) {
  // Check that an HF-style "Class.N" segment is formatted and parsed back unchanged.
  EXPECT_EQ(FormatSegment({"BertLayer", 0, std::nullopt}), "BertLayer.0");
  EXPECT_EQ(FormatSegment({"BertModel", std::nullopt, std::nullopt}), "BertModel");

  auto parsed = ParseTag("/BertModel/BertEncoder/BertLayer.0");
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 3u);
  EXPECT_EQ((*parsed)[0].class_name, "BertModel");
  EXPECT_FALSE((*parsed)[0].index.has_value());
  EXPECT_FALSE((*parsed)[0].qualifier.has_value());
  EXPECT_EQ((*parsed)[2].class_name, "BertLayer");
  ASSERT_TRUE((*parsed)[2].index.has_value());
  EXPECT_EQ(*(*parsed)[2].index, 0);
  EXPECT_FALSE((*parsed)[2].qualifier.has_value());
  EXPECT_EQ(Join(*parsed), "/BertModel/BertEncoder/BertLayer.0");
}

TEST(TagFormatTest, MultiDigitIndexRoundTrips) {
  // Check that a list index with several digits survives a round trip.
  auto parsed = ParseTag("/Net/Block.123");
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 2u);
  ASSERT_TRUE((*parsed)[1].index.has_value());
  EXPECT_EQ(*(*parsed)[1].index, 123);
  EXPECT_EQ(Join(*parsed), "/Net/Block.123");
}

TEST(TagFormatTest, QualifiedSegmentRoundTrips) {
  // Check that a disambiguated "Class[qualifier]" segment is formatted and parsed back unchanged.
  EXPECT_EQ(FormatSegment({"Conv1D", std::nullopt, std::string("c_attn")}), "Conv1D[c_attn]");

  auto parsed = ParseTag("/GPT2LMHeadModel/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]");
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 5u);
  const TagSegment& last = parsed->back();
  EXPECT_EQ(last.class_name, "Conv1D");
  EXPECT_FALSE(last.index.has_value());
  ASSERT_TRUE(last.qualifier.has_value());
  EXPECT_EQ(*last.qualifier, "c_attn");
  EXPECT_EQ(Join(*parsed), "/GPT2LMHeadModel/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]");
}

TEST(TagFormatTest, QualifierWithDotsIsNotEscaped) {
  // Check that '.' in a qualifier (a relative module path) is kept literally, not escaped.
  EXPECT_EQ(FormatSegment({"Bottleneck", std::nullopt, std::string("layer1.0")}), "Bottleneck[layer1.0]");
  auto parsed = ParseTag("/ResNet/Bottleneck[layer1.0]");
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 2u);
  EXPECT_EQ((*parsed)[1].class_name, "Bottleneck");
  EXPECT_FALSE((*parsed)[1].index.has_value());
  ASSERT_TRUE((*parsed)[1].qualifier.has_value());
  EXPECT_EQ(*(*parsed)[1].qualifier, "layer1.0");
}

TEST(TagFormatTest, ReservedQualifierCharactersAreEscaped) {
  // Check that '/', '[', ']' and '%' in a qualifier are percent-escaped and unescaped on parse.
  const std::string raw = "a/b[c]d%e";
  EXPECT_EQ(EscapeQualifier(raw), "a%2Fb%5Bc%5Dd%25e");
  const std::string segment = FormatSegment({"Expert", std::nullopt, raw});
  EXPECT_EQ(segment, "Expert[a%2Fb%5Bc%5Dd%25e]");

  auto parsed = ParseTag("/Net/" + segment);
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 2u);
  ASSERT_TRUE((*parsed)[1].qualifier.has_value());
  EXPECT_EQ(*(*parsed)[1].qualifier, raw);
  EXPECT_EQ(Join(*parsed), "/Net/" + segment);
}

TEST(TagFormatTest, UnreservedQualifierCharactersAreNotEscaped) {
  // Check that escaping leaves every character but the four reserved ones alone.
  EXPECT_EQ(EscapeQualifier("h.0.attn_dropout-x:y"), "h.0.attn_dropout-x:y");
  EXPECT_EQ(EscapeQualifier(""), "");
}

TEST(TagFormatTest, LowercaseHexEscapeIsAccepted) {
  // Check that a %-escape with lowercase hex digits (grammar HEXDIG) decodes like uppercase.
  auto parsed = ParseTag("/Net/Expert[a%2fb]");
  ASSERT_TRUE(parsed.has_value());
  ASSERT_TRUE((*parsed)[1].qualifier.has_value());
  EXPECT_EQ(*(*parsed)[1].qualifier, "a/b");
}

TEST(TagFormatTest, AbsoluteQualifierRoundTrips) {
  // Check that a qualifier naming the full path of a module the caller does not own
  // is written after '~' and parsed back as absolute.
  TagSegment outside{"MultiHeadedAttention", std::nullopt, std::string("encoder.layers.0.self_attn"), true};
  EXPECT_EQ(FormatSegment(outside), "MultiHeadedAttention[~encoder.layers.0.self_attn]");

  const std::string tag = "/Net/EncoderLayer.0/SublayerConnection.0/MultiHeadedAttention[~encoder.layers.0.self_attn]";
  auto parsed = ParseTag(tag);
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 4u);
  const TagSegment& last = parsed->back();
  EXPECT_EQ(last.class_name, "MultiHeadedAttention");
  EXPECT_TRUE(last.absolute);
  ASSERT_TRUE(last.qualifier.has_value());
  EXPECT_EQ(*last.qualifier, "encoder.layers.0.self_attn");
  EXPECT_EQ(Join(*parsed), tag);
}

TEST(TagFormatTest, RelativeQualifierIsNotAbsolute) {
  // Check that plain segments and qualifiers without a leading '~' parse as not absolute.
  auto parsed = ParseTag("/Net/Block.0/Conv1D[c_attn]");
  ASSERT_TRUE(parsed.has_value());
  for (const TagSegment& segment : *parsed) EXPECT_FALSE(segment.absolute) << FormatSegment(segment);
}

TEST(TagFormatTest, TildeInRelativeQualifierIsEscaped) {
  // Check that a relative path starting with '~' is written %7E, so it cannot be read as absolute.
  EXPECT_EQ(EscapeQualifier("~a"), "%7Ea");
  const std::string segment = FormatSegment({"Expert", std::nullopt, std::string("~a"), false});
  EXPECT_EQ(segment, "Expert[%7Ea]");
  auto parsed = ParseTag("/Net/" + segment);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_FALSE((*parsed)[1].absolute);
  EXPECT_EQ((*parsed)[1].qualifier, "~a");
}

TEST(TagFormatTest, TildeInsideAbsoluteQualifierIsEscaped) {
  // Check that only the marking '~' of an absolute qualifier stays literal; a '~' of its path is escaped.
  const std::string segment = FormatSegment({"Expert", std::nullopt, std::string("experts.~b"), true});
  EXPECT_EQ(segment, "Expert[~experts.%7Eb]");
  auto parsed = ParseTag("/Net/" + segment);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_TRUE((*parsed)[1].absolute);
  EXPECT_EQ((*parsed)[1].qualifier, "experts.~b");
  EXPECT_EQ(Join(*parsed), "/Net/" + segment);
}

TEST(TagFormatTest, LiteralTildeAfterFirstCharacterIsRead) {
  // Check that a '~' inside a qualifier, which format 1 wrote unescaped, is read literally.
  auto parsed = ParseTag("/Net/Expert[a~b]");
  ASSERT_TRUE(parsed.has_value());
  EXPECT_FALSE((*parsed)[1].absolute);
  EXPECT_EQ((*parsed)[1].qualifier, "a~b");
}

TEST(TagFormatTest, AbsoluteQualifierWithoutPathIsRejected) {
  // Check that '~' alone is no qualifier, and the path after it obeys the escaping rules.
  EXPECT_NE(RejectionReason("/Net/A[~]").find("A[~]"), std::string::npos);
  RejectionReason("/Net/A[~b%zz]");
  RejectionReason("/Net/A[~b[c]");
}

TEST(TagFormatTest, WellFormedTagsAreAccepted) {
  // Check that tags following the grammar parse and are rebuilt byte for byte.
  for (std::string_view tag : {"/A", "/A/B.1/C[x.y]", "/Net/Expert[experts.a%2Fb]",
                               "/Net/Conv1D[c_attn]/Conv1D[c_proj]", "/Net/A.0/B[~x.y]/C[%7Ez]"}) {
    std::string error;
    auto parsed = ParseTag(tag, &error);
    ASSERT_TRUE(parsed.has_value()) << tag << ": " << error;
    EXPECT_EQ(Join(*parsed), tag);
  }
}

TEST(TagFormatTest, TagWithoutLeadingSlashIsRejected) {
  // Check that a tag must start with '/'.
  RejectionReason("");
  RejectionReason("A/B");
  RejectionReason("BertModel");
}

TEST(TagFormatTest, EmptySegmentIsRejected) {
  // Check that "/" alone, "//" and a trailing "/" are rejected as empty segments.
  RejectionReason("/");
  RejectionReason("/A//B");
  RejectionReason("/A/");
}

TEST(TagFormatTest, SegmentWithoutClassIsRejected) {
  // Check that a segment must start with a class name.
  EXPECT_NE(RejectionReason("/.0").find(".0"), std::string::npos);
  EXPECT_NE(RejectionReason("/A/[x]").find("[x]"), std::string::npos);
}

TEST(TagFormatTest, NonNumericIndexIsRejected) {
  // Check that "Class.x" and "Class." are rejected, naming the segment.
  EXPECT_NE(RejectionReason("/Net/A.x").find("A.x"), std::string::npos);
  RejectionReason("/Net/A.");
  RejectionReason("/Net/A.1.2");
  RejectionReason("/Net/A.-1");
}

TEST(TagFormatTest, UnterminatedQualifierIsRejected) {
  // Check that an opening '[' without a closing ']' is rejected, naming the segment.
  EXPECT_NE(RejectionReason("/Net/A[b").find("A[b"), std::string::npos);
  RejectionReason("/Net/A[b]c");
  RejectionReason("/Net/A[]");
  RejectionReason("/Net/A]");
}

TEST(TagFormatTest, UnescapedBracketInQualifierIsRejected) {
  // Check that a raw ']' or '[' inside a qualifier is rejected.
  EXPECT_NE(RejectionReason("/Net/A[b]]").find("A[b]]"), std::string::npos);
  RejectionReason("/Net/A[b]c]");
  RejectionReason("/Net/A[b[c]");
}

TEST(TagFormatTest, BadPercentEscapeIsRejected) {
  // Check that '%' must be followed by two hex digits inside a qualifier.
  EXPECT_NE(RejectionReason("/Net/A[b%zz]").find("A[b%zz]"), std::string::npos);
  RejectionReason("/Net/A[b%2]");
  RejectionReason("/Net/A[b%]");
  RejectionReason("/Net/A[%G0]");
}

TEST(TagFormatTest, ParseTagWithoutErrorPointerStillRejects) {
  // Check that a malformed tag is rejected when the caller passes no error string.
  EXPECT_FALSE(ParseTag("/A//B").has_value());
  EXPECT_TRUE(ParseTag("/A/B").has_value());
}

TEST(TagFormatTest, TagIsAncestorOfItsDescendants) {
  // Check that a tag is an ancestor-or-self of itself and of every segment-wise extension.
  EXPECT_TRUE(IsTagAncestorOrSelf("/A", "/A"));
  EXPECT_TRUE(IsTagAncestorOrSelf("/A", "/A/B"));
  EXPECT_TRUE(IsTagAncestorOrSelf("/A/B", "/A/B/C.0"));
  EXPECT_TRUE(IsTagAncestorOrSelf("/A/B", "/A/B/C[x%2Fy]"));
}

TEST(TagFormatTest, StringPrefixIsNotTagAncestor) {
  // Check that a mere string prefix that ends inside a segment is not an ancestor.
  EXPECT_FALSE(IsTagAncestorOrSelf("/A/B", "/A/BC"));
  EXPECT_FALSE(IsTagAncestorOrSelf("/A/B", "/A/B.1"));
  EXPECT_FALSE(IsTagAncestorOrSelf("/A/B", "/A/B[x]"));
  EXPECT_FALSE(IsTagAncestorOrSelf("/A/B/C", "/A/B"));
  EXPECT_FALSE(IsTagAncestorOrSelf("/A/B", "/A/C"));
}

TEST(TagFormatTest, ParentTagDropsLastSegment) {
  // Check that ParentTag removes exactly the last segment, escaped '/' in qualifiers included.
  EXPECT_EQ(ParentTag("/A/B/C"), "/A/B");
  EXPECT_EQ(ParentTag("/A/B.0"), "/A");
  EXPECT_EQ(ParentTag("/Net/Expert[a%2Fb]"), "/Net");
}

TEST(TagFormatTest, ParentTagOfRootIsEmpty) {
  // Check that a root tag has the empty parent tag.
  EXPECT_EQ(ParentTag("/Net"), "");
  EXPECT_EQ(ParentTag("/Bottleneck[layer1.0]"), "");
}

TEST(TagFormatTest, ClassNameWithReservedCharactersIsEscapedAndRoundTrips) {
  // Check that a class name holding "/", ".", "[", "]", "%" or "#" is %-escaped and reads back.
  for (const std::string& name :
       {std::string("Blk[x]"), std::string("Block.1"), std::string("A/B"), std::string("H#1"), std::string("50%")}) {
    std::string segment = FormatSegment({name, std::nullopt, std::nullopt});
    EXPECT_EQ(segment.find_first_of("/.[]#"), std::string::npos) << segment;
    std::string error;
    std::optional<std::vector<TagSegment>> parsed = ParseTag("/Net/" + segment, &error);
    ASSERT_TRUE(parsed) << error;
    EXPECT_EQ(parsed->back().class_name, name);
    EXPECT_FALSE(parsed->back().index);
    EXPECT_FALSE(parsed->back().qualifier);
  }
  EXPECT_EQ(FormatSegment({"Blk[x]", 2, std::nullopt}), "Blk%5Bx%5D.2");
}

TEST(TagFormatTest, OrdinaryClassNameIsNotEscaped) {
  // Check that class names of letters, digits and underscores are written as they are.
  EXPECT_EQ(FormatSegment({"GPT2Block_v2", 0, std::nullopt}), "GPT2Block_v2.0");
}

TEST(TagFormatTest, HashInClassOrQualifierMustBeEscaped) {
  // Check that a raw "#" (it separates a call number) is refused in a tag, and escaped when written.
  std::string error;
  EXPECT_FALSE(ParseTag("/Net/H#1", &error));
  EXPECT_NE(error.find("unescaped '#'"), std::string::npos) << error;
  EXPECT_FALSE(ParseTag("/Net/Conv1D[a#b]", &error));
  EXPECT_EQ(EscapeQualifier("a#b"), "a%23b");
}

TEST(TagFormatTest, ControlCharactersAndIllFormedUtf8AreEscapedByteByByte) {
  // Check that a qualifier and a class name holding control characters or bytes that are not
  // UTF-8 are written as %HH of each byte, and parse back to the raw names.
  const std::string path = std::string("line\nbreak\t\x1b[31m\x7f\xc2\x9b") + '\0' + "\xff";
  EXPECT_EQ(EscapeQualifier(path), "line%0Abreak%09%1B%5B31m%7F%C2%9B%00%FF");
  EXPECT_EQ(EscapeClassName("Blk\n.1"), "Blk%0A%2E1");
  const std::string tag = "/Net/" + FormatSegment({"Blk\n", std::nullopt, path});
  EXPECT_EQ(tag, "/Net/Blk%0A[line%0Abreak%09%1B%5B31m%7F%C2%9B%00%FF]");
  auto parsed = ParseTag(tag);
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ((*parsed)[1].class_name, "Blk\n");
  EXPECT_EQ((*parsed)[1].qualifier, path);
}

TEST(TagFormatTest, PrintableCharactersBeyondTheReservedOnesAreNotEscaped) {
  // Check that quotes, spaces, "::", "|" and letters beyond ASCII stay as they are.
  EXPECT_EQ(EscapeQualifier("say \"hi\" it's col::on pipe|x gr\xc3\xb6\xc3\x9f"
                            "e \xe5\xb1\xa4"),
            "say \"hi\" it's col::on pipe|x gr\xc3\xb6\xc3\x9f"
            "e \xe5\xb1\xa4");
  EXPECT_EQ(EscapeClassName("\xe5\xb1\xa4"), "\xe5\xb1\xa4");
}

TEST(TagFormatTest, CanonicalTagEscapesWhatEarlierWritersLeftRaw) {
  // Check that a tag holding a raw control character, and its %-escaped spelling, have one canonical form.
  EXPECT_EQ(CanonicalTag("/Net/Expert[line\nbreak]"), "/Net/Expert[line%0Abreak]");
  EXPECT_EQ(CanonicalTag("/Net/Expert[line%0abreak]"), "/Net/Expert[line%0Abreak]");
  EXPECT_EQ(CanonicalTag("/Net/Block.0/Conv1D[c_attn]"), "/Net/Block.0/Conv1D[c_attn]");
}

TEST(TagFormatTest, CanonicalTagOfAnUnparseableTagIsNone) {
  // Check that a tag outside the grammar has no canonical form.
  EXPECT_FALSE(CanonicalTag("Net/Block"));
  EXPECT_FALSE(CanonicalTag("/Net/Expert[a]b]"));
}

TEST(TagFormatTest, CallRefRoundTrips) {
  // Check that "TAG#K" names call K of TAG and "TAG" every call.
  EXPECT_EQ(FormatCallRef("/Net/Block", 3), "/Net/Block#3");
  EXPECT_EQ(FormatCallRef("/Net/Block", std::nullopt), "/Net/Block");
  std::optional<CallRef> one = ParseCallRef("/Net/Block#3");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->tag, "/Net/Block");
  EXPECT_EQ(one->call, 3);
  std::optional<CallRef> every = ParseCallRef("/Net/Conv1D[c%23attn]");
  ASSERT_TRUE(every);
  EXPECT_EQ(every->tag, "/Net/Conv1D[c%23attn]");
  EXPECT_FALSE(every->call);
}

TEST(TagFormatTest, CallRefWithNonDecimalCallIsRejected) {
  // Check that something other than digits after "#" is no call reference.
  EXPECT_FALSE(ParseCallRef("/Net/Block#"));
  EXPECT_FALSE(ParseCallRef("/Net/Block#x1"));
  EXPECT_FALSE(ParseCallRef("/Net/Block#-1"));
}

}  // namespace
}  // namespace hiertag
