// Tests of scope names: the names hiertag gives torch's scopes, and how they come back.
#include "hiertag/core/export/scope_names.h"

#include <gtest/gtest.h>

#include <string>

namespace hiertag {
namespace {

TEST(ScopeNamesTest, NameWithNulComesBackCutAtIt) {
  // Check that a scope name holding a NUL (an attribute named "nul\0") is compared as torch's C
  // string gives it back, and that the cut name still names the module instance.
  std::string pushed = MarkInstanceScopeName(3, std::string("pkg.Expert::nul\0x", 17));
  EXPECT_EQ(ScopeNameAsRecorded(pushed), "hiertag.m3|pkg.Expert::nul");
  auto parsed = ParseScopeName(ScopeNameAsRecorded(pushed));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->module_index, 3);
  EXPECT_EQ(parsed->variable_part, "nul");
}

TEST(ScopeNamesTest, NameWithoutNulComesBackWhole) {
  // Check that every other name, control characters, "::" and "|" included, is compared whole.
  std::string pushed = MarkInstanceScopeName(4, "pkg.col::on::line\nbreak|x");
  EXPECT_EQ(ScopeNameAsRecorded(pushed), pushed);
  auto parsed = ParseScopeName(pushed);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->module_index, 4);
  EXPECT_EQ(parsed->class_part, "pkg.col");
}

}  // namespace
}  // namespace hiertag
