// Tests of the module-table and rewrite-record codec (tagged_entries.h).
#include "hiertag/core/format/tagged_entries.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hiertag {
namespace {

TEST(TaggedEntriesTest, DefaultFieldsAreNotWritten) {
  // Check that an entry with one call, run, and nothing folded writes path and class only.
  TableEntry entry{"/Net/Block", "block", "pkg.Block", {0}, {0}, true, {}};
  EXPECT_EQ(WriteModuleTable({entry}), R"({"/Net/Block":{"path":"block","class":"pkg.Block"}})");
}

TEST(TaggedEntriesTest, OptionalFieldsAreWrittenWhenTheyDiffer) {
  // Check that calls, parent_calls, ran and folded_into are written when not their defaults.
  TableEntry entry{"/Net/Block", "block", "pkg.Block", {0, 2}, {0, 1}, false, {"onnx::Add_5"}};
  EXPECT_EQ(WriteModuleTable({entry}),
            R"({"/Net/Block":{"path":"block","class":"pkg.Block","calls":[0,2],"parent_calls":[0,1],)"
            R"("ran":false,"folded_into":["onnx::Add_5"]}})");
}

TEST(TaggedEntriesTest, EntriesKeepTheirOrder) {
  // Check that the table lists entries in the order given.
  EXPECT_EQ(WriteModuleTable({{"/Net/B", "b", "B", {}, {}, true, {}}, {"/Net/A", "a", "A", {}, {}, true, {}}}),
            R"({"/Net/B":{"path":"b","class":"B"},"/Net/A":{"path":"a","class":"A"}})");
}

TEST(TaggedEntriesTest, TagListedTwiceKeepsItsFirstPlaceAndLastEntry) {
  // Check that a tag given twice is written once, where it came first, with the entry given last.
  EXPECT_EQ(WriteModuleTable({{"/Net/B", "b", "B", {}, {}, true, {}},
                              {"/Net/A", "a", "A", {}, {}, true, {}},
                              {"/Net/B", "b2", "B2", {}, {}, true, {}}}),
            R"({"/Net/B":{"path":"b2","class":"B2"},"/Net/A":{"path":"a","class":"A"}})");
}

TEST(TaggedEntriesTest, WrittenEntryReadsBack) {
  // Check that an entry written and read again is the same entry.
  TableEntry entry{"/Net/Block", "block", "pkg.Block", {1, 3}, {0, 1}, false, {"w"}};
  std::string error;
  std::optional<Json> table = ParseJson(WriteModuleTable({entry}), &error);
  ASSERT_TRUE(table) << error;
  std::optional<TableEntry> read = ReadModuleTableEntry("/Net/Block", (*table)["/Net/Block"]);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->path, "block");
  EXPECT_EQ(read->class_name, "pkg.Block");
  EXPECT_EQ(read->calls, (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(read->call_count(), 2);
  EXPECT_EQ(read->parent_calls, (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(read->ran);
  EXPECT_EQ(read->folded_into, std::vector<std::string>{"w"});
}

TEST(TaggedEntriesTest, EntryWithoutPathOrClassIsNotRead) {
  // Check that an entry lacking a string path or class does not read.
  std::string error;
  EXPECT_FALSE(ReadModuleTableEntry("/Net", *ParseJson(R"({"class":"x"})", &error)));
  EXPECT_FALSE(ReadModuleTableEntry("/Net", *ParseJson(R"({"path":1,"class":"x"})", &error)));
  EXPECT_TRUE(ReadModuleTableEntry("/Net", *ParseJson(R"({"path":"","class":"x"})", &error)));
}

TEST(TaggedEntriesTest, MalformedOptionalFieldsReadAsDefaults) {
  // Check that malformed optional fields read as their defaults (validate reports them).
  std::string error;
  std::optional<TableEntry> read = ReadModuleTableEntry(
      "/Net", *ParseJson(R"({"path":"","class":"x","calls":"two","parent_calls":[0,0,0],"ran":"no"})", &error));
  ASSERT_TRUE(read);
  EXPECT_EQ(read->call_count(), 1);
  EXPECT_TRUE(read->parent_calls.empty());
  EXPECT_TRUE(read->ran);
}

TEST(TaggedEntriesTest, RewriteRecordRoundTrips) {
  // Check that a rewrite record is written with every field and reads back.
  RewriteEntry record{"_jit_pass_onnx_eval_peephole", "fused", {"/Net", "/Net/Conv"}, "/conv/Conv"};
  std::string text = WriteRewrites({record});
  EXPECT_EQ(text, R"([{"pass":"_jit_pass_onnx_eval_peephole","kind":"fused","modules":["/Net","/Net/Conv"],)"
                  R"("node":"/conv/Conv"}])");
  std::string error;
  std::optional<RewriteEntry> read = ReadRewrite((*ParseJson(text, &error))[0]);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->pass, record.pass);
  EXPECT_EQ(read->modules, record.modules);
  EXPECT_EQ(read->node, record.node);
}

TEST(TaggedEntriesTest, DeclarationKeepsItsCauseAndReason) {
  // Check that hiertag carry's "rewired" declaration keeps whose doing it is
  // and why through a write and a read (the Python verbs write it with the core).
  RewriteEntry record{"carry: ort-all", "rewired", {"/Net/Block#1"}, "", "its boundary value was converted", "tool"};
  std::string text = WriteRewrites({record});
  EXPECT_EQ(text, R"([{"pass":"carry: ort-all","kind":"rewired","modules":["/Net/Block#1"],"node":"",)"
                  R"("cause":"tool","reason":"its boundary value was converted"}])");
  std::string error;
  std::optional<RewriteEntry> read = ReadRewrite((*ParseJson(text, &error))[0]);
  ASSERT_TRUE(read);
  EXPECT_EQ(read->cause, "tool");
  EXPECT_EQ(read->reason, record.reason);
}

TEST(TaggedEntriesTest, RewriteRecordMissingAFieldIsNotRead) {
  // Check that a record without "node" or with non-string modules does not read.
  std::string error;
  EXPECT_FALSE(ReadRewrite(*ParseJson(R"({"pass":"p","kind":"fused","modules":["/Net"]})", &error)));
  EXPECT_FALSE(ReadRewrite(*ParseJson(R"({"pass":"p","kind":"fused","modules":[1],"node":""})", &error)));
}

}  // namespace
}  // namespace hiertag
