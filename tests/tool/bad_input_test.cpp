// Tests that both commands turn bad input files into one line on err and exit status 2.
#include <gtest/gtest.h>

#include <string>

#include "tool_test_support.h"

namespace hiertag::tooltest {
namespace {

class BadInputTest : public ToolTest {
 protected:
  // Runs validate and tree (text and JSON) on `path` and checks that each exits 2 with
  // nothing on out and one line on err: "<path>: <reason>", the reason holding `reason_part`.
  void ExpectBadInput(const std::string& path, const std::string& reason_part) {
    for (bool json : {false, true}) {
      for (const RunResult& result : {Validate(path, json), Tree(path, json)}) {
        EXPECT_EQ(result.code, 2) << result.out << result.err;
        EXPECT_EQ(result.out, "");
        ASSERT_EQ(Lines(result.err).size(), 1u) << result.err;
        EXPECT_EQ(result.err.back(), '\n');
        EXPECT_EQ(result.err.rfind(path + ": ", 0), 0u) << result.err;
        EXPECT_NE(result.err.find(reason_part), std::string::npos) << result.err;
      }
    }
  }

  // Runs validate and tree on `path` and checks that both succeed.
  void ExpectGoodInput(const std::string& path) {
    RunResult validate = Validate(path);
    EXPECT_EQ(validate.code, 0) << validate.out << validate.err;
    EXPECT_EQ(validate.err, "");
    RunResult tree = Tree(path);
    EXPECT_EQ(tree.code, 0) << tree.out << tree.err;
    EXPECT_EQ(tree.err, "");
    EXPECT_NE(tree.out, "");
  }
};

// Check that an existing tagged model is read by both commands.
TEST_F(BadInputTest, ExistingFileIsRead) {
  ExpectGoodInput(WriteModel(LayeredModel()));
}

// Check that a missing file is bad input.
TEST_F(BadInputTest, MissingFileIsBadInput) {
  ExpectBadInput((dir_ / "missing.onnx").string(), "missing");
}

// Check that a tagged model with no nodes at all is still good input.
TEST_F(BadInputTest, TaggedModelWithoutNodesIsRead) {
  ModelSpec model;
  model.Module("/Net", "", "test.Net");
  ExpectGoodInput(WriteModel(model));
}

// Check that an empty file is bad input.
TEST_F(BadInputTest, EmptyFileIsBadInput) {
  ExpectBadInput(Write(""), "empty");
}

// Check that a directory given as the model is bad input named as unreadable, not as an empty file.
TEST_F(BadInputTest, DirectoryIsBadInput) {
  std::filesystem::create_directories(dir_ / "model.onnx");
  std::string path = (dir_ / "model.onnx").string();
  ExpectBadInput(path, "");
  RunResult result = Validate(path);
  EXPECT_EQ(result.err.find("empty"), std::string::npos) << result.err;
}

// Check that the uncut bytes of the model the truncation test cuts are good input.
TEST_F(BadInputTest, UncutModelIsRead) {
  ExpectGoodInput(Write(LayeredModel().Bytes()));
}

// Check that a model cut anywhere inside its graph field is bad input, named as truncated.
TEST_F(BadInputTest, ModelCutInsideGraphIsBadInput) {
  ModelSpec model = LayeredModel();
  std::string bytes = model.Bytes();
  std::string graph = model.graph.Bytes();
  size_t graph_start = bytes.find(graph);
  ASSERT_NE(graph_start, std::string::npos);
  size_t graph_end = graph_start + graph.size();
  for (size_t cut : {graph_start, graph_start + 1, graph_start + graph.size() / 2, graph_end - 1}) {
    SCOPED_TRACE("cut at byte " + std::to_string(cut) + " of " + std::to_string(bytes.size()));
    ExpectBadInput(Write(bytes.substr(0, cut)), "truncated");
  }
  for (size_t cut = graph_start; cut < graph_end; ++cut) {
    std::string path = Write(bytes.substr(0, cut));
    EXPECT_EQ(Validate(path).code, 2) << "cut at byte " << cut;
    EXPECT_EQ(Tree(path).code, 2) << "cut at byte " << cut;
  }
}

// Check that a plain text file is bad input, named as not ONNX.
TEST_F(BadInputTest, TextFileIsBadInput) {
  ExpectBadInput(Write("This is not an ONNX model.\n", "notes.txt"), "ONNX");
}

// Check that an ONNX model in text format (not the binary protobuf) is bad input.
TEST_F(BadInputTest, OnnxTextFormatIsBadInput) {
  ExpectBadInput(Write("ir_version: 8\ngraph {\n  node { op_type: \"Relu\" input: \"x\" output: \"y\" }\n}\n",
                       "model.textproto"),
                 "ONNX");
}

// Check that a protobuf message without a graph is bad input.
TEST_F(BadInputTest, ModelWithoutGraphIsBadInput) {
  std::string bytes;
  AppendVarintField(&bytes, kModelIrVersion, 8);
  ExpectBadInput(Write(bytes), "no graph");
}

// Check that a valid ONNX model without hiertag.modules is bad input, named as not tagged.
TEST_F(BadInputTest, UntaggedModelIsBadInput) {
  ModelSpec model = LayeredModel();
  model.tagged = false;
  ExpectBadInput(WriteModel(model), "not tagged");
}

// Check that a module table that is not JSON is bad input.
TEST_F(BadInputTest, ModuleTableNotJsonIsBadInput) {
  ModelSpec model = LayeredModel();
  model.module_table_text = "{\"/Net\": {\"path\": \"\", \"class\": \"test.Net\"";
  ExpectBadInput(WriteModel(model), "module table");
}

// Check that a module table that is JSON but not an object is bad input.
TEST_F(BadInputTest, ModuleTableJsonArrayIsBadInput) {
  ModelSpec model = LayeredModel();
  model.module_table_text = "[\"/Net\"]";
  ExpectBadInput(WriteModel(model), "module table");
}

}  // namespace
}  // namespace hiertag::tooltest
