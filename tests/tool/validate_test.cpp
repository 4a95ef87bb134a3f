// Tests of `hiertag validate` (RunValidate) on models written byte by byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "hiertag/core/format/json.h"
#include "tool_test_support.h"

namespace hiertag::tooltest {
namespace {

class ValidateTest : public ToolTest {
 protected:
  // Validates `model` and checks that it is reported valid with that many nodes and modules.
  void ExpectValid(const ModelSpec& model, int nodes, int modules) {
    std::string path = WriteModel(model);
    RunResult result = Validate(path);
    EXPECT_EQ(result.code, 0) << result.out;
    EXPECT_EQ(result.out,
              path + ": valid: " + std::to_string(nodes) + " nodes tagged, " + std::to_string(modules) + " modules\n");
    EXPECT_EQ(result.err, "");
  }

  // Validates `model` and checks that it is invalid with exactly these problem
  // lines (any order; each "<file>: " + line), then a summary line.
  void ExpectProblems(const ModelSpec& model, std::vector<std::string> expected) {
    std::string path = WriteModel(model);
    RunResult result = Validate(path);
    EXPECT_EQ(result.code, 1) << result.out;
    EXPECT_EQ(result.err, "");
    std::vector<std::string> lines = Lines(result.out);
    ASSERT_FALSE(lines.empty());
    EXPECT_EQ(lines.back().rfind(path + ": invalid: ", 0), 0u) << lines.back();
    lines.pop_back();
    for (std::string& line : expected) line = path + ": " + line;
    std::sort(lines.begin(), lines.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(lines, expected) << result.out;
  }

  // Validates `model` and checks that it is invalid with exactly one problem line,
  // which starts with "<file>: " + `prefix` (for reasons worded by the grammar).
  void ExpectOneProblemStartingWith(const ModelSpec& model, const std::string& prefix) {
    std::string path = WriteModel(model);
    RunResult result = Validate(path);
    EXPECT_EQ(result.code, 1) << result.out;
    EXPECT_EQ(result.err, "");
    std::vector<std::string> lines = Lines(result.out);
    ASSERT_EQ(lines.size(), 2u) << result.out;
    EXPECT_EQ(lines[0].rfind(path + ": " + prefix, 0), 0u) << lines[0];
    EXPECT_EQ(lines[1].rfind(path + ": invalid: ", 0), 0u) << lines[1];
  }
};

// Check that a model named as hostilely as Python allows is valid, with its tag spelled as this
// writer does or holding the control character raw, as writers before did.
TEST_F(ValidateTest, HostileNamesAreValid) {
  ExpectValid(HostileNameModel(), 2, 2);
  ExpectValid(HostileNameModel("/Net/Expert[line\nbreak]"), 2, 2);
}

// Check that a problem line quoting a node name and a tag with control characters stays one line,
// escaped, and that --json carries them exactly.
TEST_F(ValidateTest, ProblemLinesEscapeControlCharacters) {
  ModelSpec model = HostileNameModel();
  model.graph.nodes[1] = Node("n1\x1b]0;title\x07", "Neg")
                             .In({"r"})
                             .Out({"y"})
                             .Tag(
                                 "/Net/Gone\n\x1b"
                                 "7");
  ExpectProblems(model, {"node 'n1\\x1b]0;title\\x07' (Neg): tag '/Net/Gone\\n\\x1b7' is not in the module table"});
  RunResult json = Validate(WriteModel(model, "json.onnx"), /*json=*/true);
  std::string error;
  std::optional<Json> parsed = ParseJson(json.out, &error);
  ASSERT_TRUE(parsed) << error;
  const Json& problem = (*parsed)["problems"][0];
  EXPECT_EQ(problem["node"], "n1\x1b]0;title\x07");
  EXPECT_EQ(problem["problem"],
            "tag '/Net/Gone\n\x1b"
            "7' is not in the module table");
}

// Check that a fully tagged model is valid and the summary counts its nodes and modules.
TEST_F(ValidateTest, FullyTaggedModelIsValid) { ExpectValid(LayeredModel(), 7, 4); }

// Check that a node without hierarchy_tag is reported by name and op type.
TEST_F(ValidateTest, NodeWithoutTagIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  ExpectProblems(model, {"node 'n1' (Relu): has no hierarchy_tag"});
}

// Check that a node tagged with another module of the table is valid.
TEST_F(ValidateTest, TagListedInTableIsValid) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("/Net/Layer.1");
  ExpectValid(model, 7, 4);
}

// Check that a node whose tag is not in the module table is reported.
TEST_F(ValidateTest, TagNotInTableIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("/Net/Layer.2");
  ExpectProblems(model, {"node 'n1' (Relu): tag '/Net/Layer.2' is not in the module table"});
}

// Check that disambiguated segments, %-escapes included, parse and validate.
TEST_F(ValidateTest, QualifiedTagsAreValid) {
  ModelSpec model = LayeredModel();
  model.Module("/Net/Conv1D[c_attn]", "c_attn", "test.Conv1D").Module("/Net/Conv1D[h%5B0%5D]", "h[0]", "test.Conv1D");
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("/Net/Conv1D[c_attn]");
  model.graph.Find("n2").metadata.clear();
  model.graph.Find("n2").Tag("/Net/Conv1D[h%5B0%5D]");
  ExpectValid(model, 7, 6);
}

// Check that a node tag without the leading "/" does not parse.
TEST_F(ValidateTest, TagWithoutLeadingSlashDoesNotParse) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("Net/x");
  ExpectOneProblemStartingWith(model, "node 'n1' (Relu): tag 'Net/x' does not parse: ");
}

// Check that a node tag with an unclosed qualifier does not parse.
TEST_F(ValidateTest, TagWithUnclosedQualifierDoesNotParse) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("/Net/A[b");
  ExpectOneProblemStartingWith(model, "node 'n1' (Relu): tag '/Net/A[b' does not parse: ");
}

