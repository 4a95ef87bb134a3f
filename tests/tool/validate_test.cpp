// Tests of `hiertag validate` (RunValidate) on models written byte by byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "hiertag/json.h"
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
    EXPECT_EQ(result.out, path + ": valid: " + std::to_string(nodes) + " nodes tagged, " +
                              std::to_string(modules) + " modules\n");
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

// Check that a fully tagged model is valid and the summary counts its nodes and modules.
TEST_F(ValidateTest, FullyTaggedModelIsValid) {
  ExpectValid(LayeredModel(), 7, 4);
}

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
  model.Module("/Net/Conv1D[c_attn]", "c_attn", "test.Conv1D")
      .Module("/Net/Conv1D[h%5B0%5D]", "h[0]", "test.Conv1D");
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

// Check that a child whose path is not inside its parent's path is reported.
TEST_F(ValidateTest, ChildPathOutsideParentIsReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0/Attn").path = "layers.1.attn";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Attn' names path 'layers.1.attn', which is not "
                         "inside its parent's 'layers.0'"});
}

// Check that a path sharing only a string prefix with its parent's ("layers.00" vs "layers.0") is not inside it.
TEST_F(ValidateTest, ChildPathWithParentAsStringPrefixIsReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0/Attn").path = "layers.00.attn";
  ExpectProblems(model, {"module table: tag '/Net/Layer.0/Attn' names path 'layers.00.attn', which is not "
                         "inside its parent's 'layers.0'"});
}

// Check that a root tag naming a path other than the root's "" is reported.
TEST_F(ValidateTest, RootWithNonEmptyPathIsReported) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net").path = "net";
  ExpectProblems(model, {"module table: root tag '/Net' names path 'net', not the root ''",
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
  ASSERT_EQ(json->kind, Json::Kind::kObject);
  ASSERT_NE(json->Find("valid"), nullptr);
  EXPECT_EQ(json->Find("valid")->kind, Json::Kind::kBool);
  EXPECT_TRUE(json->Find("valid")->boolean);
  ASSERT_NE(json->Find("nodes"), nullptr);
  EXPECT_EQ(json->Find("nodes")->number, 7);
  ASSERT_NE(json->Find("modules"), nullptr);
  EXPECT_EQ(json->Find("modules")->number, 4);
  ASSERT_NE(json->Find("problems"), nullptr);
  EXPECT_EQ(json->Find("problems")->kind, Json::Kind::kArray);
  EXPECT_TRUE(json->Find("problems")->items.empty());
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
  ASSERT_EQ(json->kind, Json::Kind::kObject);
  ASSERT_NE(json->Find("valid"), nullptr);
  EXPECT_EQ(json->Find("valid")->kind, Json::Kind::kBool);
  EXPECT_FALSE(json->Find("valid")->boolean);
  EXPECT_EQ(json->Find("nodes")->number, 7);
  EXPECT_EQ(json->Find("modules")->number, 4);
  const Json* problems = json->Find("problems");
  ASSERT_NE(problems, nullptr);
  ASSERT_EQ(problems->items.size(), 2u) << result.out;
  const Json* node_problem = nullptr;
  const Json* table_problem = nullptr;
  for (const Json& problem : problems->items) (problem.Find("node") ? node_problem : table_problem) = &problem;
  ASSERT_NE(node_problem, nullptr) << result.out;
  ASSERT_NE(table_problem, nullptr) << result.out;
  EXPECT_EQ(node_problem->Find("node")->text, "n1");
  ASSERT_NE(node_problem->Find("op_type"), nullptr);
  EXPECT_EQ(node_problem->Find("op_type")->text, "Relu");
  ASSERT_NE(node_problem->Find("problem"), nullptr);
  EXPECT_EQ(node_problem->Find("problem")->text, "has no hierarchy_tag");
  ASSERT_NE(table_problem->Find("problem"), nullptr);
  EXPECT_EQ(table_problem->Find("problem")->text,
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
  ASSERT_NE(json->Find("file"), nullptr);
  EXPECT_EQ(json->Find("file")->text, path);
}

}  // namespace
}  // namespace hiertag::tooltest
