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

TEST(JsonTest, RepeatedTopLevelKeyKeepsItsFirstPlaceAndLastValue) {
  // Check that the document holds a repeated top-level key once, where it was first written, with the value
  // written last (what nlohmann's own parser did, which the builder replaced for speed).
  std::string error;
  std::optional<ParsedJson> parsed =
      ParseJsonDocument(R"({"/Net":{"path":""},"/Net/A":{},"/Net":{"path":"x"}})", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(WriteJson(parsed->value), R"({"/Net":{"path":"x"},"/Net/A":{}})");
}

TEST(JsonTest, OutermostObjectCountsAsTopLevelInsideAnArray) {
  // Check that an object directly inside a top-level array is "top level" for repeated keys (reported, the
  // document kept), while one inside another object refuses the document: the rule counts open objects only.
  std::string error;
  std::optional<ParsedJson> parsed = ParseJsonDocument(R"([{"a":1,"a":2}])", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->repeated_top_level_keys, std::vector<std::string>{"a"});
  EXPECT_EQ(WriteJson(parsed->value), R"([{"a":2}])");
  EXPECT_FALSE(ParseJsonDocument(R"({"x":[{"a":1,"a":2}]})", &error));
  EXPECT_EQ(error, "key 'a' written twice in one JSON object");
}

TEST(JsonTest, RepeatedObjectIsReplacedWhole) {
  // Check that a top-level key repeated with an object value takes the later object whole, members and all,
  // at the first place, and that the members after it land in the right objects.
  std::string error;
  std::optional<ParsedJson> parsed =
      ParseJsonDocument(R"({"t":{"a":[1],"b":2},"u":{},"t":{"c":{"d":[3,{"e":4}]}},"v":5})", &error);
  ASSERT_TRUE(parsed) << error;
  EXPECT_EQ(parsed->repeated_top_level_keys, std::vector<std::string>{"t"});
  EXPECT_EQ(WriteJson(parsed->value), R"({"t":{"c":{"d":[3,{"e":4}]}},"u":{},"v":5})");
}

TEST(JsonTest, EveryKindOfValueReadsBackAsWritten) {
  // Check that values of every kind, nested in objects and arrays at several depths, come back as written.
  const std::string text =
      R"({"a":[1,-2,3.5,"s",true,false,null,{"b":[[],{}],"c":{"d":[{"e":"f"}]}}],"g":{},"h":[],"i":18446744073709551615})";
  std::string error;
  std::optional<Json> value = ParseJson(text, &error);
  ASSERT_TRUE(value) << error;
  EXPECT_EQ(WriteJson(*value), text);
  EXPECT_TRUE((*value)["a"][1].is_number_integer());
  EXPECT_TRUE((*value)["i"].is_number_unsigned());
  EXPECT_TRUE((*value)["a"][2].is_number_float());
}

TEST(JsonTest, ScalarDocumentsParse) {
  // Check that a document that is a single value, not an object or array, parses.
  std::string error;
  std::optional<Json> value = ParseJson(R"("text")", &error);
  ASSERT_TRUE(value) << error;
  EXPECT_EQ(*value, "text");
  value = ParseJson("  42 ", &error);
  ASSERT_TRUE(value) << error;
  EXPECT_EQ(*value, 42);
  EXPECT_FALSE(ParseJson("42 43", &error));
  EXPECT_FALSE(ParseJson("", &error));
}

TEST(JsonTest, ManyMembersParseInOrder) {
  // Check that an object of many members (a module table of a deep model) keeps them all, in order.
  std::string text = "{";
  for (int i = 0; i < 5000; ++i)
    text += (i ? ",\"/Net/L." : "\"/Net/L.") + std::to_string(4999 - i) + "\":" + std::to_string(i);
  text += "}";
  std::string error;
  std::optional<Json> value = ParseJson(text, &error);
  ASSERT_TRUE(value) << error;
  ASSERT_EQ(value->size(), 5000u);
  int i = 0;
  for (const auto& [key, member] : value->items()) {
    EXPECT_EQ(key, "/Net/L." + std::to_string(4999 - i));
    EXPECT_EQ(member, i);
    ++i;
  }
  EXPECT_EQ(WriteJson(*value), text);
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