// Check that a node tag with an empty segment does not parse.
TEST_F(ValidateTest, TagWithEmptySegmentDoesNotParse) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.graph.Find("n1").Tag("/Net//Layer.0");
  ExpectOneProblemStartingWith(model, "node 'n1' (Relu): tag '/Net//Layer.0' does not parse: ");
}

// Check that a module table entry whose tag does not parse is reported as a table problem.
TEST_F(ValidateTest, TableTagThatDoesNotParseIsReported) {
  ModelSpec model = LayeredModel();
  model.Module("/Net/A[b", "a", "test.A");
  ExpectOneProblemStartingWith(model, "module table: tag '/Net/A[b' does not parse: ");
}

// Check that untagged nodes are found inside nested graphs (a Loop body) too.
TEST_F(ValidateTest, UntaggedNodeInLoopBodyIsReported) {
  ModelSpec model = LayeredModel();
  GraphSpec body;
  body.Add(Node("body_relu", "Relu").In({"i"}).Out({"o"}))
      .Add(Node("body_add", "Add").In({"o", "scale"}).Out({"p"}).Tag("/Net/Layer.1"));
  model.graph.Add(Node("loop", "Loop").In({"", "", "y"}).Out({"z"}).Tag("/Net/Layer.1").Body(body));
  ExpectProblems(model, {"node 'body_relu' (Relu): has no hierarchy_tag"});
}

// Check that a model whose Loop body nodes are all tagged is valid and they are counted.
TEST_F(ValidateTest, TaggedLoopBodyIsValid) {
  ModelSpec model = LayeredModel();
  GraphSpec body;
  body.Add(Node("body_relu", "Relu").In({"i"}).Out({"o"}).Tag("/Net/Layer.1"))
      .Add(Node("body_add", "Add").In({"o", "scale"}).Out({"p"}).Tag("/Net/Layer.1"));
  model.graph.Add(Node("loop", "Loop").In({"", "", "y"}).Out({"z"}).Tag("/Net/Layer.1").Body(body));
  ExpectValid(model, 10, 4);
}

// Check that a node with a bad tag in a graph nested two levels deep is reported.
TEST_F(ValidateTest, BadTagInDoublyNestedBodyIsReported) {
  ModelSpec model = LayeredModel();
  GraphSpec inner;
  inner.Add(Node("inner_neg", "Neg").In({"i"}).Out({"o"}).Tag("/Net/Missing"));
  GraphSpec outer;
  outer.Add(Node("inner_loop", "Loop").In({"", "", "i"}).Out({"o"}).Tag("/Net").Body(inner));
  model.graph.Add(Node("loop", "Loop").In({"", "", "y"}).Out({"z"}).Tag("/Net").Body(outer));
  ExpectProblems(model, {"node 'inner_neg' (Neg): tag '/Net/Missing' is not in the module table"});
}

