// Tests that both commands turn bad input files into one line on err and exit status 2.
#include <gtest/gtest.h>

#include <chrono>
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
TEST_F(BadInputTest, ExistingFileIsRead) { ExpectGoodInput(WriteModel(LayeredModel())); }

// Check that a missing file is bad input.
TEST_F(BadInputTest, MissingFileIsBadInput) { ExpectBadInput((dir_ / "missing.onnx").string(), "missing"); }

// Check that a tagged model with no nodes at all is still good input.
TEST_F(BadInputTest, TaggedModelWithoutNodesIsRead) {
  ModelSpec model;
  model.Module("/Net", "", "test.Net");
  ExpectGoodInput(WriteModel(model));
}

// Check that an empty file is bad input.
TEST_F(BadInputTest, EmptyFileIsBadInput) { ExpectBadInput(Write(""), "empty"); }

// Check that a directory given as the model is bad input named as unreadable, not as an empty file.
TEST_F(BadInputTest, DirectoryIsBadInput) {
  std::filesystem::create_directories(dir_ / "model.onnx");
  std::string path = (dir_ / "model.onnx").string();
  ExpectBadInput(path, "");
  RunResult result = Validate(path);
  EXPECT_EQ(result.err.find("empty"), std::string::npos) << result.err;
}

// Check that the uncut bytes of the model the truncation test cuts are good input.
TEST_F(BadInputTest, UncutModelIsRead) { ExpectGoodInput(Write(LayeredModel().Bytes())); }

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
TEST_F(BadInputTest, TextFileIsBadInput) { ExpectBadInput(Write("This is not an ONNX model.\n", "notes.txt"), "ONNX"); }

