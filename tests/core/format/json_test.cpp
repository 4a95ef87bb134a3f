// Tests of the JSON codec (json.h): strict parsing, repeated keys, nesting cap,
// and the list helpers the tagged entries use.
#include "hiertag/core/format/json.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hiertag {
namespace {

TEST(JsonTest, ObjectKeepsMembersInWrittenOrder) {
  // Check that members come back in the order written, not sorted.
  std::string error;
  std::optional<Json> value = ParseJson(R"({"b":1,"a":2,"c":3})", &error);
  ASSERT_TRUE(value) << error;
  std::vector<std::string> keys;
  for (const auto& [key, member] : value->items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"b", "a", "c"}));
  EXPECT_EQ(WriteJson(*value), R"({"b":1,"a":2,"c":3})");
}

TEST(JsonTest, RepeatedTopLevelKeyIsReported) {
  // Check that a key written twice in the top-level object is reported, not kept silently.
  std::string error;
  std::optional<ParsedJson> parsed = ParseJsonDocument(R"({"/Net":{},"/Net/A":{},"/Net":{}})", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->repeated_top_level_keys, std::vector<std::string>{"/Net"});
  EXPECT_FALSE(ParseJson(R"({"/Net":{},"/Net":{}})", &error));
  EXPECT_EQ(error, "key '/Net' written twice in one JSON object");
}

TEST(JsonTest, DistinctKeysAreNotReported) {
  // Check that equal keys in different objects are no repetition.
  std::string error;
  std::optional<ParsedJson> parsed = ParseJsonDocument(R"({"a":{"path":"x"},"b":{"path":"y"}})", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_TRUE(parsed->repeated_top_level_keys.empty());
}

TEST(JsonTest, RepeatedNestedKeyIsRefused) {
  // Check that a key written twice in a nested object refuses the document.
  std::string error;
  EXPECT_FALSE(ParseJsonDocument(R"({"/Net":{"path":"","path":"x"}})", &error));
  EXPECT_EQ(error, "key 'path' written twice in one JSON object");
}

TEST(JsonTest, MalformedTextIsRefusedWithReason) {
  // Check that malformed JSON gives a one-line reason naming where it failed.
  std::string error;
  EXPECT_FALSE(ParseJson(R"({"a":)", &error));
  EXPECT_NE(error.find("column"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(JsonTest, NumberOverflowIsRefusedWithReason) {
  // Check that a number too large for a double (found by json_fuzzer) is refused with a reason, not thrown.
  std::string error;
  EXPECT_FALSE(ParseJson("1e39999999999", &error));
  EXPECT_NE(error.find("number overflow"), std::string::npos) << error;
  EXPECT_FALSE(ParseJsonDocument(R"({"/Net": {"path": "", "class": "x", "calls": [1e400]}})", &error));
  EXPECT_EQ(error.find("[json.exception"), std::string::npos) << error;
  EXPECT_TRUE(ParseJson("[1e308]", &error)) << error;
}

TEST(JsonTest, DeepNestingIsRefusedBeforeParsing) {
  // Check that nesting deeper than the cap is refused, and nesting at the cap is read.
  std::string error;
  std::string deep(kMaxJsonDepth + 1, '[');
  deep += std::string(kMaxJsonDepth + 1, ']');
  EXPECT_FALSE(ParseJson(deep, &error));
  EXPECT_NE(error.find("nested deeper"), std::string::npos);
  std::string allowed(kMaxJsonDepth, '[');
  allowed += std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(ParseJson(allowed, &error)) << error;
}

TEST(JsonTest, BracketsInStringsDoNotCountAsNesting) {
  // Check that brackets inside strings (tags hold them) do not count as nesting.
  std::string error;
  std::string text = "[\"" + std::string(kMaxJsonDepth + 5, '[') + "\\\"\"]";
  EXPECT_TRUE(ParseJson(text, &error)) << error;
}

TEST(JsonTest, StringListRoundTripsEscapes) {
  // Check that a list of strings with quotes, backslashes and controls round-trips.
  std::vector<std::string> items = {"/Net/Odd[a\"b\\c]", "tab\there", std::string("nul\0x", 5)};
  std::string text = WriteStringList(items);
  EXPECT_EQ(ReadStringList(text), items);
  EXPECT_EQ(WriteStringList({"/Net/A"}), R"(["/Net/A"])");
}

TEST(JsonTest, ReadStringsRefusesOtherValues) {
  // Check that only an array of strings reads as one.
  EXPECT_FALSE(ReadStringList(R"(["a", 1])"));
  EXPECT_FALSE(ReadStringList(R"({"a":1})"));
  EXPECT_FALSE(ReadStringList("not json"));
}

TEST(JsonTest, OrdinalsAreWholeNumbersInRange) {
  // Check that call ordinals must be whole numbers from 0 to 2^40.
  std::string error;
  EXPECT_EQ(ReadOrdinals(*ParseJson("[0,1,7]", &error)), (std::vector<int64_t>{0, 1, 7}));
  EXPECT_FALSE(ReadOrdinals(*ParseJson("[-1]", &error)));
  EXPECT_FALSE(ReadOrdinals(*ParseJson("[1.5]", &error)));
  EXPECT_FALSE(ReadOrdinals(*ParseJson("[2000000000000]", &error)));
  EXPECT_FALSE(ReadOrdinals(*ParseJson(R"(["1"])", &error)));
}

TEST(JsonTest, InvalidUtf8IsWrittenWithReplacement) {
  // Check that a string that is not UTF-8 is written (JSON cannot hold raw bytes) rather than thrown on.
  std::string text =
      WriteJson(Json(std::string("a\xff"
                                 "b")));
  EXPECT_EQ(text,
            "\"a\xef\xbf\xbd"
            "b\"");
}

}  // namespace
}  // namespace hiertag