// Check that a table missing the parent of a used tag is reported (and the nodes of the missing one).
TEST_F(ValidateTest, TableMissingParentIsReported) {
  ModelSpec model = LayeredModel();
  model.RemoveModule("/Net/Layer.0");
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Attn': its ancestor '/Net/Layer.0' is not in the table",
                         "node 'n1' (Relu): tag '/Net/Layer.0' is not in the module table",
                         "node 'n2' (Add): tag '/Net/Layer.0' is not in the module table",
                         "node 'n3' (Mul): tag '/Net/Layer.0' is not in the module table"});
}

// Check that a table whose used tags all have their ancestors, though no node uses the ancestor, is valid.
TEST_F(ValidateTest, AncestorWithoutNodesInTableIsValid) {
  ModelSpec model = LayeredModel();
  for (const char* name : {"n1", "n2", "n3"}) {
    model.graph.Find(name).metadata.clear();
    model.graph.Find(name).Tag("/Net/Layer.0/Attn");
  }
  ExpectValid(model, 7, 4);
}

// Check that a table missing the root tag is reported for each child.
TEST_F(ValidateTest, TableMissingRootIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n6").metadata.clear();
  model.graph.Find("n6").Tag("/Net/Layer.1");
  model.RemoveModule("/Net");
  ExpectProblems(model, {"module table: tag '/Net/Layer.0': its ancestor '/Net' is not in the table",
                         "module table: tag '/Net/Layer.1': its ancestor '/Net' is not in the table"});
}

// Check that two tags naming the same module path are reported.
TEST_F(ValidateTest, TwoTagsWithSamePathAreReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").path = "layers.0";
  ExpectProblems(model, {"module table: tags '/Net/Layer.0' and '/Net/Layer.1' both name module path 'layers.0'"});
}

// Check that a tag listed twice in the module table is reported.
TEST_F(ValidateTest, TagListedTwiceIsReported) {
  ModelSpec model = LayeredModel();
  std::string table = model.ModuleTableJson();
  table.pop_back();
  model.module_table_text = table + ",\"/Net/Layer.1\":{\"path\":\"layers.1\",\"class\":\"test.Block\"}}";
  ExpectProblems(model, {"module table: tag '/Net/Layer.1' is listed twice"});
}

// Check that a child whose path lies several levels under its parent's (filtered containers) is valid.
TEST_F(ValidateTest, ChildPathDeepInsideParentIsValid) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0/Attn").path = "layers.0.block.attn";
  ExpectValid(model, 7, 4);
}

// Check that in format 1 (the tag tree is the module tree) a child whose path is not inside its
// parent's path is reported.
TEST_F(ValidateTest, ChildPathOutsideParentIsReported) {
  ModelSpec model = LayeredModel();
  model.format_version = "1";
  model.FindModule("/Net/Layer.0/Attn").path = "layers.1.attn";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Attn' names path 'layers.1.attn', which is not "
                         "inside its parent's 'layers.0'"});
}

// Check that in format 1 a path sharing only a string prefix with its parent's ("layers.00" vs
// "layers.0") is not inside it.
TEST_F(ValidateTest, ChildPathWithParentAsStringPrefixIsReported) {
  ModelSpec model = LayeredModel();
  model.format_version = "1";
  model.FindModule("/Net/Layer.0/Attn").path = "layers.00.attn";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Attn' names path 'layers.00.attn', which is not "
                         "inside its parent's 'layers.0'"});
}

// Check that in format 1 a root tag naming a path other than the root's "" is reported (and its
// children's paths as outside it).
TEST_F(ValidateTest, RootWithNonEmptyPathIsReported) {
  ModelSpec model = LayeredModel();
  model.format_version = "1";
  model.FindModule("/Net").path = "net";
  ExpectProblems(model,
                 {"module table: root tag '/Net' names path 'net', not the root ''",
                  "module table: tag '/Net/Layer.0' names path 'layers.0', which is not inside its parent's 'net'",
                  "module table: tag '/Net/Layer.1' names path 'layers.1', which is not inside its parent's 'net'"});
}