// Check that an ONNX model in text format (not the binary protobuf) is bad input.
TEST_F(BadInputTest, OnnxTextFormatIsBadInput) {
  ExpectBadInput(
      Write("ir_version: 8\ngraph {\n  node { op_type: \"Relu\" input: \"x\" output: \"y\" }\n}\n", "model.textproto"),
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

// Inputs the fuzzers of tests/fuzz found (or that were found reading the code they
// cover), each once a crash, an exception or a hang.

// Check that a module table holding a number too large for a double ("1e400": nlohmann
// throws out_of_range, not parse_error) is bad input for every command, not an internal error.
TEST_F(BadInputTest, ModuleTableNumberOverflowIsBadInput) {
  ModelSpec model = LayeredModel();
  model.module_table_text = R"({"/Net": {"path": "", "class": "test.Net", "calls": [1e400]}})";
  std::string path = WriteModel(model);
  ExpectBadInput(path, "number overflow");
  RunResult extract = Extract(path, "/Net", (dir_ / "out.onnx").string());
  EXPECT_EQ(extract.code, 2) << extract.err;
  EXPECT_NE(extract.err.find("module table"), std::string::npos) << extract.err;
}

// Check that hiertag.rewrites holding an overflowing number is reported by validate, not thrown.
TEST_F(BadInputTest, RewritesNumberOverflowIsReported) {
  ModelSpec model = LayeredModel();
  model.rewrites_text = R"([{"pass": "p", "kind": "fused", "modules": ["/Net"], "node": "n6", "x": 1e400}])";
  RunResult result = Validate(WriteModel(model));
  EXPECT_EQ(result.code, 1) << result.out << result.err;
  EXPECT_NE(result.out.find("is not a JSON array of records"), std::string::npos) << result.out;
  EXPECT_EQ(Tree(WriteModel(model)).code, 0);
}

// Check that tree prints a table whose tags lack the leading "/" (the root "Net" once
// gave depth -1 and a negative indent: std::length_error) and validate reports them.
TEST_F(BadInputTest, TreeOfTagsWithoutLeadingSlashIsPrinted) {
  ModelSpec model = LayeredModel();
  model.module_table_text = R"({"Net": {"path": "", "class": "test.Net"}, "Net/A": {"path": "a", "class": "test.A"}})";
  std::string path = WriteModel(model);
  for (TreeFormat format : {TreeFormat::kText, TreeFormat::kJson, TreeFormat::kCsv}) {
    std::ostringstream out, err;
    EXPECT_EQ(RunTree(path, format, -1, out, err), 0) << err.str();
    EXPECT_NE(out.str().find("test.A"), std::string::npos) << out.str();
  }
  RunResult text = Tree(path);
  EXPECT_NE(text.out.find("\n  A  test.A  a\n"), std::string::npos) << text.out;
  RunResult validate = Validate(path);
  EXPECT_EQ(validate.code, 1);
  EXPECT_NE(validate.out.find("tag 'Net' does not parse"), std::string::npos) << validate.out;
}

// Check that tree ends on nodes whose tags share no ancestor (tags without the leading
// "/", reading one value: the common-ancestor walk once looped on "" forever).
TEST_F(BadInputTest, TreeEndsOnNodeTagsWithoutCommonAncestor) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"a"};
  model.graph.Add(Node("n0", "Relu").In({"x"}).Out({"a"}).Tag("abc"))
      .Add(Node("n1", "Relu").In({"x"}).Out({"b"}).Tag("abd"))
      .Add(Node("n2", "Relu").In({"x"}).Out({"c"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net");
  std::string path = WriteModel(model);
  RunResult tree = Tree(path);
  EXPECT_EQ(tree.code, 0) << tree.err;
  EXPECT_NE(tree.out.find("nodes 1 own / 1 total"), std::string::npos) << tree.out;
  EXPECT_EQ(Validate(path).code, 1);
}

// Check that extract reads a wide body of nested graphs in linear time (each nested
// graph once copied its enclosing graphs' values: 20,000 Loops took 10 s), and that a
// nested body's reads of its enclosing graphs' values stay inside the node.
TEST_F(BadInputTest, ExtractOfWideNestedBodyIsFast) {
  GraphSpec empty;
  empty.name = "empty";
  GraphSpec reads_outer;
  reads_outer.name = "reads_outer";
  reads_outer.Add(Node("inner", "Add").In({"v0", "a"}).Out({"w"}).Tag("/Net/Layer.1"));
  GraphSpec body;
  body.name = "body";
  body.inputs = {"i", "c"};
  body.outputs = {"c"};
  for (int i = 0; i < 20000; ++i) {
    NodeSpec loop = Node("l" + std::to_string(i), "Loop").Out({"v" + std::to_string(i)}).Tag("/Net/Layer.1");
    body.Add(std::move(loop.Body(i == 0 ? reads_outer : empty)));
  }
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2}).Type("a", {2}).Type("y", {2});
  model.graph.Add(Node("relu", "Relu").In({"x"}).Out({"a"}).Tag("/Net/Layer.0"))
      .Add(Node("loop", "Loop").In({"", "", "x"}).Out({"y"}).Tag("/Net/Layer.1").Body(body));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  std::string path = WriteModel(model);
  auto start = std::chrono::steady_clock::now();
  RunResult result = Extract(path, "/Net/Layer.1", (dir_ / "layer1.onnx").string(), /*json=*/true);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_NE(result.out.find(R"("inputs":["x","a"])"), std::string::npos) << result.out;
  EXPECT_LT(seconds, 5.0);
}

// Check that extract survives a Shape node reading a value with no type (a graph input
// written without one, a value no node makes): ONNX 1.12's data propagation for Shape
// dereferenced the missing type (a segfault); now the value is reported as untyped.
TEST_F(BadInputTest, ExtractOfShapeOfUntypedValueIsBadInput) {
  ModelSpec model;
  model.graph.inputs = {"x"};  // no type
  model.graph.outputs = {"s", "t", "y"};
  model.graph.Add(Node("shape_of_input", "Shape").In({"x"}).Out({"s"}).Tag("/Net/Layer.1"))
      .Add(Node("shape_of_nothing", "Shape").In({"ghost"}).Out({"t"}).Tag("/Net/Layer.1"))
      .Add(Node("relu", "Relu").In({"x"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net").Module("/Net/Layer.1", "layers.1", "test.Block");
  RunResult result = Extract(WriteModel(model), "/Net/Layer.1", (dir_ / "layer1.onnx").string());
  EXPECT_EQ(result.code, 2) << result.out << result.err;
  EXPECT_NE(result.err.find("no type for value"), std::string::npos) << result.err;
}

// Check that --external-data inline refuses, before reading anything, initializers whose
// external data add up past protobuf's 2 GiB (three tensors naming one sparse 1 GiB
// range were each read into memory and written into a model no reader can parse).
TEST_F(BadInputTest, InlineExternalDataPastTwoGibIsRefused) {
  constexpr int64_t kGib = int64_t{1} << 30;
  std::filesystem::path data = dir_ / "big.bin";
  std::ofstream(data.string(), std::ios::binary).put('\0');
  std::filesystem::resize_file(data, kGib);  // sparse: nothing written
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {kGib / 4}).Type("y", {kGib / 4});
  for (const char* name : {"w0", "w1", "w2"}) {
    model.graph.Initializer(name, {kGib / 4});
    model.graph.initializers.back().external = ExternalData{"big.bin", 0, kGib};
  }
  model.graph.Add(Node("n0", "Add").In({"x", "w0"}).Out({"a0"}).Tag("/Net/Layer.1"))
      .Add(Node("n1", "Add").In({"a0", "w1"}).Out({"a1"}).Tag("/Net/Layer.1"))
      .Add(Node("n2", "Add").In({"a1", "w2"}).Out({"y"}).Tag("/Net/Layer.1"));
  model.Module("/Net", "", "test.Net").Module("/Net/Layer.1", "layers.1", "test.Block");
  std::string path = WriteModel(model);
  std::string out_path = (dir_ / "layer1.onnx").string();
  std::ostringstream out, err;
  EXPECT_EQ(RunExtract(path, "/Net/Layer.1", ExtractOptions{std::nullopt, out_path, ExternalDataMode::kInline}, false,
                       out, err),
            2);
  EXPECT_NE(err.str().find("(3221225472 bytes) cannot be inlined: a model passes protobuf's 2 GiB limit; use "
                           "--external-data copy"),
            std::string::npos)
      << err.str();
  EXPECT_FALSE(std::filesystem::exists(out_path));
}

}  // namespace
}  // namespace hiertag::tooltest