// Check that a table entry without a string "class" is reported, and nodes using it too.
TEST_F(ValidateTest, TableEntryWithoutClassIsReported) {
  ModelSpec model = LayeredModel();
  model.module_table_text =
      "{\"/Net\":{\"path\":\"\",\"class\":\"test.Net\"},"
      "\"/Net/Layer.0\":{\"path\":\"layers.0\",\"class\":\"test.Block\"},"
      "\"/Net/Layer.0/Attn\":{\"path\":\"layers.0.attn\",\"class\":\"test.Attention\"},"
      "\"/Net/Layer.1\":{\"path\":\"layers.1\"}}";
  ExpectProblems(model, {"module table: tag '/Net/Layer.1' has no string \"path\" and \"class\"",
                         "node 'n4' (Mul): tag '/Net/Layer.1' is not in the module table",
                         "node 'n5' (MatMul): tag '/Net/Layer.1' is not in the module table"});
}

// Check that hiertag.shared_with naming tags of the table is valid.
TEST_F(ValidateTest, SharedWithListedTagsIsValid) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n3").SharedWith({"/Net/Layer.1", "/Net/Layer.0/Attn"});
  ExpectValid(model, 7, 4);
}

// Check that hiertag.shared_with naming a tag not in the table is reported.
TEST_F(ValidateTest, SharedWithUnlistedTagIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n3").SharedWith({"/Net/Layer.1", "/Net/Layer.9"});
  ExpectProblems(model, {"node 'n3' (Mul): shared tag '/Net/Layer.9' is not in the module table"});
}

// Check that hiertag.shared_with naming a tag that does not parse is reported.
TEST_F(ValidateTest, SharedWithMalformedTagIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n3").SharedWith({"Net/Layer.1"});
  ExpectOneProblemStartingWith(model, "node 'n3' (Mul): shared tag 'Net/Layer.1' does not parse: ");
}

// Check that hiertag.shared_with that is not a JSON array is reported.
TEST_F(ValidateTest, SharedWithNotAnArrayIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n3").Meta(std::string(kSharedWithKey), "/Net/Layer.1");
  ExpectProblems(model, {"node 'n3' (Mul): hiertag.shared_with is not a JSON array of tags"});
}

// Check that --json prints one JSON object saying the file is valid, with counts and no problems.
TEST_F(ValidateTest, JsonOfValidModel) {
  std::string path = WriteModel(LayeredModel());
  RunResult result = Validate(path, /*json=*/true);
  EXPECT_EQ(result.code, 0);
  EXPECT_EQ(result.err, "");
  ASSERT_EQ(Lines(result.out).size(), 1u) << result.out;
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  ASSERT_TRUE(json->is_object());
  ASSERT_NE(FindMember(*json, "valid"), nullptr);
  EXPECT_EQ(FindMember(*json, "valid")->is_boolean(), true);
  EXPECT_TRUE(FindMember(*json, "valid")->get<bool>());
  ASSERT_NE(FindMember(*json, "nodes"), nullptr);
  EXPECT_EQ(FindMember(*json, "nodes")->get<double>(), 7);
  ASSERT_NE(FindMember(*json, "modules"), nullptr);
  EXPECT_EQ(FindMember(*json, "modules")->get<double>(), 4);
  ASSERT_NE(FindMember(*json, "problems"), nullptr);
  EXPECT_EQ(FindMember(*json, "problems")->is_array(), true);
  EXPECT_TRUE(FindMember(*json, "problems")->empty());
}

// Check that --json of an invalid model says so and lists each problem with its node and op type.
TEST_F(ValidateTest, JsonOfInvalidModel) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  model.FindModule("/Net/Layer.1").path = "layers.0";
  std::string path = WriteModel(model);
  RunResult result = Validate(path, /*json=*/true);
  EXPECT_EQ(result.code, 1);
  EXPECT_EQ(result.err, "");
  ASSERT_EQ(Lines(result.out).size(), 1u) << result.out;
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  ASSERT_TRUE(json->is_object());
  ASSERT_NE(FindMember(*json, "valid"), nullptr);
  EXPECT_EQ(FindMember(*json, "valid")->is_boolean(), true);
  EXPECT_FALSE(FindMember(*json, "valid")->get<bool>());
  EXPECT_EQ(FindMember(*json, "nodes")->get<double>(), 7);
  EXPECT_EQ(FindMember(*json, "modules")->get<double>(), 4);
  const Json* problems = FindMember(*json, "problems");
  ASSERT_NE(problems, nullptr);
  ASSERT_EQ(problems->size(), 2u) << result.out;
  const Json* node_problem = nullptr;
  const Json* table_problem = nullptr;
  for (const Json& problem : *problems) (FindMember(problem, "node") ? node_problem : table_problem) = &problem;
  ASSERT_NE(node_problem, nullptr) << result.out;
  ASSERT_NE(table_problem, nullptr) << result.out;
  EXPECT_EQ(FindMember(*node_problem, "node")->get<std::string>(), "n1");
  ASSERT_NE(FindMember(*node_problem, "op_type"), nullptr);
  EXPECT_EQ(FindMember(*node_problem, "op_type")->get<std::string>(), "Relu");
  ASSERT_NE(FindMember(*node_problem, "problem"), nullptr);
  EXPECT_EQ(FindMember(*node_problem, "problem")->get<std::string>(), "has no hierarchy_tag");
  ASSERT_NE(FindMember(*table_problem, "problem"), nullptr);
  EXPECT_EQ(FindMember(*table_problem, "problem")->get<std::string>(),
            "tags '/Net/Layer.0' and '/Net/Layer.1' both name module path 'layers.0'");
}

// Check that --json quotes a file name holding JSON's special characters.
TEST_F(ValidateTest, JsonQuotesFileName) {
  std::string path = WriteModel(LayeredModel(), "we\"ird\\name.onnx");
  RunResult result = Validate(path, /*json=*/true);
  EXPECT_EQ(result.code, 0);
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  ASSERT_NE(FindMember(*json, "file"), nullptr);
  EXPECT_EQ(FindMember(*json, "file")->get<std::string>(), path);
}

// Check that a format-1 file (no format-2 field at all) is still valid.
TEST_F(ValidateTest, Format1FileIsValid) {
  ModelSpec model = LayeredModel();
  model.format_version = "1";
  ExpectValid(model, 7, 4);
}

// Check that in format 2 (the call tree) a module under the caller that does not own it is valid.
TEST_F(ValidateTest, CalleeOutsideCallersPathIsValidInFormat2) { ExpectValid(CallTreeModel(), 3, 4); }

// Check that the same table in format 1 (the module tree) is reported: the path is not inside the parent's.
TEST_F(ValidateTest, CalleeOutsideCallersPathIsReportedInFormat1) {
  ModelSpec model = CallTreeModel();
  model.format_version = "1";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Sublayer.0/Attn' names path 'layers.0.attn', which is "
                         "not inside its parent's 'layers.0.sublayer.0'"});
}

// Check that in format 2 a module called by two callers has two tags naming its path.
TEST_F(ValidateTest, TwoCallersOfOneModuleAreValidInFormat2) {
  ModelSpec model = LayeredModel();
  model.Module("/Net/Layer.0/Norm", "norm", "test.Norm").Module("/Net/Layer.1/Norm", "norm", "test.Norm");
  model.graph.Find("n2").metadata.clear();
  model.graph.Find("n2").Tag("/Net/Layer.0/Norm");
  model.graph.Find("n5").metadata.clear();
  model.graph.Find("n5").Tag("/Net/Layer.1/Norm");
  ExpectValid(model, 7, 6);
}

// Check that in format 1 two tags naming one path under different parents are reported.
TEST_F(ValidateTest, TwoCallersOfOneModuleAreReportedInFormat1) {
  ModelSpec model = LayeredModel();
  model.format_version = "1";
  model.Module("/Net/Layer.0/Norm", "layers.0.norm", "test.Norm")
      .Module("/Net/Layer.1/Norm", "layers.0.norm", "test.Norm");
  ExpectProblems(model, {"module table: tags '/Net/Layer.0/Norm' and '/Net/Layer.1/Norm' both name module path "
                         "'layers.0.norm'",
                         "module table: tag '/Net/Layer.1/Norm' names path 'layers.0.norm', which is not inside its "
                         "parent's 'layers.1'"});
}

// Check that an absolute qualifier naming the entry's path, and a relative one naming it from the
// parent's path, are valid.
TEST_F(ValidateTest, QualifierNamingEntrysPathIsValid) {
  ModelSpec model = CallTreeModel();
  model.Module("/Net/Layer.0/Sublayer.0/Norm[~layers.0.norm]", "layers.0.norm", "test.Norm")
      .Module("/Net/Layer.0/Sublayer.0/Norm[norm]", "layers.0.sublayer.0.norm", "test.Norm");
  ExpectValid(model, 3, 6);
}

// Check that a qualifier naming another path than the entry's is reported, absolute or relative.
TEST_F(ValidateTest, QualifierNamingAnotherPathIsReported) {
  ModelSpec model = CallTreeModel();
  model.Module("/Net/Layer.0/Sublayer.0/Norm[~layers.0.norm]", "layers.1.norm", "test.Norm")
      .Module("/Net/Layer.0/Sublayer.0/Norm[norm]", "layers.0.norm", "test.Norm");
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Sublayer.0/Norm[~layers.0.norm]' names path "
                         "'layers.1.norm', but its qualifier names 'layers.0.norm'",
                         "module table: tag '/Net/Layer.0/Sublayer.0/Norm[norm]' names path 'layers.0.norm', but its "
                         "qualifier names 'layers.0.sublayer.0.norm'"});
}

// Check that hiertag.call below its tag's call count is valid, and 0 on a tag of one call too.
TEST_F(ValidateTest, NodeCallBelowCallCountIsValid) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Calls({1, 4});
  model.graph.Find("n4").Call(0);
  model.graph.Find("n5").Call(1);
  model.graph.Find("n6").Call(0);
  ExpectValid(model, 7, 4);
}

// Check that hiertag.call at or above its tag's call count (absent "calls": one call) is reported.
TEST_F(ValidateTest, NodeCallOutOfRangeIsReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Calls({1, 4});
  model.graph.Find("n5").Call(2);
  model.graph.Find("n6").Call(1);
  ExpectProblems(model, {"node 'n5' (MatMul): hiertag.call 2 is out of range: tag '/Net/Layer.1' has 2 calls",
                         "node 'n6' (Add): hiertag.call 1 is out of range: tag '/Net' has 1 calls"});
}

// Check that hiertag.call that is not a decimal is reported.
TEST_F(ValidateTest, NodeCallNotDecimalIsReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Calls({0, 1});
  model.graph.Find("n4").Meta(std::string(kCallKey), "-1");
  model.graph.Find("n5").Meta(std::string(kCallKey), "one");
  ExpectProblems(model, {"node 'n4' (Mul): hiertag.call '-1' is not a decimal call ordinal",
                         "node 'n5' (MatMul): hiertag.call 'one' is not a decimal call ordinal"});
}

// Check that "calls" and "parent_calls" of one length, each parent call within the parent's calls, are valid.
TEST_F(ValidateTest, CallsAndParentCallsAreValid) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0").Calls({0, 1});
  model.FindModule("/Net/Layer.0/Attn").Calls({0, 1, 2}).ParentCalls({0, 1, 1});
  ExpectValid(model, 7, 4);
}

// Check that "calls" that is no non-empty array of whole numbers >= 0, or not increasing, is reported.
TEST_F(ValidateTest, MalformedCallsAreReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0").Field("calls", "[]");
  model.FindModule("/Net/Layer.0/Attn").Field("calls", "[0,-1]");
  model.FindModule("/Net/Layer.1").Field("calls", "[0,1.5]");
  model.FindModule("/Net").Calls({2, 1});
  const std::string malformed = "\"calls\" is not a non-empty array of whole numbers >= 0";
  ExpectProblems(
      model, {"module table: tag '/Net/Layer.0': " + malformed, "module table: tag '/Net/Layer.0/Attn': " + malformed,
              "module table: tag '/Net/Layer.1': " + malformed,
              "module table: tag '/Net': \"calls\" is not increasing (the calls in the order they ran)"});
}

// Check that "parent_calls" of another length than the calls, or naming a call the parent does not
// have, or not an array, or on the root, is reported.
TEST_F(ValidateTest, MalformedParentCallsAreReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0").Calls({0, 1}).ParentCalls({0});
  model.FindModule("/Net/Layer.0/Attn").Calls({0, 1}).ParentCalls({1, 2});
  model.FindModule("/Net/Layer.1").Field("parent_calls", "\"0\"");
  model.FindModule("/Net").ParentCalls({0});
  ExpectProblems(model, {"module table: tag '/Net/Layer.0': \"parent_calls\" has 1 elements for 2 calls",
                         "module table: tag '/Net/Layer.0/Attn': \"parent_calls\" puts call 1 in call 2 of "
                         "'/Net/Layer.0', which has 2 calls",
                         "module table: tag '/Net/Layer.1': \"parent_calls\" is not an array of whole numbers >= 0",
                         "module table: root tag '/Net' has \"parent_calls\", but no parent"});
}

// Check that a module without nodes whose computation was folded into initializers, or into a
// Constant node, of the main graph is valid.
TEST_F(ValidateTest, FoldedModuleWithoutNodesIsValid) {
  ModelSpec model = LayeredModel();
  model.graph.Add(Node("k", "Constant").Out({"folded"}).TensorAttribute("value", {"", {2}}).Tag("/Net"));
  model.Module("/Net/Layer.0/Norm", "layers.0.norm", "test.Norm");
  model.FindModule("/Net/Layer.0/Norm").FoldedInto({"b0", "scale", "folded"});
  ExpectValid(model, 8, 5);
}

// Check that "folded_into" naming no initializer or Constant of the main graph (a computed value, a
// Loop body's Constant, nothing), or that is not an array of names, is reported.
// Check that "ran" must be true or false, and false is valid.
TEST_F(ValidateTest, RanIsABoolean) {
  ModelSpec valid = LayeredModel();
  valid.FindModule("/Net/Layer.1").Field("ran", "false");
  ExpectValid(valid, 7, 4);
  ModelSpec invalid = LayeredModel();
  invalid.FindModule("/Net/Layer.1").Field("ran", "\"no\"");
  ExpectProblems(invalid, {"module table: tag '/Net/Layer.1': \"ran\" is not true or false"});
}

TEST_F(ValidateTest, FoldedIntoUnknownInitializerIsReported) {
  ModelSpec model = LayeredModel();
  GraphSpec body;
  body.Add(Node("body_k", "Constant").Out({"body_folded"}).Tag("/Net/Layer.1"));
  model.graph.Add(Node("loop", "Loop").In({"", "", "y"}).Out({"z"}).Tag("/Net/Layer.1").Body(body));
  model.Module("/Net/Layer.0/Norm", "layers.0.norm", "test.Norm");
  model.FindModule("/Net/Layer.0/Norm").FoldedInto({"b0", "b9", "q", "body_folded"});
  model.FindModule("/Net/Layer.1").Field("folded_into", "\"w1\"");
  const std::string neither = "', which is neither an initializer nor a Constant of the main graph";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Norm': \"folded_into\" names 'b9" + neither,
                         "module table: tag '/Net/Layer.0/Norm': \"folded_into\" names 'q" + neither,
                         "module table: tag '/Net/Layer.0/Norm': \"folded_into\" names 'body_folded" + neither,
                         "module table: tag '/Net/Layer.1': \"folded_into\" is not an array of initializer names"});
}

// Check that a node whose spans are listed tags under its own tag, with the pass named, is valid.
TEST_F(ValidateTest, SpansUnderNodesTagAreValid) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").Spans({"/Net/Layer.0/Attn", "/Net/Layer.0"}, "_jit_pass_onnx_eval_peephole");
  ExpectValid(model, 7, 4);
}

// Check that a span outside the node's tag, or not in the table, is reported.
TEST_F(ValidateTest, SpanOutsideNodesTagIsReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").Spans({"/Net/Layer.0/Attn", "/Net/Layer.1"}, "_jit_pass_onnx_eval_peephole");
  model.graph.Find("n2").Spans({"/Net/Layer.0/Missing"}, "_jit_pass_onnx_eval_peephole");
  ExpectProblems(model, {"node 'n1' (Relu): tag '/Net/Layer.0' is not an ancestor of its spanned tag '/Net/Layer.1'",
                         "node 'n2' (Add): spanned tag '/Net/Layer.0/Missing' is not in the module table"});
}

// Check that spans without the pass, the pass without spans, and spans that are no JSON array are reported.
TEST_F(ValidateTest, SpansAndRewriteWithoutEachOtherAreReported) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").Meta(std::string(kSpansKey), JsonArray({"/Net/Layer.0/Attn"}));
  model.graph.Find("n2").Meta(std::string(kRewriteKey), "_jit_pass_onnx_eval_peephole");
  model.graph.Find("n3").Meta(std::string(kSpansKey), "/Net/Layer.0").Meta(std::string(kRewriteKey), "p");
  ExpectProblems(model, {"node 'n1' (Relu): has hiertag.spans but no hiertag.rewrite",
                         "node 'n2' (Add): has hiertag.rewrite but no hiertag.spans",
                         "node 'n3' (Mul): hiertag.spans is not a JSON array of tags"});
}

// Check that hiertag.rewrites of well-formed records of listed tags and existing nodes is valid.
TEST_F(ValidateTest, WellFormedRewritesAreValid) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").Spans({"/Net/Layer.0/Attn", "/Net/Layer.0"}, "_jit_pass_onnx_eval_peephole");
  model.Rewrite("_jit_pass_onnx_eval_peephole", "fused", {"/Net/Layer.0/Attn", "/Net/Layer.0"}, "n1")
      .Rewrite("_jit_pass_onnx_peephole", "removed", {"/Net/Layer.0", "/Net/Layer.1"})
      .Rewrite("_jit_pass_onnx_constant_fold", "folded", {"/Net/Layer.1"});
  ExpectValid(model, 7, 4);
}

// Check that records with a bad kind, no pass, an unlisted tag, no modules or an unknown node are reported.
TEST_F(ValidateTest, MalformedRewriteRecordsAreReported) {
  ModelSpec model = LayeredModel();
  model.Rewrite("_jit_pass_onnx_peephole", "merged", {"/Net/Layer.0"})
      .Rewrite("", "removed", {"/Net/Layer.0", "/Net/Layer.9"})
      .Rewrite("_jit_pass_onnx_peephole", "fused", {}, "n9");
  ExpectProblems(model, {"hiertag.rewrites: record 0 has no \"kind\" fused, removed, folded or rewired",
                         "hiertag.rewrites: record 1 has no \"pass\" name",
                         "hiertag.rewrites: record 1 tag '/Net/Layer.9' is not in the module table",
                         "hiertag.rewrites: record 2 names node 'n9', which is not in the model",
                         "hiertag.rewrites: record 2 has no \"modules\" array of tags"});
}

// Check that a record's reason (hiertag carry's declarations name their cause) is valid as a string, reported
// otherwise.
TEST_F(ValidateTest, RewriteReasonMustBeAString) {
  ModelSpec model = LayeredModel();
  model.rewrites.push_back({"carry: onnxsim", "rewired", {"/Net/Layer.0"}, "", "carry could not establish it"});
  ExpectValid(model, 7, 4);
  model.rewrites.clear();
  model.rewrites_text =
      R"([{"pass":"carry: onnxsim","kind":"rewired","modules":["/Net/Layer.0"],"node":"","reason":1}])";
  ExpectProblems(model, {"hiertag.rewrites: record 0 has a \"reason\" that is no string"});
}

// Check that hiertag.rewrites that is no JSON array, or holds a non-object, is reported.
TEST_F(ValidateTest, RewritesNotAnArrayOfRecordsIsReported) {
  ModelSpec model = LayeredModel();
  model.rewrites_text = "{\"pass\":\"p\"}";
  ExpectProblems(model, {"hiertag.rewrites: is not a JSON array of records"});
  model.rewrites_text = "[\"p\"]";
  ExpectProblems(model, {"hiertag.rewrites: record 0 is not a JSON object"});
}

// Check that --json names the subject of a problem that is no node's.
TEST_F(ValidateTest, JsonNamesSubjectOfRewriteProblem) {
  ModelSpec model = LayeredModel();
  model.Rewrite("_jit_pass_onnx_peephole", "merged", {"/Net/Layer.0"});
  std::string path = WriteModel(model);
  RunResult result = Validate(path, /*json=*/true);
  EXPECT_EQ(result.code, 1);
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  const Json* problems = FindMember(*json, "problems");
  ASSERT_TRUE(problems != nullptr && problems->size() == 1u) << result.out;
  const Json& problem = (*problems)[0];
  EXPECT_EQ(FindMember(problem, "node"), nullptr);
  ASSERT_NE(FindMember(problem, "subject"), nullptr) << result.out;
  EXPECT_EQ(FindMember(problem, "subject")->get<std::string>(), "hiertag.rewrites");
  EXPECT_EQ(FindMember(problem, "problem")->get<std::string>(),
            "record 0 has no \"kind\" fused, removed, folded or rewired");
}

}  // namespace
}  // namespace hiertag::tooltest
