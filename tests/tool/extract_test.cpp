// Tests of `hiertag extract` (RunExtract): which nodes a module's model holds, its
// inputs, outputs, initializers and types, convexity, and what is (not) written.
#include <gtest/gtest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hiertag/core/format/json.h"
#include "hiertag/core/onnx/external_data.h"
#include "hiertag/core/onnx/onnx_model.h"
#include "tool_test_support.h"

namespace hiertag::tooltest {

// Prints a tensor type in failure messages, e.g. "elem_type 1 [2,3]".
void PrintTo(const TensorTypeSpec& type, std::ostream* out) {
  *out << "elem_type " << type.elem_type << " [";
  for (size_t i = 0; i < type.dims.size(); ++i) *out << (i ? "," : "") << type.dims[i];
  *out << "]";
}

namespace {

constexpr const char* kLayer1 = "/Net/Layer.1";

// A tagged chain with Layer.1 in the middle, every value crossing a module boundary typed
// FLOAT [2,3] (x, y, u, z as graph inputs / outputs, a, m, s as value_info):
//   relu0     Relu(x) -> r         /Net/Layer.0
//   add0      Add(r, w0) -> p      /Net/Layer.0        w0: FLOAT [2,3]
//   const0    Constant -> k0       /Net                read by Layer.0 only
//   mul0      Mul(p, k0) -> a      /Net/Layer.0
//   const1    Constant -> k1       /Net                read by Layer.1
//   mul1      Mul(a, w1) -> m      /Net/Layer.1        w1: FLOAT [2,3]
//   add1      Add(m, k1) -> s      /Net/Layer.1/Inner
//   relu_out  Relu(s) -> y         /Net                y: model output
//   sub1      Sub(m, x) -> u       /Net/Layer.1        u: model output nothing reads
//   add_out   Add(y, m) -> z       /Net                z: model output
// Extracting Layer.1: nodes const1 mul1 add1 sub1, inputs a x, outputs m s u, initializer w1.
ModelSpec ChainModel() {
  ModelSpec model;
  model.opsets = {{"", 17}, {"ai.onnx.ml", 3}};
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y", "u", "z"};
  for (const char* value : {"x", "y", "u", "z", "a", "m", "s"}) model.graph.Type(value, {2, 3});
  model.graph.Initializer("w0", {2, 3}).Initializer("w1", {2, 3});
  model.graph.Add(Node("relu0", "Relu").In({"x"}).Out({"r"}).Tag("/Net/Layer.0"))
      .Add(Node("add0", "Add").In({"r", "w0"}).Out({"p"}).Tag("/Net/Layer.0"))
      .Add(Node("const0", "Constant").Out({"k0"}).TensorAttribute("value", {"", {2, 3}}).Tag("/Net"))
      .Add(Node("mul0", "Mul").In({"p", "k0"}).Out({"a"}).Tag("/Net/Layer.0"))
      .Add(Node("const1", "Constant").Out({"k1"}).TensorAttribute("value", {"", {2, 3}}).Tag("/Net"))
      .Add(Node("mul1", "Mul").In({"a", "w1"}).Out({"m"}).Tag("/Net/Layer.1"))
      .Add(Node("add1", "Add").In({"m", "k1"}).Out({"s"}).Tag("/Net/Layer.1/Inner"))
      .Add(Node("relu_out", "Relu").In({"s"}).Out({"y"}).Tag("/Net"))
      .Add(Node("sub1", "Sub").In({"m", "x"}).Out({"u"}).Tag("/Net/Layer.1"))
      .Add(Node("add_out", "Add").In({"y", "m"}).Out({"z"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.0/Attn", "layers.0.attn", "test.Attention")
      .Module("/Net/Layer.1", "layers.1", "test.Block")
      .Module("/Net/Layer.1/Inner", "layers.1.inner", "test.Inner")
      .Module("/Net/Layer.10", "layers.10", "test.Block")
      .Module("/Net/Head", "head", "test.Head");
  return model;
}

// x -> relu1 [Layer.1] -> r -> neg [`neg_tag`] -> y, all three typed.
ModelSpec TwoNodeModel(const std::string& neg_tag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2, 3}).Type("y", {2, 3}).Type("r", {2, 3});
  model.graph.Add(Node("relu1", "Relu").In({"x"}).Out({"r"}).Tag(kLayer1))
      .Add(Node("neg", "Neg").In({"r"}).Out({"y"}).Tag(neg_tag));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block")
      .Module("/Net/Layer.1/Inner", "layers.1.inner", "test.Inner")
      .Module("/Net/Layer.10", "layers.10", "test.Block");
  return model;
}

// A node CSE kept in Layer.0 on behalf of the modules `shared_with`, read by Layer.1 and by `user_tag`:
//   shared  Relu(x) -> r       /Net/Layer.0, hiertag.shared_with `shared_with`
//   neg1    Neg(r) -> y1       /Net/Layer.1        y1: model output
//   sig     Sigmoid(r) -> y2   `user_tag`          y2: model output
ModelSpec SharedNodeModel(const std::vector<std::string>& shared_with, const std::string& user_tag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y1", "y2"};
  for (const char* value : {"x", "r", "y1", "y2"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("shared", "Relu").In({"x"}).Out({"r"}).Tag("/Net/Layer.0").SharedWith(shared_with))
      .Add(Node("neg1", "Neg").In({"r"}).Out({"y1"}).Tag(kLayer1))
      .Add(Node("sig", "Sigmoid").In({"r"}).Out({"y2"}).Tag(user_tag));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.0/Attn", "layers.0.attn", "test.Attention")
      .Module("/Net/Layer.1", "layers.1", "test.Block")
      .Module("/Net/Layer.2", "layers.2", "test.Block")
      .Module("/Net/Head", "head", "test.Head");
  return model;
}

// A leaves /Net/A for /Net/B and comes back when `last_tag` is /Net/A:
//   a0  Relu(x) -> p       /Net/A
//   b0  Neg(p) -> q        /Net/B
//   a1  Add(q, p) -> y     `last_tag`          y: model output
ModelSpec DetourModel(const std::string& last_tag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "p", "q", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("a0", "Relu").In({"x"}).Out({"p"}).Tag("/Net/A"))
      .Add(Node("b0", "Neg").In({"p"}).Out({"q"}).Tag("/Net/B"))
      .Add(Node("a1", "Add").In({"q", "p"}).Out({"y"}).Tag(last_tag));
  model.Module("/Net", "", "test.Net").Module("/Net/A", "a", "test.A").Module("/Net/B", "b", "test.B");
  return model;
}

// Relu [Layer.0] -> Mul [Layer.1] -> Relu [/Net] on FLOAT [2,3], with types for x and y
// only: r and m are left to shape inference.
ModelSpec InferableModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2, 3}).Type("y", {2, 3});
  model.graph.Add(Node("relu0", "Relu").In({"x"}).Out({"r"}).Tag("/Net/Layer.0"))
      .Add(Node("mul1", "Mul").In({"r", "r"}).Out({"m"}).Tag(kLayer1))
      .Add(Node("relu_out", "Relu").In({"m"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  return model;
}

// An op of an unknown domain makes v, which Layer.1 reads: nothing can type v
// unless the file records it.
ModelSpec CustomOpModel() {
  ModelSpec model;
  model.opsets = {{"", 17}, {"com.example", 1}};
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2, 3}).Type("y", {2, 3});
  model.graph.Add(Node("mystery", "Mystery").Domain("com.example").In({"x"}).Out({"v"}).Tag("/Net/Layer.0"))
      .Add(Node("neg1", "Neg").In({"v"}).Out({"y"}).Tag(kLayer1));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  return model;
}

// The tensor type a ValueInfoProto records, or std::nullopt when it has none.
std::optional<TensorTypeSpec> TensorTypeOf(std::string_view value_info) {
  auto sub_message = [](std::string_view message, uint32_t number) -> std::optional<std::string_view> {
    wire::Reader reader(message);
    wire::Field field;
    while (!reader.done() && reader.Next(&field)) {
      if (field.number == number && field.wire_type == wire::kLengthDelimited) return field.payload;
    }
    return std::nullopt;
  };
  std::optional<std::string_view> type = sub_message(value_info, kValueInfoType);
  std::optional<std::string_view> tensor = type ? sub_message(*type, kTypeTensorType) : std::nullopt;
  if (!tensor) return std::nullopt;
  TensorTypeSpec result;
  result.elem_type = 0;
  wire::Reader reader(*tensor);
  wire::Field field;
  while (!reader.done() && reader.Next(&field)) {
    if (field.number == kTensorTypeElemType && field.wire_type == wire::kVarint) result.elem_type = field.varint;
    if (field.number != kTensorTypeShape || field.wire_type != wire::kLengthDelimited) continue;
    wire::Reader shape(field.payload);
    wire::Field dim;
    while (!shape.done() && shape.Next(&dim)) {
      if (dim.number != kShapeDim) continue;
      wire::Reader value(dim.payload);
      wire::Field value_field;
      while (!value.done() && value.Next(&value_field)) {
        if (value_field.number == kDimValue && value_field.wire_type == wire::kVarint) {
          result.dims.push_back(static_cast<int64_t>(value_field.varint));
        }
      }
    }
  }
  return result;
}

std::vector<std::string> NodeNames(const OnnxModel& model) {
  std::vector<std::string> names;
  for (int index : model.graphs.at(0).nodes) names.emplace_back(model.nodes[index].name);
  return names;
}

std::vector<std::string> ValueNames(const std::vector<OnnxValue>& values) {
  std::vector<std::string> names;
  for (const OnnxValue& value : values) names.push_back(value.name);
  return names;
}

std::vector<std::string> InitializerNames(const OnnxModel& model) {
  std::vector<std::string> names;
  for (const OnnxInitializer& initializer : model.graphs.at(0).initializers) names.push_back(initializer.name);
  return names;
}

// The tags of a written module table, in order.
std::vector<std::string> TableTags(const OnnxModel& model) {
  auto table = model.metadata.find(std::string(kModuleTableKey));
  if (table == model.metadata.end()) return {"<no module table>"};
  std::string error;
  std::optional<Json> json = ParseJson(table->second, &error);
  if (!json) return {"<bad module table: " + error + ">"};
  std::vector<std::string> tags;
  for (const auto& [tag, entry] : json->items()) tags.push_back(tag);
  return tags;
}

class ExtractTest : public ToolTest {
 protected:
  std::string OutPath(const std::string& file = "out.onnx") const { return (dir_ / file).string(); }

  // Checks that `extract --call K` of /Net/Table writes nodes[K], reading inputs[K],
  // and hands out its own table "tK" only (TableCalledTwiceModel).
  void ExpectEachTableCallWritten(const std::string& path, const std::vector<std::vector<std::string>>& nodes,
                                  const std::vector<std::vector<std::string>>& inputs);

  // The names of the files in the test's directory.
  std::set<std::string> Files() const {
    std::set<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) files.insert(entry.path().filename());
    return files;
  }

  // The model extract wrote to `file`; std::nullopt (with a failure recorded) when unreadable.
  std::optional<OnnxModel> ReadOutput(const std::string& file) const {
    std::string error;
    std::optional<OnnxModel> written = OnnxModel::Load(OutPath(file), &error);
    EXPECT_TRUE(written) << error;
    return written;
  }

  // Writes `model`, extracts `tag` into out.onnx and reads the result back;
  // std::nullopt (with a failure recorded) when extract did not succeed.
  std::optional<OnnxModel> ExtractOk(const ModelSpec& model, const std::string& tag) {
    std::string path = WriteModel(model);
    RunResult result = Extract(path, tag, OutPath());
    EXPECT_EQ(result.code, 0) << result.err;
    EXPECT_EQ(result.err, "");
    if (result.code != 0) return std::nullopt;
    std::string error;
    std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
    EXPECT_TRUE(written) << error;
    return written;
  }

  // Writes `model`, extracts `tag` into out.onnx and checks the refusal: exit 2,
  // nothing on out, one line "<path>: ..." holding `message_part`, no file written.
  void ExpectRefused(const ModelSpec& model, const std::string& tag, const std::string& message_part) {
    std::string path = WriteModel(model);
    RunResult result = Extract(path, tag, OutPath());
    EXPECT_EQ(result.code, 2) << result.out << result.err;
    EXPECT_EQ(result.out, "");
    ASSERT_EQ(Lines(result.err).size(), 1u) << result.err;
    EXPECT_EQ(result.err.back(), '\n');
    EXPECT_EQ(result.err.rfind(path + ": ", 0), 0u) << result.err;
    EXPECT_NE(result.err.find(message_part), std::string::npos) << result.err;
    EXPECT_FALSE(std::filesystem::exists(OutPath()));
    EXPECT_EQ(Files(), std::set<std::string>{"model.onnx"});
  }
};

// Check that extracting a module in the middle of a chain writes exactly its nodes
// (a descendant's included, the Constant it reads copied in), in source order, byte for byte.
TEST_F(ExtractTest, MiddleModuleHasItsNodesInSourceOrder) {
  ModelSpec source = ChainModel();
  std::optional<OnnxModel> written = ExtractOk(source, kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"const1", "mul1", "add1", "sub1"}));
  for (int index : written->graphs.at(0).nodes) {
    const OnnxNode& node = written->nodes[index];
    EXPECT_EQ(node.raw, source.graph.Find(std::string(node.name)).Bytes()) << node.name;
  }
}

// Check that the inputs are the values the module reads from outside, in order of first
// read, each with the source's recorded type (value_info for a, graph input for x).
TEST_F(ExtractTest, InputsAreValuesReadFromOutsideWithSourceTypes) {
  ModelSpec source = ChainModel();
  std::optional<OnnxModel> written = ExtractOk(source, kLayer1);
  ASSERT_TRUE(written);
  const OnnxGraph& graph = written->graphs.at(0);
  EXPECT_EQ(ValueNames(graph.inputs), (std::vector<std::string>{"a", "x"}));
  for (const OnnxValue& input : graph.inputs) {
    EXPECT_EQ(input.raw, source.graph.ValueInfoBytes(input.name)) << input.name;
  }
}

// Check that the outputs are the values the module makes that a node outside reads (m, s)
// or that are model outputs (u), and not those only read inside it (k1).
TEST_F(ExtractTest, OutputsAreValuesReadOutsideOrModelOutputs) {
  ModelSpec source = ChainModel();
  std::optional<OnnxModel> written = ExtractOk(source, kLayer1);
  ASSERT_TRUE(written);
  const OnnxGraph& graph = written->graphs.at(0);
  EXPECT_EQ(ValueNames(graph.outputs), (std::vector<std::string>{"m", "s", "u"}));
  for (const OnnxValue& output : graph.outputs) {
    EXPECT_EQ(output.raw, source.graph.ValueInfoBytes(output.name)) << output.name;
  }
}

// Check that the initializers the module reads are copied byte for byte and the others are not.
TEST_F(ExtractTest, OnlyInitializersTheModuleReadsAreCopied) {
  ModelSpec source = ChainModel();
  std::optional<OnnxModel> written = ExtractOk(source, kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(InitializerNames(*written), std::vector<std::string>{"w1"});
  ASSERT_EQ(written->graphs.at(0).initializers.size(), 1u);
  EXPECT_EQ(written->graphs.at(0).initializers[0].raw, source.graph.initializers[1].Bytes());
}

// Check that a parsed initializer keeps its data type and dims as the file
// gives them, one field per dim or packed (piece inference types an
// initializer it does not copy from them).
TEST(OnnxModelTest, InitializerKeepsItsDataTypeAndDims) {
  ModelSpec model = ChainModel();
  model.graph.initializers.push_back({"packed", {2, 0, 5}, kFloat16, /*packed_dims=*/true});
  model.graph.initializers.push_back({"scalar", {}, kInt64});
  std::string error;
  std::optional<OnnxModel> parsed = OnnxModel::Parse(model.Bytes(), &error);
  ASSERT_TRUE(parsed) << error;
  std::map<std::string, const OnnxInitializer*> by_name;
  for (const OnnxInitializer& initializer : parsed->graphs.at(0).initializers) by_name[initializer.name] = &initializer;
  for (const InitializerSpec& spec : model.graph.initializers) {
    ASSERT_TRUE(by_name.count(spec.name)) << spec.name;
    EXPECT_EQ(by_name[spec.name]->data_type, spec.data_type) << spec.name;
    EXPECT_EQ(by_name[spec.name]->dims, spec.dims) << spec.name;
  }
  EXPECT_EQ(by_name["packed"]->elements, 0);
  EXPECT_EQ(by_name["scalar"]->elements, 1);
}

// Check that a Constant node outside the module that the module reads is copied in.
TEST_F(ExtractTest, ConstantTheModuleReadsIsCopied) {
  std::optional<OnnxModel> written = ExtractOk(ChainModel(), kLayer1);
  ASSERT_TRUE(written);
  std::vector<std::string> nodes = NodeNames(*written);
  EXPECT_NE(std::find(nodes.begin(), nodes.end(), "const1"), nodes.end());
  std::vector<std::string> inputs = ValueNames(written->graphs.at(0).inputs);
  EXPECT_EQ(std::find(inputs.begin(), inputs.end(), "k1"), inputs.end());
}

// Check that a Constant node read only by another module is not copied.
TEST_F(ExtractTest, ConstantOnlyAnotherModuleReadsIsNotCopied) {
  std::optional<OnnxModel> written = ExtractOk(ChainModel(), kLayer1);
  ASSERT_TRUE(written);
  std::vector<std::string> nodes = NodeNames(*written);
  EXPECT_EQ(std::find(nodes.begin(), nodes.end(), "const0"), nodes.end());
}

// Check that the written model keeps the source's IR version and opset imports.
TEST_F(ExtractTest, IrVersionAndOpsetsAreTheSources) {
  ModelSpec source = ChainModel();
  source.ir_version = 7;
  std::optional<OnnxModel> written = ExtractOk(source, kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(written->ir_version, 7);
  ASSERT_EQ(written->opsets.size(), 2u);
  EXPECT_EQ(written->opsets[0].domain, "");
  EXPECT_EQ(written->opsets[0].version, 17);
  EXPECT_EQ(written->opsets[1].domain, "ai.onnx.ml");
  EXPECT_EQ(written->opsets[1].version, 3);
}

// Check that the written module table lists only the module, its descendants and its
// ancestors, in table order with their paths and classes, plus the format version.
TEST_F(ExtractTest, ModuleTableHoldsModuleDescendantsAndAncestors) {
  std::optional<OnnxModel> written = ExtractOk(ChainModel(), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(TableTags(*written), (std::vector<std::string>{"/Net", "/Net/Layer.1", "/Net/Layer.1/Inner"}));
  EXPECT_EQ(written->metadata.at(std::string(kModuleTableKey)),
            "{\"/Net\":{\"path\":\"\",\"class\":\"test.Net\"},"
            "\"/Net/Layer.1\":{\"path\":\"layers.1\",\"class\":\"test.Block\"},"
            "\"/Net/Layer.1/Inner\":{\"path\":\"layers.1.inner\",\"class\":\"test.Inner\"}}");
  EXPECT_EQ(written->metadata.at(std::string(kFormatVersionKey)), kFormatVersion);
}

// Check that the written model of a module passes ONNX's checker.
TEST_F(ExtractTest, WrittenModelPassesOnnxChecker) {
  std::optional<OnnxModel> written = ExtractOk(ChainModel(), kLayer1);
  ASSERT_TRUE(written);
  onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromArray(written->bytes().data(), static_cast<int>(written->bytes().size())));
  EXPECT_NO_THROW(onnx::checker::check_model(proto));
}

// Check that the summary line names OUT, the module and the counts, and that only OUT is written.
TEST_F(ExtractTest, SummaryLineNamesOutputAndCounts) {
  std::string path = WriteModel(ChainModel());
  RunResult result = Extract(path, kLayer1, OutPath());
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(result.out, OutPath() + ": /Net/Layer.1: 4 nodes, 2 inputs, 3 outputs, 1 initializers\n");
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "out.onnx"}));
}

// Check that a hostile module is named by its tag as tree prints it, also where the file holds the
// control character raw (a writer before), and by the raw spelling too; --json names the file's tag.
TEST_F(ExtractTest, HostileModuleIsNamedByItsTagAsTreePrintsIt) {
  const std::string raw_tag = "/Net/Expert[line\nbreak]";
  for (const std::string& written : {std::string(kHostileTag), raw_tag}) {
    std::string path = WriteModel(HostileNameModel(written));
    for (const std::string& named : {std::string(kHostileTag), raw_tag, std::string("/Net/Expert[line%0abreak]")}) {
      RunResult result = Extract(path, named, OutPath());
      EXPECT_EQ(result.code, 0) << result.err;
      EXPECT_EQ(result.out, OutPath() + ": /Net/Expert[line%0Abreak]: 1 nodes, 1 inputs, 1 outputs, 0 initializers\n");
    }
    RunResult json = Extract(path, kHostileTag, OutPath(), /*json=*/true);
    std::string error;
    std::optional<Json> parsed = ParseJson(json.out, &error);
    ASSERT_TRUE(parsed) << error << json.out;
    EXPECT_EQ((*parsed)["module"], written);
  }
}

// Check that an unknown module with control characters is refused in one line, escaped, with the
// closest tags as extract takes them.
TEST_F(ExtractTest, UnknownHostileModuleIsOneLine) {
  std::string path = WriteModel(HostileNameModel("/Net/Expert[line\nbreak]"));
  RunResult result = Extract(path, "/Net/Expert[line\x1b[2Jbreak]", OutPath());
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err, path +
                            ": unknown module '/Net/Expert[line\\x1b[2Jbreak]'; closest: /Net/Expert[line%0Abreak], "
                            "/Net\n");
  EXPECT_FALSE(std::filesystem::exists(OutPath()));
}

// Check that --json prints one JSON object with the file, module, output, node count,
// input and output names and initializer count.
TEST_F(ExtractTest, JsonPrintsOneObject) {
  std::string path = WriteModel(ChainModel());
  RunResult result = Extract(path, kLayer1, OutPath(), /*json=*/true);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(Lines(result.out).size(), 1u) << result.out;
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  ASSERT_TRUE(json->is_object()) << result.out;
  auto text = [&](const char* key) {
    const Json* member = FindMember(*json, key);
    return member && member->is_string() ? member->get<std::string>() : "<missing " + std::string(key) + ">";
  };
  auto number = [&](const char* key) {
    const Json* member = FindMember(*json, key);
    return member && member->is_number() ? member->get<double>() : -1.0;
  };
  auto names = [&](const char* key) {
    const Json* member = FindMember(*json, key);
    return member ? ReadStrings(*member).value_or(std::vector<std::string>{"<missing>"})
                  : std::vector<std::string>{"<missing>"};
  };
  EXPECT_EQ(text("file"), path);
  EXPECT_EQ(text("module"), kLayer1);
  EXPECT_EQ(text("output"), OutPath());
  EXPECT_EQ(number("nodes"), 4);
  EXPECT_EQ(names("inputs"), (std::vector<std::string>{"a", "x"}));
  EXPECT_EQ(names("outputs"), (std::vector<std::string>{"m", "s", "u"}));
  EXPECT_EQ(number("initializers"), 1);
}

// Check that a node tagged with a descendant of the module is part of it.
TEST_F(ExtractTest, DescendantsNodeIsIncluded) {
  std::optional<OnnxModel> written = ExtractOk(TwoNodeModel("/Net/Layer.1/Inner"), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"relu1", "neg"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"y"});
}

// Check that a node tagged with a sibling (also one whose tag starts with the module's) is not.
TEST_F(ExtractTest, SiblingsNodeIsNotIncluded) {
  for (const char* sibling : {"/Net/Layer.10", "/Net/Layer.0"}) {
    SCOPED_TRACE(sibling);
    std::optional<OnnxModel> written = ExtractOk(TwoNodeModel(sibling), kLayer1);
    ASSERT_TRUE(written);
    EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"relu1"});
    EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"r"});
  }
}

// Check that a node another module's tag owns but whose hiertag.shared_with lists the module is included.
TEST_F(ExtractTest, NodeSharedWithModuleIsIncluded) {
  std::optional<OnnxModel> written = ExtractOk(SharedNodeModel({kLayer1}, "/Net/Layer.0"), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"shared", "neg1"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"x"});
}

// Check that a node whose hiertag.shared_with lists another module only is not included.
TEST_F(ExtractTest, NodeSharedWithAnotherModuleIsNotIncluded) {
  std::optional<OnnxModel> written = ExtractOk(SharedNodeModel({"/Net/Layer.2"}, "/Net/Layer.0"), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"neg1"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"r"});
}

// Check that the other sharer's (or its descendant's) use of a shared node's value does not make it an output.
TEST_F(ExtractTest, OtherSharersUseMakesNoOutput) {
  for (const char* user : {"/Net/Layer.0", "/Net/Layer.0/Attn"}) {
    SCOPED_TRACE(user);
    std::optional<OnnxModel> written = ExtractOk(SharedNodeModel({kLayer1}, user), kLayer1);
    ASSERT_TRUE(written);
    EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"y1"});
  }
}

// Check that an unrelated module's use of a shared node's value makes it an output.
TEST_F(ExtractTest, UnrelatedModulesUseMakesOutput) {
  std::optional<OnnxModel> written = ExtractOk(SharedNodeModel({kLayer1}, "/Net/Head"), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), (std::vector<std::string>{"r", "y1"}));
}

// Check that a module whose value leaves it through another module's node and comes
// back is refused, naming that node, and nothing is written.
TEST_F(ExtractTest, NonConvexModuleIsRefused) {
  ExpectRefused(DetourModel("/Net/A"), "/Net/A",
                "module '/Net/A' is not a convex region of the graph: node 'b0' (Neg) takes values from the "
                "module and gives values back to it");
}

// Check that the same graph whose last node belongs elsewhere is a convex module and is written.
TEST_F(ExtractTest, ConvexModuleIsWritten) {
  std::optional<OnnxModel> written = ExtractOk(DetourModel("/Net/B"), "/Net/A");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"a0"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"p"});
}

// Check that a detour through two outside nodes of different modules is refused too.
TEST_F(ExtractTest, LongDetourIsRefused) {
  ModelSpec model = DetourModel("/Net/A");
  model.graph.Find("a1").In({"q2", "p"});
  model.graph.nodes.insert(model.graph.nodes.begin() + 2, Node("c0", "Relu").In({"q"}).Out({"q2"}).Tag("/Net/C"));
  model.graph.Type("q2", {2, 3});
  model.Module("/Net/C", "c", "test.C");
  ExpectRefused(model, "/Net/A", "not a convex region");
}

// A shared node of Layer.0 kept for Layer.1, read by `user_tag`'s node whose value Layer.1 reads back:
//   shared  Relu(x) -> r       /Net/Layer.0, hiertag.shared_with [/Net/Layer.1]
//   own0    Neg(r) -> q        `user_tag`
//   use1    Add(q, r) -> y     /Net/Layer.1        y: model output
ModelSpec SharedDetourModel(const std::string& user_tag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "r", "q", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("shared", "Relu").In({"x"}).Out({"r"}).Tag("/Net/Layer.0").SharedWith({kLayer1}))
      .Add(Node("own0", "Neg").In({"r"}).Out({"q"}).Tag(user_tag))
      .Add(Node("use1", "Add").In({"q", "r"}).Out({"y"}).Tag(kLayer1));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block")
      .Module("/Net/Head", "head", "test.Head");
  return model;
}

// Check that the other sharer's use of a shared node does not break convexity.
TEST_F(ExtractTest, OtherSharersUseKeepsConvexity) {
  std::optional<OnnxModel> written = ExtractOk(SharedDetourModel("/Net/Layer.0"), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"shared", "use1"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"x", "q"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"y"});
}

// Check that an unrelated module's use of a shared node that feeds the module again breaks convexity.
TEST_F(ExtractTest, UnrelatedModulesUseBreaksConvexity) {
  ExpectRefused(SharedDetourModel("/Net/Head"), kLayer1, "node 'own0' (Neg) takes values from the module");
}

// Check that a refused module leaves an existing OUT as it was.
TEST_F(ExtractTest, RefusalLeavesExistingOutputAlone) {
  std::string path = WriteModel(DetourModel("/Net/A"));
  Write("previous", "out.onnx");
  RunResult result = Extract(path, "/Net/A", OutPath());
  EXPECT_EQ(result.code, 2) << result.err;
  std::ifstream stream(OutPath(), std::ios::binary);
  std::string content((std::istreambuf_iterator<char>(stream)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "previous");
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "out.onnx"}));
}

// Check that an unknown tag is refused with the three closest tags, nearest first, and nothing is written.
TEST_F(ExtractTest, UnknownTagListsClosestTags) {
  std::string path = WriteModel(ChainModel());
  for (const std::string& out_path : {OutPath(), std::string()}) {
    RunResult result = Extract(path, "/Net/Layr.1", out_path);
    EXPECT_EQ(result.code, 2) << result.err;
    EXPECT_EQ(result.out, "");
    EXPECT_EQ(result.err,
              path + ": unknown module '/Net/Layr.1'; closest: /Net/Layer.1, /Net/Layer.0, /Net/Layer.10\n");
    EXPECT_EQ(Files(), std::set<std::string>{"model.onnx"});
  }
}

// Check that without -o the model is written next to the source as MODEL.<tag>.onnx, the
// tag without its leading '/' and with other characters but letters, digits and '.' as '_'.
TEST_F(ExtractTest, DefaultOutputPathIsDerivedFromTag) {
  std::string path = WriteModel(ChainModel());
  RunResult result = Extract(path, kLayer1);
  EXPECT_EQ(result.code, 0) << result.err;
  std::string expected = OutPath("model.Net_Layer.1.onnx");
  EXPECT_EQ(result.out, expected + ": /Net/Layer.1: 4 nodes, 2 inputs, 3 outputs, 1 initializers\n");
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "model.Net_Layer.1.onnx"}));
  std::string error;
  EXPECT_TRUE(OnnxModel::Load(expected, &error)) << error;
}

// Check that a qualified tag's brackets become '_' in the default output path, dots kept.
TEST_F(ExtractTest, DefaultOutputPathReplacesBrackets) {
  ModelSpec model = TwoNodeModel("/Net/Linear[proj.out]");
  model.Module("/Net/Linear[proj.out]", "proj.out", "torch.nn.Linear");
  std::string path = WriteModel(model);
  RunResult result = Extract(path, "/Net/Linear[proj.out]");
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_TRUE(std::filesystem::exists(OutPath("model.Net_Linear_proj.out_.onnx"))) << result.out;
}

// Check that an OUT in a missing directory is refused with one line and no partial file.
TEST_F(ExtractTest, UnwritableOutputIsRefused) {
  std::string path = WriteModel(ChainModel());
  std::string out_path = (dir_ / "missing" / "out.onnx").string();
  RunResult result = Extract(path, kLayer1, out_path);
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, path + ": cannot write " + out_path + "\n");
  EXPECT_EQ(Files(), std::set<std::string>{"model.onnx"});
}

// Check that a module with no node in the main graph is refused.
TEST_F(ExtractTest, ModuleWithoutNodesIsRefused) {
  ExpectRefused(ChainModel(), "/Net/Layer.0/Attn", "module '/Net/Layer.0/Attn' has no nodes in the main graph");
}

// A position table left as nodes: /Net/Table computes from an initializer alone,
// and /Net/Layer.1 adds it to x.
//   table   Sin(w) -> t          /Net/Table        w: FLOAT [2,3]
//   scale   Mul(t, w) -> s       /Net/Table
//   add     Add(x, s) -> y       `add_tag`         y: model output
ModelSpec ConstantModuleModel(const std::string& add_tag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "t", "s", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Initializer("w", {2, 3});
  model.graph.Add(Node("table", "Sin").In({"w"}).Out({"t"}).Tag("/Net/Table"))
      .Add(Node("scale", "Mul").In({"t", "w"}).Out({"s"}).Tag("/Net/Table"))
      .Add(Node("add", "Add").In({"x", "s"}).Out({"y"}).Tag(add_tag));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Table", "table", "test.Table")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  return model;
}

// Check that a module whose nodes all compute from weights is extracted as a
// model without inputs whose output is the value the rest of the graph reads.
TEST_F(ExtractTest, ConstantModuleIsWrittenWithoutInputs) {
  std::optional<OnnxModel> written = ExtractOk(ConstantModuleModel(kLayer1), "/Net/Table");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"table", "scale"}));
  EXPECT_TRUE(written->graphs.at(0).inputs.empty());
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"s"});
  EXPECT_EQ(InitializerNames(*written), std::vector<std::string>{"w"});
}

// Check that a module reading the constant module's value takes it as an input,
// and does not take the constant module's nodes along.
TEST_F(ExtractTest, ConstantModulesValueIsCopiedIntoItsReader) {
  std::optional<OnnxModel> written = ExtractOk(ConstantModuleModel(kLayer1), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"table", "scale", "add"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"x"});
}

// A position table computed from an initializer once per call of /Net/Table (a rotary
// embedding called by each layer), each call's table read by its own layer; the module's
// buffer is a Constant of the first call (the tracer records it once), read by both:
//   freq    Constant -> f        /Net/Table    call 0      w: FLOAT [2,3]
//   table0  Mul(w, f) -> t0      /Net/Table    call 0
//   add0    Add(x, t0) -> a      /Net/Layer.0
//   table1  Mul(w, f) -> t1      /Net/Table    call 1
//   add1    Add(a, t1) -> y      /Net/Layer.1              y: model output
// The table model above with call 1's nodes given: the rest is shared with
// ConstantCallAndShapeReadingCallModel below.
ModelSpec TableCalledTwiceModel(std::vector<NodeSpec> call1) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "f", "t0", "a", "t1", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Initializer("w", {2, 3});
  model.graph.Add(Node("freq", "Constant").Out({"f"}).TensorAttribute("value", {"", {2, 3}}).Tag("/Net/Table"))
      .Add(Node("table0", "Mul").In({"w", "f"}).Out({"t0"}).Tag("/Net/Table"))
      .Add(Node("add0", "Add").In({"x", "t0"}).Out({"a"}).Tag("/Net/Layer.0"));
  for (NodeSpec& node : call1) model.graph.Add(std::move(node));
  model.graph.Add(Node("add1", "Add").In({"a", "t1"}).Out({"y"}).Tag(kLayer1));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Table", "table", "test.Table")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module(kLayer1, "layers.1", "test.Block");
  model.FindModule("/Net/Table").Calls({0, 1});
  return model;
}

ModelSpec ConstantModuleCalledTwiceModel() {
  return TableCalledTwiceModel({Node("table1", "Mul").In({"w", "f"}).Out({"t1"}).Tag("/Net/Table").Call(1)});
}

void ExtractTest::ExpectEachTableCallWritten(const std::string& path,
                                             const std::vector<std::vector<std::string>>& nodes,
                                             const std::vector<std::vector<std::string>>& inputs) {
  const std::string out = OutPath();
  for (int64_t call : {0, 1}) {
    RunResult result = Extract(path, "/Net/Table", out, /*json=*/false, call);
    ASSERT_EQ(result.code, 0) << result.err;
    std::string error;
    std::optional<OnnxModel> written = OnnxModel::Load(out, &error);
    ASSERT_TRUE(written) << error;
    EXPECT_EQ(NodeNames(*written), nodes[call]) << call;
    EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), inputs[call]) << call;
    EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"t" + std::to_string(call)}) << call;
  }
}

// Check that each call of a constant module extracts its own table alone: no input, its
// own nodes (the buffer's Constant copied into call 1), its own result only.
TEST_F(ExtractTest, EachCallOfConstantModuleIsWrittenAlone) {
  ExpectEachTableCallWritten(WriteModel(ConstantModuleCalledTwiceModel()), {{"freq", "table0"}, {"freq", "table1"}},
                             {{}, {}});
}

// The same table, but call 1 computes it from its argument's shape (torch 2.4 leaves
// the second call's x.shape[-2] as a Shape of the caller's value: only call 0 is a
// constant module), still reading the buffer's Constant of call 0:
//   freq    Constant -> f        /Net/Table    call 0      w: FLOAT [2,3]
//   table0  Mul(w, f) -> t0      /Net/Table    call 0
//   add0    Add(x, t0) -> a      /Net/Layer.0
//   shape1  Shape(a) -> s        /Net/Table    call 1
//   table1  Expand(f, s) -> t1   /Net/Table    call 1
//   add1    Add(a, t1) -> y      /Net/Layer.1              y: model output
ModelSpec ConstantCallAndShapeReadingCallModel() {
  ModelSpec model =
      TableCalledTwiceModel({Node("shape1", "Shape").In({"a"}).Out({"s"}).Tag("/Net/Table").Call(1),
                             Node("table1", "Expand").In({"f", "s"}).Out({"t1"}).Tag("/Net/Table").Call(1)});
  model.graph.Type("s", {2}, kInt64);
  return model;
}

// Check that a constant call's buffer read by a computing call of the same module (not
// a weight node there) is weight data that call copies in, not a result of the constant
// call: call 0 hands out its table alone, call 1 takes its argument and copies the buffer.
TEST_F(ExtractTest, ConstantCallsBufferReadByAComputingCallIsNoResult) {
  ExpectEachTableCallWritten(WriteModel(ConstantCallAndShapeReadingCallModel()),
                             {{"freq", "table0"}, {"freq", "shape1", "table1"}}, {{}, {"a"}});
}

// Check that the constant module asked as a whole (every call) holds both tables.
TEST_F(ExtractTest, ConstantModuleOfTwoCallsAsAWholeHoldsBothTables) {
  std::optional<OnnxModel> written = ExtractOk(ConstantModuleCalledTwiceModel(), "/Net/Table");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"freq", "table0", "table1"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), (std::vector<std::string>{"t0", "t1"}));
}

// Check that a module none of whose values is read outside or is a model output is refused.
TEST_F(ExtractTest, ModuleWithoutOutputsIsRefused) {
  ModelSpec model = TwoNodeModel("/Net");
  model.graph.Find("neg").In({"x"});
  ExpectRefused(model, kLayer1, "module '/Net/Layer.1' produces nothing used outside it");
}

// Check that values the file does not type are typed by ONNX shape inference.
TEST_F(ExtractTest, ShapeInferenceTypesUnrecordedValues) {
  std::optional<OnnxModel> written = ExtractOk(InferableModel(), kLayer1);
  ASSERT_TRUE(written);
  const OnnxGraph& graph = written->graphs.at(0);
  ASSERT_EQ(ValueNames(graph.inputs), std::vector<std::string>{"r"});
  ASSERT_EQ(ValueNames(graph.outputs), std::vector<std::string>{"m"});
  EXPECT_EQ(TensorTypeOf(graph.inputs[0].raw), (TensorTypeSpec{kFloat, {2, 3}}));
  EXPECT_EQ(TensorTypeOf(graph.outputs[0].raw), (TensorTypeSpec{kFloat, {2, 3}}));
}

// Check that a value made by an op shape inference does not know is typed from the file's value_info.
TEST_F(ExtractTest, RecordedTypeTypesValueOfUnknownOp) {
  ModelSpec model = CustomOpModel();
  model.graph.Type("v", {4}, kInt64);
  std::optional<OnnxModel> written = ExtractOk(model, kLayer1);
  ASSERT_TRUE(written);
  ASSERT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"v"});
  EXPECT_EQ(TensorTypeOf(written->graphs.at(0).inputs[0].raw), (TensorTypeSpec{kInt64, {4}}));
}

// Check that a value nothing can type is refused with "no type for value" and nothing is written.
TEST_F(ExtractTest, UntypableValueIsRefused) { ExpectRefused(CustomOpModel(), kLayer1, "no type for value 'v'"); }

// Check that a graph input the file declares without a type, which nothing can type, is
// refused rather than written as an untyped input.
TEST_F(ExtractTest, UntypedGraphInputIsRefused) {
  ModelSpec model = InferableModel();
  model.graph.types.clear();
  model.graph.Type("r", {2, 3}).Type("y", {2, 3});
  ExpectRefused(model, "/Net/Layer.0", "no type for value 'x'");
}

// Check that a graph output the file declares without a type is typed by shape inference
// rather than written untyped.
TEST_F(ExtractTest, UntypedGraphOutputIsInferred) {
  ModelSpec model = InferableModel();
  model.graph.types.clear();
  model.graph.Type("x", {2, 3});
  model.graph.nodes.pop_back();
  model.graph.outputs = {"m"};
  std::optional<OnnxModel> written = ExtractOk(model, kLayer1);
  ASSERT_TRUE(written);
  ASSERT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"m"});
  EXPECT_EQ(TensorTypeOf(written->graphs.at(0).outputs[0].raw), (TensorTypeSpec{kFloat, {2, 3}}));
}

// A types file: a model without nodes whose main graph types `value` as `type`, as the
// Python package writes from onnx.shape_inference for --value-types.
ModelSpec TypesModel(const std::string& value, const TensorTypeSpec& type) {
  ModelSpec types;
  types.graph.Type(value, type.dims, type.elem_type);
  return types;
}

// Check that --value-types types a value neither the file nor shape inference can.
TEST_F(ExtractTest, TypesFileTypesValueNothingElseCan) {
  std::string path = WriteModel(CustomOpModel());
  std::string types = WriteModel(TypesModel("v", {kInt64, {4}}), "types.onnx");
  RunResult result = Tool({"extract", path, "--module", kLayer1, "-o", OutPath("out.onnx"), "--value-types", types});
  ASSERT_EQ(result.code, 0) << result.err;
  std::optional<OnnxModel> written = ReadOutput("out.onnx");
  ASSERT_TRUE(written);
  ASSERT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"v"});
  EXPECT_EQ(TensorTypeOf(written->graphs.at(0).inputs[0].raw), (TensorTypeSpec{kInt64, {4}}));
}

// Check that a type the file records wins over the types file's for the same value.
TEST_F(ExtractTest, FilesOwnTypeWinsOverTypesFile) {
  std::string path = WriteModel(ChainModel());
  std::string types = WriteModel(TypesModel("a", {kInt64, {7}}), "types.onnx");
  RunResult result = Tool({"extract", path, "--module", kLayer1, "-o", OutPath("out.onnx"), "--value-types", types});
  ASSERT_EQ(result.code, 0) << result.err;
  std::optional<OnnxModel> written = ReadOutput("out.onnx");
  ASSERT_TRUE(written);
  ASSERT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"a", "x"}));
  EXPECT_EQ(TensorTypeOf(written->graphs.at(0).inputs[0].raw), (TensorTypeSpec{kFloat, {2, 3}}));
}

// Check that a types file that is no ONNX model is refused in one line naming it, and nothing is written.
TEST_F(ExtractTest, UnreadableTypesFileIsRefused) {
  std::string path = WriteModel(ChainModel());
  std::string types = Write("not a model", "types.onnx");
  RunResult result = Tool({"extract", path, "--module", kLayer1, "-o", OutPath("out.onnx"), "--value-types", types});
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
  EXPECT_EQ(result.err.rfind("hiertag extract: " + types + ": ", 0), 0u) << result.err;
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "types.onnx"}));
}

// x -> relu0 [Layer.0] -> a; loop1 [Layer.1] Loop(x) -> y whose body computes v_out from `body_reads`.
ModelSpec LoopModel(const std::vector<std::string>& body_reads) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2, 3}).Type("y", {2, 3}).Type("a", {2, 3});
  GraphSpec body;
  body.name = "loop_body";
  body.inputs = {"i", "c", "v_in"};
  body.outputs = {"c", "v_out"};
  body.Add(Node("body_add", "Add").In(body_reads).Out({"v_out"}).Tag(kLayer1));
  model.graph.Add(Node("relu0", "Relu").In({"x"}).Out({"a"}).Tag("/Net/Layer.0"))
      .Add(Node("loop1", "Loop").In({"", "", "x"}).Out({"y"}).Tag(kLayer1).Body(body));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  return model;
}

// Check that a value a node's body reads from outside becomes an input, and the body comes with the node.
TEST_F(ExtractTest, BodysOuterReadIsInput) {
  std::optional<OnnxModel> written = ExtractOk(LoopModel({"v_in", "a"}), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"loop1"});
  EXPECT_EQ(written->nodes.size(), 2u);
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"x", "a"}));
}

// Check that an outer value a body hands out as it is (a graph output no node
// of the body makes) is read by the node: it becomes an input too.
TEST_F(ExtractTest, BodysOuterOutputIsInput) {
  ModelSpec model = LoopModel({"v_in", "v_in"});
  model.graph.nodes.back().bodies.at(0).outputs = {"c", "a"};
  std::optional<OnnxModel> written = ExtractOk(model, kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"x", "a"}));
}

// Check that a value a body defines itself does not become an input.
TEST_F(ExtractTest, BodysOwnValueIsNotInput) {
  std::optional<OnnxModel> written = ExtractOk(LoopModel({"v_in", "v_in"}), kLayer1);
  ASSERT_TRUE(written);
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"x"});
}

// Check that extract through the command line passes --module, -o and --json on.
TEST_F(ExtractTest, CommandLinePassesOptions) {
  std::string path = WriteModel(ChainModel());
  RunResult tool = Tool({"extract", path, "--module", kLayer1, "-o", OutPath("tool.onnx"), "--json"});
  EXPECT_EQ(tool.code, 0) << tool.err;
  EXPECT_EQ(tool.err, "");
  RunResult direct = Extract(path, kLayer1, OutPath("tool.onnx"), /*json=*/true);
  EXPECT_EQ(tool.out, direct.out);
}

// Check that extract without --module is a usage error.
TEST_F(ExtractTest, CommandLineWithoutModuleIsUsageError) {
  std::string path = WriteModel(ChainModel());
  RunResult result = Tool({"extract", path});
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, "hiertag extract: needs --module TAG (see 'hiertag extract --help')\n");
  EXPECT_EQ(Files(), std::set<std::string>{"model.onnx"});
}

// Check that extract --help prints extract's usage and exits 0.
TEST_F(ExtractTest, CommandLineHelpPrintsUsage) {
  RunResult result = Tool({"extract", "--help"});
  EXPECT_EQ(result.code, 0);
  EXPECT_EQ(result.err, "");
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_GT(lines.size(), 1u) << result.out;
  EXPECT_EQ(lines[0],
            "usage: hiertag extract MODEL.onnx --module TAG [--call K] [-o OUT.onnx] [--external-data MODE] "
            "[--value-types TYPES.onnx] [--json]");
}

constexpr const char* kEvalPeephole = "_jit_pass_onnx_eval_peephole";

// The exporter's eval peephole fused Block/Conv's Conv with Block's BatchNorm into one node, tagged
// with their common ancestor Block (every value typed FLOAT [1,1,2,2]):
//   conv_bn  Conv(x, w) -> c   /Net/Block, hiertag.spans [/Net/Block/Conv, /Net/Block]   w: FLOAT [1,1,1,1]
//   relu     Relu(c) -> r      /Net/Block
//   head     Neg(r) -> y       /Net/Head           y: model output
ModelSpec FusedModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "c", "r", "y"}) model.graph.Type(value, {1, 1, 2, 2});
  model.graph.Initializer("w", {1, 1, 1, 1});
  model.graph
      .Add(Node("conv_bn", "Conv")
               .In({"x", "w"})
               .Out({"c"})
               .Tag("/Net/Block")
               .Spans({"/Net/Block/Conv", "/Net/Block"}, kEvalPeephole))
      .Add(Node("relu", "Relu").In({"c"}).Out({"r"}).Tag("/Net/Block"))
      .Add(Node("head", "Neg").In({"r"}).Out({"y"}).Tag("/Net/Head"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Block", "block", "test.Block")
      .Module("/Net/Block/Conv", "block.conv", "torch.nn.Conv2d")
      .Module("/Net/Head", "head", "test.Head");
  return model;
}

// Check that a module whose computation a node's spans fused with a module outside it is refused.
TEST_F(ExtractTest, ModuleFusedAcrossItsBoundaryIsRefused) {
  ExpectRefused(FusedModel(), "/Net/Block/Conv",
                "module '/Net/Block/Conv' cannot be extracted: _jit_pass_onnx_eval_peephole fused its computation "
                "with '/Net/Block' into node 'conv_bn' (Conv)");
}

// Check that the module holding every fused module is extracted, the fused node an ordinary member.
TEST_F(ExtractTest, ModuleHoldingAllFusedModulesIsWritten) {
  std::optional<OnnxModel> written = ExtractOk(FusedModel(), "/Net/Block");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"conv_bn", "relu"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"r"});
}

// Check that a fused record of hiertag.rewrites refuses the module as the node's spans do.
TEST_F(ExtractTest, FusedRecordRefusesModule) {
  ModelSpec model = FusedModel();
  model.graph.Find("conv_bn").metadata.resize(1);  // the tag only
  model.Rewrite(kEvalPeephole, "fused", {"/Net/Block/Conv", "/Net/Block"}, "conv_bn");
  ExpectRefused(model, "/Net/Block/Conv",
                "module '/Net/Block/Conv' cannot be extracted: _jit_pass_onnx_eval_peephole fused its computation "
                "with '/Net/Block' into node 'conv_bn' (Conv)");
}

// Check that the extracted model of a format-2 file keeps the rewrites within the module, and validates.
TEST_F(ExtractTest, ExtractedFormat2ModelKeepsRewritesAndValidates) {
  ModelSpec model = FusedModel();
  model.Rewrite(kEvalPeephole, "fused", {"/Net/Block/Conv", "/Net/Block"}, "conv_bn")
      .Rewrite("_jit_pass_onnx_peephole", "removed", {"/Net/Head", "/Net"});
  model.FindModule("/Net/Block/Conv").FoldedInto({"w"});
  model.FindModule("/Net/Head").FoldedInto({"w"});
  std::optional<OnnxModel> written = ExtractOk(model, "/Net/Block");
  ASSERT_TRUE(written);
  EXPECT_EQ(written->metadata.at(std::string(kRewritesKey)),
            "[{\"pass\":\"_jit_pass_onnx_eval_peephole\",\"kind\":\"fused\",\"modules\":[\"/Net/Block/Conv\","
            "\"/Net/Block\"],\"node\":\"conv_bn\"}]");
  EXPECT_EQ(TableTags(*written), (std::vector<std::string>{"/Net", "/Net/Block", "/Net/Block/Conv"}));
  EXPECT_NE(written->metadata.at(std::string(kModuleTableKey)).find("\"folded_into\":[\"w\"]"), std::string::npos);
  RunResult validate = Validate(OutPath());
  EXPECT_EQ(validate.code, 0) << validate.out;
}

// x -> a0 [/Net/A] -> p -> b0 [/Net/B] -> q -> c0 [/Net/C] -> y; the peephole removed a Transpose of
// one module with the inverse Transpose of the next: `removed` lists them.
ModelSpec RemovedModel(const std::vector<std::string>& removed) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "p", "q", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("a0", "Relu").In({"x"}).Out({"p"}).Tag("/Net/A"))
      .Add(Node("b0", "Neg").In({"p"}).Out({"q"}).Tag("/Net/B"))
      .Add(Node("c0", "Neg").In({"q"}).Out({"y"}).Tag("/Net/C"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/A", "a", "test.A")
      .Module("/Net/B", "b", "test.B")
      .Module("/Net/C", "c", "test.C");
  model.Rewrite("_jit_pass_onnx_peephole", "removed", removed);
  return model;
}

ModelSpec CallsSharingANodeModel();

// Check that a module a rewired record lists (its nodes read a value it never received) is refused.
TEST_F(ExtractTest, RewiredModuleIsRefused) {
  ModelSpec model = RemovedModel({"/Net/A", "/Net/B"});
  model.rewrites[0].kind = "rewired";
  model.rewrites[0].modules = {"/Net/B"};
  ExpectRefused(model, "/Net/B",
                "module '/Net/B' cannot be extracted: _jit_pass_onnx_peephole rewired it now reads a value it never "
                "received");
}

// Check that a rewired record giving its reason (hiertag carry's declarations) is refused with that reason.
TEST_F(ExtractTest, RewiredModuleIsRefusedWithTheRecordsReason) {
  ModelSpec model = RemovedModel({"/Net/A", "/Net/B"});
  model.rewrites[0] = {"carry: onnxsim", "rewired", {"/Net/B"}, "", "carry could not establish its boundary"};
  ExpectRefused(model, "/Net/B",
                "module '/Net/B' cannot be extracted: carry: onnxsim: carry could not establish its boundary");
}

// Check that a rewired record refuses only the modules it lists: not their callers, not their neighbours.
TEST_F(ExtractTest, ModulesARewiredRecordDoesNotListAreWritten) {
  ModelSpec model = RemovedModel({"/Net/B"});
  model.rewrites[0].kind = "rewired";
  for (const char* tag : {"/Net", "/Net/A", "/Net/C"}) {
    ASSERT_TRUE(ExtractOk(model, tag)) << tag;
  }
}

// Check that a fused node across two calls of one module refuses each call, not the module as a whole.
TEST_F(ExtractTest, FusionAcrossCallsRefusesEachCall) {
  ModelSpec model = CallsSharingANodeModel();
  model.graph.Find("m0").metadata.resize(1);
  model.Rewrite(kEvalPeephole, "fused", {"/Net/Block#0", "/Net/Block#1"}, "m0");
  std::string path = WriteModel(model);
  RunResult call0 = Extract(path, "/Net/Block", OutPath(), /*json=*/false, 0);
  EXPECT_EQ(call0.code, 2);
  EXPECT_NE(call0.err.find("call 0 of module '/Net/Block' cannot be extracted: _jit_pass_onnx_eval_peephole fused "
                           "its computation with '/Net/Block#1' into node 'm0' (Mul)"),
            std::string::npos)
      << call0.err;
  EXPECT_EQ(Extract(path, "/Net/Block", OutPath(), /*json=*/false, 1).code, 2);
  EXPECT_EQ(Extract(path, "/Net", OutPath()).code, 0);
}

// A container whose forward never ran, its owner's Add between its two children:
//   e0   Relu(x) -> p     /Net/Blocks/Expert.0
//   add  Add(x, p) -> q   /Net
//   e1   Relu(q) -> y     /Net/Blocks/Expert.1      y: model output
ModelSpec InterleavedContainerModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "p", "q", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("e0", "Relu").In({"x"}).Out({"p"}).Tag("/Net/Blocks/Expert.0"))
      .Add(Node("add", "Add").In({"x", "p"}).Out({"q"}).Tag("/Net"))
      .Add(Node("e1", "Relu").In({"q"}).Out({"y"}).Tag("/Net/Blocks/Expert.1"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Blocks", "blocks", "test.Blocks")
      .Module("/Net/Blocks/Expert.0", "blocks.0", "test.Expert")
      .Module("/Net/Blocks/Expert.1", "blocks.1", "test.Expert");
  model.FindModule("/Net/Blocks").Field("ran", "false");
  return model;
}

// Check that a never-run container whose children its owner interleaves is refused saying so.
TEST_F(ExtractTest, InterleavedNeverRunContainerIsRefusedSayingItNeverRan) {
  ExpectRefused(InterleavedContainerModel(), "/Net/Blocks",
                "module '/Net/Blocks' never ran (its caller reached past it to its children) and its children's "
                "nodes are interleaved with its caller's: node 'add' (Add) lies between them");
}

// Check that the same region in a container that ran is refused as not convex.
TEST_F(ExtractTest, InterleavedContainerThatRanIsNotConvex) {
  ModelSpec model = InterleavedContainerModel();
  model.FindModule("/Net/Blocks").fields.clear();
  ExpectRefused(model, "/Net/Blocks", "module '/Net/Blocks' is not a convex region of the graph");
}

// Check that a module whose boundary with another the removal of both sides' nodes erased is refused.
TEST_F(ExtractTest, ModuleWithRemovedBoundaryIsRefused) {
  ExpectRefused(RemovedModel({"/Net/A", "/Net/B"}), "/Net/A",
                "module '/Net/A' cannot be extracted: _jit_pass_onnx_peephole removed its boundary with '/Net/B' "
                "(nodes of both removed together)");
}

// Check that a module a removal does not list, and one holding every module it lists, are written.
TEST_F(ExtractTest, ModuleOutsideOrAroundRemovalIsWritten) {
  std::optional<OnnxModel> written = ExtractOk(RemovedModel({"/Net/B", "/Net/C"}), "/Net/A");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"a0"});
  std::filesystem::remove(OutPath());
  written = ExtractOk(RemovedModel({"/Net/A", "/Net/B"}), "/Net");
  ASSERT_TRUE(written);
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"a0", "b0", "c0"}));
}

// Check that a module whose computation was folded together with another's is refused.
TEST_F(ExtractTest, ModuleFoldedWithAnotherIsRefused) {
  ModelSpec model = RemovedModel({"/Net/B", "/Net/C"});
  model.rewrites[0].kind = "folded";
  model.rewrites[0].pass = "_jit_pass_onnx_constant_fold";
  ExpectRefused(model, "/Net/C",
                "module '/Net/C' cannot be extracted: _jit_pass_onnx_constant_fold folded its computation with "
                "'/Net/B' into initializers");
}

// /Net/Block runs twice with /Net's mid between the calls; Inner runs once in Block's call 0 and
// twice in its call 1 (parent_calls [0, 1, 1]):
//   i0   Relu(x) -> a      /Net/Block/Inner  call 0   (Block call 0)
//   b0   Neg(a) -> h       /Net/Block        call 0
//   mid  Sigmoid(h) -> h2  /Net
//   i1   Relu(h2) -> c     /Net/Block/Inner  call 1   (Block call 1)
//   i2   Relu(c) -> d      /Net/Block/Inner  call 2   (Block call 1)
//   b1   Neg(d) -> y       /Net/Block        call 1   y: model output
ModelSpec TwoCallModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "a", "h", "h2", "c", "d", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("i0", "Relu").In({"x"}).Out({"a"}).Tag("/Net/Block/Inner"))
      .Add(Node("b0", "Neg").In({"a"}).Out({"h"}).Tag("/Net/Block"))
      .Add(Node("mid", "Sigmoid").In({"h"}).Out({"h2"}).Tag("/Net"))
      .Add(Node("i1", "Relu").In({"h2"}).Out({"c"}).Tag("/Net/Block/Inner").Call(1))
      .Add(Node("i2", "Relu").In({"c"}).Out({"d"}).Tag("/Net/Block/Inner").Call(2))
      .Add(Node("b1", "Neg").In({"d"}).Out({"y"}).Tag("/Net/Block").Call(1));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Block", "block", "test.Block")
      .Module("/Net/Block/Inner", "block.inner", "test.Inner");
  model.FindModule("/Net/Block").Calls({0, 1});
  model.FindModule("/Net/Block/Inner").Calls({0, 1, 2}).ParentCalls({0, 1, 1});
  return model;
}

// Check that the builder's two-call model is a valid format-2 file.
TEST_F(ExtractTest, TwoCallModelIsValid) {
  RunResult result = Validate(WriteModel(TwoCallModel()));
  EXPECT_EQ(result.code, 0) << result.out;
}

// Check that --call selects the nodes of one call, descendants' nodes mapped through parent_calls.
TEST_F(ExtractTest, CallSelectsOneCallsNodes) {
  ModelSpec model = TwoCallModel();
  std::string path = WriteModel(model);
  RunResult result = Extract(path, "/Net/Block", OutPath(), /*json=*/false, 1);
  ASSERT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out, OutPath() + ": /Net/Block call 1: 3 nodes, 1 inputs, 1 outputs, 0 initializers\n");
  std::string error;
  std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"i1", "i2", "b1"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"h2"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"y"});
  result = Extract(path, "/Net/Block", OutPath(), /*json=*/false, 0);
  ASSERT_EQ(result.code, 0) << result.err;
  written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"i0", "b0"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"h"});
}

// Check that --call on a child of a repeated parent counts the child's own calls.
TEST_F(ExtractTest, CallOfChildCountsItsOwnCalls) {
  std::string path = WriteModel(TwoCallModel());
  ASSERT_EQ(Extract(path, "/Net/Block/Inner", OutPath(), /*json=*/false, 2).code, 0);
  std::string error;
  std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"i2"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"c"});
}

// Check that without --call a module of several calls is refused as non-convex, pointing to --call.
TEST_F(ExtractTest, SeveralCallsWithoutCallAreRefused) {
  ExpectRefused(TwoCallModel(), "/Net/Block",
                "module '/Net/Block' is not a convex region of the graph: node 'mid' (Sigmoid) takes values from the "
                "module and gives values back to it; extract one call with --call K (K < 2)");
}

// Check that the refusal of a non-convex module of one call does not point to --call.
TEST_F(ExtractTest, OneCallNonConvexRefusalHasNoCallHint) {
  std::string path = WriteModel(DetourModel("/Net/A"));
  RunResult result = Extract(path, "/Net/A", OutPath());
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err.find("--call"), std::string::npos) << result.err;
}

// Check that --call at or above the module's call count is refused in one line, nothing written.
TEST_F(ExtractTest, CallOutOfRangeIsRefused) {
  std::string path = WriteModel(TwoCallModel());
  for (int64_t call : {2, 7}) {
    RunResult result = Extract(path, "/Net/Block", OutPath(), /*json=*/false, call);
    EXPECT_EQ(result.code, 2);
    EXPECT_EQ(result.out, "");
    EXPECT_EQ(result.err,
              path + ": module '/Net/Block' has 2 calls; --call takes K < 2, not " + std::to_string(call) + "\n");
  }
  RunResult result = Extract(path, "/Net", OutPath(), /*json=*/false, 1);
  EXPECT_EQ(result.err, path + ": module '/Net' has 1 calls; --call takes K < 1, not 1\n");
  EXPECT_EQ(Files(), std::set<std::string>{"model.onnx"});
}

// Check that --call 0 of a module of one call writes the whole module.
TEST_F(ExtractTest, CallZeroOfOneCallModuleIsWholeModule) {
  std::string path = WriteModel(ChainModel());
  ASSERT_EQ(Extract(path, kLayer1, OutPath(), /*json=*/false, 0).code, 0);
  std::string error;
  std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"const1", "mul1", "add1", "sub1"}));
}

// /Net/Block runs twice on x; CSE kept one x*x for both calls (format 3: "TAG#K"):
//   m0  Mul(x, x) -> m    /Net/Block call 0, hiertag.shared_with ["/Net/Block#1"]
//   b0  Add(m, x) -> h    /Net/Block call 0
//   b1  Add(m, h) -> y    /Net/Block call 1      y: model output
ModelSpec CallsSharingANodeModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  for (const char* value : {"x", "m", "h", "y"}) model.graph.Type(value, {2, 3});
  model.graph.Add(Node("m0", "Mul").In({"x", "x"}).Out({"m"}).Tag("/Net/Block").SharedWith({"/Net/Block#1"}))
      .Add(Node("b0", "Add").In({"m", "x"}).Out({"h"}).Tag("/Net/Block"))
      .Add(Node("b1", "Add").In({"m", "h"}).Out({"y"}).Tag("/Net/Block").Call(1));
  model.Module("/Net", "", "test.Net").Module("/Net/Block", "block", "test.Block");
  model.FindModule("/Net/Block").Calls({0, 1});
  return model;
}

// Check that a node shared by two calls of one module belongs to each call, and
// that the other call's read of it is no output of either.
TEST_F(ExtractTest, NodeSharedByTwoCallsBelongsToEach) {
  std::string path = WriteModel(CallsSharingANodeModel());
  ASSERT_EQ(Validate(path).code, 0) << Validate(path).out;
  std::string error;
  ASSERT_EQ(Extract(path, "/Net/Block", OutPath(), /*json=*/false, 0).code, 0);
  std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"m0", "b0"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), std::vector<std::string>{"x"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"h"});
  ASSERT_EQ(Extract(path, "/Net/Block", OutPath(), /*json=*/false, 1).code, 0);
  written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), (std::vector<std::string>{"m0", "b1"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"x", "h"}));
  EXPECT_EQ(ValueNames(written->graphs.at(0).outputs), std::vector<std::string>{"y"});
}

// Check that a node shared with one call of another module is not taken by that module's other call.
TEST_F(ExtractTest, NodeSharedWithOneCallIsNotInTheOther) {
  ModelSpec model = CallsSharingANodeModel();
  model.graph.Find("m0").metadata.clear();
  model.graph.Find("m0").Tag("/Net/Block").SharedWith({"/Net/Block#0"});
  std::string path = WriteModel(model);
  ASSERT_EQ(Extract(path, "/Net/Block", OutPath(), /*json=*/false, 1).code, 0);
  std::string error;
  std::optional<OnnxModel> written = OnnxModel::Load(OutPath(), &error);
  ASSERT_TRUE(written) << error;
  EXPECT_EQ(NodeNames(*written), std::vector<std::string>{"b1"});
  EXPECT_EQ(ValueNames(written->graphs.at(0).inputs), (std::vector<std::string>{"m", "h"}));
}

// Check that a shared call reference to a call the module does not have is reported by validate.
TEST_F(ExtractTest, SharedCallOutOfRangeIsInvalid) {
  ModelSpec model = CallsSharingANodeModel();
  model.graph.Find("m0").metadata.clear();
  model.graph.Find("m0").Tag("/Net/Block").SharedWith({"/Net/Block#2"});
  RunResult result = Validate(WriteModel(model));
  EXPECT_EQ(result.code, 1);
  EXPECT_NE(result.out.find("shared tag '/Net/Block#2' names call 2, but '/Net/Block' has 2 calls"), std::string::npos)
      << result.out;
}

// Check that a node's hiertag.call that is not a decimal is refused under --call.
TEST_F(ExtractTest, MalformedNodeCallIsRefusedUnderCall) {
  ModelSpec model = TwoCallModel();
  model.graph.Find("i2").metadata.back().second = "two";
  std::string path = WriteModel(model);
  RunResult result = Extract(path, "/Net/Block", OutPath(), /*json=*/false, 1);
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err, path + ": node 'i2' (Relu): hiertag.call 'two' is not a decimal call ordinal\n");
}

// Check that --json carries the call when given, and not otherwise.
TEST_F(ExtractTest, JsonCarriesCall) {
  std::string path = WriteModel(TwoCallModel());
  RunResult result = Extract(path, "/Net/Block", OutPath(), /*json=*/true, 1);
  ASSERT_EQ(result.code, 0) << result.err;
  std::string error;
  std::optional<Json> json = ParseJson(result.out, &error);
  ASSERT_TRUE(json) << error << "\n" << result.out;
  ASSERT_NE(FindMember(*json, "call"), nullptr) << result.out;
  EXPECT_EQ(*FindMember(*json, "call"), 1);
  json = ParseJson(Extract(WriteModel(ChainModel(), "chain.onnx"), kLayer1, OutPath(), /*json=*/true).out, &error);
  ASSERT_TRUE(json) << error;
  EXPECT_EQ(FindMember(*json, "call"), nullptr);
}

// Check that without -o the call is part of the default output name.
TEST_F(ExtractTest, DefaultOutputPathNamesCall) {
  std::string path = WriteModel(TwoCallModel());
  RunResult result = Extract(path, "/Net/Block", "", /*json=*/false, 1);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "model.Net_Block.call1.onnx"}));
}

// Check that --call reaches extract through the command line, and a bad value is a usage error.
TEST_F(ExtractTest, CommandLinePassesCall) {
  std::string path = WriteModel(TwoCallModel());
  RunResult tool = Tool({"extract", path, "--module", "/Net/Block", "--call", "1", "-o", OutPath(), "--json"});
  EXPECT_EQ(tool.code, 0) << tool.err;
  EXPECT_EQ(tool.out, Extract(path, "/Net/Block", OutPath(), /*json=*/true, 1).out);
  for (const char* bad : {"-1", "one", "1x", ""}) {
    RunResult result = Tool({"extract", path, "--module", "/Net/Block", "--call", bad});
    EXPECT_EQ(result.code, 2) << bad;
    EXPECT_EQ(result.err, "hiertag extract: --call takes a whole number >= 0, not '" + std::string(bad) +
                              "' (see 'hiertag extract --help')\n");
  }
  RunResult missing = Tool({"extract", path, "--module", "/Net/Block", "--call"});
  EXPECT_EQ(missing.err, "hiertag extract: --call needs a number (see 'hiertag extract --help')\n");
}

// The chain model with Layer.1's weight w1 (FLOAT [2,3]: 24 bytes) kept in
// "weights.bin" at offset 8 beside the model: 8 bytes of another tensor first.
ModelSpec ExternalWeightModel(const std::string& location = "weights.bin") {
  ModelSpec model = ChainModel();
  model.graph.initializers[1].external = ExternalData{location, 8, 24};
  return model;
}

class ExtractExternalDataTest : public ExtractTest {
 protected:
  // The data file beside the model: 8 bytes of filler, then w1's 24 bytes 1..24.
  void WriteWeights(const std::string& name = "weights.bin") {
    std::string data(8, '\xee');
    for (int i = 1; i <= 24; ++i) data.push_back(static_cast<char>(i));
    std::ofstream((dir_ / name).string(), std::ios::binary) << data;
  }
  std::string Weights() const {
    std::string data;
    for (int i = 1; i <= 24; ++i) data.push_back(static_cast<char>(i));
    return data;
  }
  RunResult ExtractWith(const std::string& path, ExternalDataMode mode, const std::string& out) {
    RunResult result;
    std::ostringstream out_stream, err_stream;
    result.code = RunExtract(path, kLayer1, ExtractOptions{std::nullopt, out, mode, "", NativeInferTypes()}, false,
                             out_stream, err_stream);
    result.out = out_stream.str();
    result.err = err_stream.str();
    return result;
  }
  // The written tensor w1 as onnx reads it.
  onnx::TensorProto WrittenWeight(const std::string& out) {
    onnx::ModelProto model;
    std::ifstream in(out, std::ios::binary);
    EXPECT_TRUE(model.ParseFromIstream(&in));
    for (const onnx::TensorProto& tensor : model.graph().initializer()) {
      if (tensor.name() == "w1") return tensor;
    }
    ADD_FAILURE() << "no w1 in " << out;
    return {};
  }
};

// Check that --external-data inline puts the tensor's bytes into the output itself.
TEST_F(ExtractExternalDataTest, InlineHoldsTheBytes) {
  WriteWeights();
  std::string path = WriteModel(ExternalWeightModel());
  RunResult result = ExtractWith(path, ExternalDataMode::kInline, OutPath());
  ASSERT_EQ(result.code, 0) << result.err;
  onnx::TensorProto weight = WrittenWeight(OutPath());
  EXPECT_EQ(weight.data_location(), onnx::TensorProto::DEFAULT);
  EXPECT_EQ(weight.raw_data(), Weights());
  EXPECT_EQ(weight.external_data_size(), 0);
}

// Check that --external-data copy writes OUT.data holding just the bytes the module needs.
TEST_F(ExtractExternalDataTest, CopyWritesADataFileBesideTheOutput) {
  WriteWeights();
  std::string path = WriteModel(ExternalWeightModel());
  RunResult result = ExtractWith(path, ExternalDataMode::kCopy, OutPath());
  ASSERT_EQ(result.code, 0) << result.err;
  std::ifstream data(OutPath() + ".data", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(data), {}), Weights());
  onnx::TensorProto weight = WrittenWeight(OutPath());
  EXPECT_EQ(weight.data_location(), onnx::TensorProto::EXTERNAL);
  ASSERT_EQ(weight.external_data_size(), 3);
  EXPECT_EQ(weight.external_data(0).value(), "out.onnx.data");
  EXPECT_EQ(weight.external_data(1).value(), "0");
  EXPECT_EQ(weight.external_data(2).value(), "24");
}

// Check that --external-data copy copies a range once however many initializers
// hold it (tied weights saved once): w1 and its alias w1b both point at the one
// copy in OUT.data.
TEST_F(ExtractExternalDataTest, CopyWritesEachRangeOnce) {
  WriteWeights();
  ModelSpec model = ExternalWeightModel();
  model.graph.Initializer("w1b", {2, 3});
  model.graph.initializers.back().external = ExternalData{"weights.bin", 8, 24};
  model.graph.Type("n", {2, 3});
  model.graph.outputs.push_back("n");
  model.graph.Add(Node("mul1b", "Mul").In({"m", "w1b"}).Out({"n"}).Tag("/Net/Layer.1"));
  std::string path = WriteModel(model);
  RunResult result = ExtractWith(path, ExternalDataMode::kCopy, OutPath());
  ASSERT_EQ(result.code, 0) << result.err;
  std::ifstream data(OutPath() + ".data", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(data), {}), Weights());
  onnx::ModelProto written;
  std::ifstream in(OutPath(), std::ios::binary);
  ASSERT_TRUE(written.ParseFromIstream(&in));
  int external = 0;
  for (const onnx::TensorProto& tensor : written.graph().initializer()) {
    if (tensor.name() != "w1" && tensor.name() != "w1b") continue;
    ++external;
    ASSERT_EQ(tensor.external_data_size(), 3) << tensor.name();
    EXPECT_EQ(tensor.external_data(1).value(), "0") << tensor.name();
    EXPECT_EQ(tensor.external_data(2).value(), "24") << tensor.name();
  }
  EXPECT_EQ(external, 2);
}

// Check that --external-data reference points at the source's file from the output's folder.
TEST_F(ExtractExternalDataTest, ReferenceKeepsTheSourcesFile) {
  WriteWeights();
  std::string path = WriteModel(ExternalWeightModel());
  RunResult result = ExtractWith(path, ExternalDataMode::kReference, OutPath());
  ASSERT_EQ(result.code, 0) << result.err;
  onnx::TensorProto weight = WrittenWeight(OutPath());
  EXPECT_EQ(weight.external_data(0).value(), "weights.bin");
  EXPECT_EQ(weight.external_data(1).value(), "8");
  EXPECT_FALSE(std::filesystem::exists(OutPath() + ".data"));
}

// Check that reference is refused when the source's file is not inside the output's folder.
TEST_F(ExtractExternalDataTest, ReferenceOutsideTheOutputsFolderIsRefused) {
  WriteWeights();
  std::string path = WriteModel(ExternalWeightModel());
  std::filesystem::create_directories(dir_ / "elsewhere");
  std::string out = (dir_ / "elsewhere" / "out.onnx").string();
  RunResult result = ExtractWith(path, ExternalDataMode::kReference, out);
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.err, path +
                            ": initializer 'w1': its data file 'weights.bin' is not inside the output's folder; "
                            "write it with --external-data copy or inline\n");
  EXPECT_FALSE(std::filesystem::exists(out));
}

// Check that a location leading outside the model's folder is refused, nothing opened or written.
TEST_F(ExtractExternalDataTest, TraversingLocationIsRefused) {
  std::string path = WriteModel(ExternalWeightModel("../../etc/passwd"));
  for (ExternalDataMode mode :
       {ExternalDataMode::kAuto, ExternalDataMode::kInline, ExternalDataMode::kCopy, ExternalDataMode::kReference}) {
    RunResult result = ExtractWith(path, mode, OutPath());
    EXPECT_EQ(result.code, 2);
    EXPECT_EQ(result.err, path +
                              ": initializer 'w1': external data location '../../etc/passwd' leads outside the "
                              "model's folder\n");
    EXPECT_FALSE(std::filesystem::exists(OutPath()));
    EXPECT_FALSE(std::filesystem::exists(OutPath() + ".data"));
  }
}

// Check that an absolute location is refused too.
TEST_F(ExtractExternalDataTest, AbsoluteLocationIsRefused) {
  std::string path = WriteModel(ExternalWeightModel("/etc/passwd"));
  RunResult result = ExtractWith(path, ExternalDataMode::kInline, OutPath());
  EXPECT_EQ(result.code, 2);
  EXPECT_NE(result.err.find("external data location '/etc/passwd' is an absolute path"), std::string::npos)
      << result.err;
}

// Check that a missing data file is refused, and a file too short for the tensor too.
TEST_F(ExtractExternalDataTest, MissingOrShortDataFileIsRefused) {
  std::string path = WriteModel(ExternalWeightModel());
  RunResult missing = ExtractWith(path, ExternalDataMode::kCopy, OutPath());
  EXPECT_EQ(missing.code, 2);
  EXPECT_NE(missing.err.find("external data file 'weights.bin' does not exist next to the model"), std::string::npos);
  std::ofstream((dir_ / "weights.bin").string(), std::ios::binary) << std::string(20, 'x');
  RunResult short_file = ExtractWith(path, ExternalDataMode::kInline, OutPath());
  EXPECT_EQ(short_file.code, 2);
  EXPECT_NE(short_file.err.find("holds 20 bytes, the tensor needs 8 + 24"), std::string::npos) << short_file.err;
  EXPECT_FALSE(std::filesystem::exists(OutPath()));
}

// Check that validate reports a traversing location and a missing file, and accepts a good one.
TEST_F(ExtractExternalDataTest, ValidateChecksExternalData) {
  WriteWeights();
  EXPECT_EQ(Validate(WriteModel(ExternalWeightModel())).code, 0);
  RunResult hostile = Validate(WriteModel(ExternalWeightModel("../../etc/passwd"), "hostile.onnx"));
  EXPECT_EQ(hostile.code, 1);
  EXPECT_NE(hostile.out.find("initializer 'w1': external data location '../../etc/passwd' leads outside the model's "
                             "folder"),
            std::string::npos)
      << hostile.out;
  RunResult missing = Validate(WriteModel(ExternalWeightModel("gone.bin"), "missing.onnx"));
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("external data file 'gone.bin' does not exist next to the model"), std::string::npos);
}

// Check that a location whose file is a symbolic link leading out of the model's folder is refused.
TEST_F(ExtractExternalDataTest, SymbolicLinkLeadingOutIsRefused) {
  std::filesystem::create_directories(dir_ / "outside");
  std::ofstream((dir_ / "outside" / "secret.bin").string(), std::ios::binary) << std::string(32, 's');
  std::filesystem::create_directories(dir_ / "model");
  std::filesystem::create_symlink(dir_ / "outside" / "secret.bin", dir_ / "model" / "weights.bin");
  std::string path = WriteModel(ExternalWeightModel(), "model/model.onnx");
  RunResult result = ExtractWith(path, ExternalDataMode::kInline, OutPath());
  EXPECT_EQ(result.code, 2);
  EXPECT_NE(result.err.find("external data location 'weights.bin' leads outside the model's folder"), std::string::npos)
      << result.err;
}

// The bytes of a file ("" when it cannot be read).
std::string FileBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Check that an output naming the model itself, or a symbolic or hard link to
// it, is refused in one line and the model is left as it was.
TEST_F(ExtractExternalDataTest, OutputThatIsTheModelIsRefused) {
  std::string path = WriteModel(ChainModel());
  std::string before = FileBytes(path);
  std::filesystem::create_symlink(path, dir_ / "symlink.onnx");
  std::filesystem::create_hard_link(path, dir_ / "hardlink.onnx");
  const std::string through_a_link = " (the same file through a link)";
  for (const auto& [out, through] : {std::pair{path, std::string()}, std::pair{OutPath("symlink.onnx"), through_a_link},
                                     std::pair{OutPath("hardlink.onnx"), through_a_link}}) {
    RunResult result = ExtractWith(path, ExternalDataMode::kAuto, out);
    EXPECT_EQ(result.code, 2);
    EXPECT_EQ(result.out, "");
    EXPECT_EQ(result.err,
              "output '" + out + "' is the input '" + path + "'" + through + ": refusing to overwrite it\n");
    EXPECT_EQ(FileBytes(path), before);
    EXPECT_TRUE(std::filesystem::is_symlink(dir_ / "symlink.onnx"));
  }
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "symlink.onnx", "hardlink.onnx"}));
}

// Check that an output that exists but is another file is replaced, as before.
TEST_F(ExtractExternalDataTest, OutputThatIsAnotherFileIsReplaced) {
  std::string path = WriteModel(ChainModel());
  std::ofstream(OutPath(), std::ios::binary) << "an earlier result";
  RunResult result = ExtractWith(path, ExternalDataMode::kAuto, OutPath());
  ASSERT_EQ(result.code, 0) << result.err;
  std::string error;
  EXPECT_TRUE(OnnxModel::Load(OutPath(), &error)) << error;
}

// Check that an output naming the model's external data file is refused, and
// that --external-data copy refuses an OUT.data that is the model's data file.
TEST_F(ExtractExternalDataTest, OutputThatIsTheModelsDataFileIsRefused) {
  WriteWeights("out.onnx.data");
  std::string path = WriteModel(ExternalWeightModel("out.onnx.data"));
  std::string weights = FileBytes(dir_ / "out.onnx.data");
  std::string data = OutPath("out.onnx.data");
  std::string refusal = "output '" + data + "' is the external data file 'out.onnx.data' of the " + "input '" + path +
                        "': refusing to overwrite it\n";
  RunResult as_model = ExtractWith(path, ExternalDataMode::kInline, data);
  EXPECT_EQ(as_model.code, 2);
  EXPECT_EQ(as_model.err, refusal);
  RunResult as_data = ExtractWith(path, ExternalDataMode::kCopy, OutPath());
  EXPECT_EQ(as_data.code, 2);
  EXPECT_EQ(as_data.err, refusal);
  EXPECT_EQ(FileBytes(dir_ / "out.onnx.data"), weights);
  EXPECT_EQ(Files(), (std::set<std::string>{"model.onnx", "out.onnx.data"}));
  // Inline, the data file is no output: extract reads it and writes out.onnx alone.
  ASSERT_EQ(ExtractWith(path, ExternalDataMode::kInline, OutPath()).code, 0);
  EXPECT_EQ(FileBytes(dir_ / "out.onnx.data"), weights);
}

// Check that MainGraphValueInfos keeps exactly the main graph's inputs, outputs and
// value_info, in order, and none of its nodes, initializers or a nested graph's values.
TEST(MainGraphValueInfosTest, KeepsTheMainGraphsTypedValuesAndNothingElse) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  onnx::GraphProto* graph = model.mutable_graph();
  auto typed = [](onnx::ValueInfoProto* value, const std::string& name, int64_t dim) {
    value->set_name(name);
    onnx::TypeProto_Tensor* tensor = value->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  typed(graph->add_input(), "x", 2);
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type("If");
  node->add_input("c");
  node->add_output("y");
  onnx::AttributeProto* branch = node->add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  typed(branch->mutable_g()->add_value_info(), "nested", 9);
  typed(graph->add_value_info(), "a", 3);
  typed(graph->add_output(), "y", 4);
  typed(graph->add_value_info(), "b", 5);
  graph->add_initializer()->set_name("w");
  std::string error;
  std::optional<std::string> values = MainGraphValueInfos(model.SerializeAsString(), &error);
  ASSERT_TRUE(values) << error;
  onnx::GraphProto kept;
  ASSERT_TRUE(kept.ParseFromString(*values));
  EXPECT_EQ(kept.node_size(), 0);
  EXPECT_EQ(kept.initializer_size(), 0);
  ASSERT_EQ(kept.input_size(), 1);
  EXPECT_EQ(kept.input(0).SerializeAsString(), graph->input(0).SerializeAsString());
  ASSERT_EQ(kept.output_size(), 1);
  EXPECT_EQ(kept.output(0).SerializeAsString(), graph->output(0).SerializeAsString());
  ASSERT_EQ(kept.value_info_size(), 2);
  EXPECT_EQ(kept.value_info(0).name(), "a");
  EXPECT_EQ(kept.value_info(1).SerializeAsString(), graph->value_info(1).SerializeAsString());
}

// Check that bytes that are no model with one graph give OnnxModel::Parse's reason, not types.
TEST(MainGraphValueInfosTest, RefusesWhatIsNoModelWithOneGraph) {
  onnx::ModelProto no_graph;
  no_graph.set_ir_version(8);
  onnx::ModelProto model;
  model.mutable_graph()->add_input()->set_name("x");
  std::string serialized = model.SerializeAsString();
  for (const auto& [bytes, reason] : std::vector<std::pair<std::string, std::string>>{
           {no_graph.SerializeAsString(), "not an ONNX model (no graph)"},
           {serialized + serialized, "the model has two graphs"},
           {serialized.substr(0, serialized.size() - 1), "(truncated or another format)"},
           {"not a model", "(truncated or another format)"},
           {std::string("\x3a\x02\x5a\xff", 4), "a graph is not well-formed"}}) {
    std::string error;
    std::string parse_error;
    EXPECT_FALSE(MainGraphValueInfos(bytes, &error)) << bytes;
    EXPECT_NE(error.find(reason), std::string::npos) << error;
    EXPECT_FALSE(OnnxModel::Parse(bytes, &parse_error));
    EXPECT_EQ(error, parse_error);
  }
}

// Check that WithWeightsLeftInFile points each main-graph initializer over the
// threshold at its raw_data where it lies in the file, and leaves every other
// byte as it was: smaller ones, external ones, ones in typed fields, a nested
// graph's, and the rest of the model.
TEST(WithWeightsLeftInFileTest, PointsLargeInitializersAtTheirBytesInTheFile) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_metadata_props()->set_key("hiertag.modules");
  onnx::GraphProto* graph = model.mutable_graph();
  auto raw = [](onnx::TensorProto* tensor, const std::string& name, size_t bytes, char fill) {
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::UINT8);
    tensor->add_dims(static_cast<int64_t>(bytes));
    std::string data(bytes, fill);
    for (size_t i = 0; i < bytes; i += 7) data[i] = static_cast<char>(i);
    tensor->set_raw_data(data);
  };
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type("If");
  node->add_input("c");
  onnx::AttributeProto* branch = node->add_attribute();
  branch->set_name("then_branch");
  branch->set_type(onnx::AttributeProto::GRAPH);
  raw(branch->mutable_g()->add_initializer(), "nested", 2000, 'n');
  raw(graph->add_initializer(), "large", 2000, 'l');
  raw(graph->add_initializer(), "small", 1024, 's');
  raw(graph->add_initializer(), "second", 1025, 'x');
  graph->mutable_initializer(2)->set_data_location(onnx::TensorProto::DEFAULT);  // written, as some tools do
  onnx::TensorProto* typed = graph->add_initializer();
  typed->set_name("typed");
  typed->set_data_type(onnx::TensorProto::FLOAT);
  for (int i = 0; i < 600; ++i) typed->add_float_data(static_cast<float>(i));
  onnx::TensorProto* outside = graph->add_initializer();
  outside->set_name("outside");
  outside->set_data_location(onnx::TensorProto::EXTERNAL);
  onnx::StringStringEntryProto* location = outside->add_external_data();
  location->set_key("location");
  location->set_value("w.bin");
  graph->add_output()->set_name("y");
  std::string file = model.SerializeAsString();

  std::string error;
  std::optional<std::string> left = WithWeightsLeftInFile(file, "model.onnx", 1024, &error);
  ASSERT_TRUE(left) << error;
  onnx::ModelProto read;
  ASSERT_TRUE(read.ParseFromString(*left));
  ASSERT_EQ(read.graph().initializer_size(), 5);
  for (int index : {0, 2}) {  // "large" and "second"
    const onnx::TensorProto& tensor = read.graph().initializer(index);
    const onnx::TensorProto& original = graph->initializer(index);
    EXPECT_FALSE(tensor.has_raw_data()) << tensor.name();
    EXPECT_EQ(tensor.data_location(), onnx::TensorProto::EXTERNAL);
    std::map<std::string, std::string> entries;
    for (const auto& entry : tensor.external_data()) entries[entry.key()] = entry.value();
    ASSERT_EQ(entries.size(), 3u);
    EXPECT_EQ(entries["location"], "model.onnx");
    EXPECT_EQ(entries["length"], std::to_string(original.raw_data().size()));
    EXPECT_EQ(file.substr(std::stoull(entries["offset"]), original.raw_data().size()), original.raw_data());
  }
  // Held again where they lie, the model is the file it was read from.
  for (int index : {0, 2}) {
    onnx::TensorProto* tensor = read.mutable_graph()->mutable_initializer(index);
    tensor->set_raw_data(graph->initializer(index).raw_data());
    tensor->clear_external_data();
    tensor->clear_data_location();
    if (graph->initializer(index).has_data_location()) tensor->set_data_location(onnx::TensorProto::DEFAULT);
  }
  EXPECT_EQ(read.SerializeAsString(), file);
  // Nothing over the threshold: the file as it is.
  EXPECT_EQ(WithWeightsLeftInFile(file, "model.onnx", 2000, &error), file);
}

// Check that bytes that are no model with one graph give OnnxModel::Parse's reason.
TEST(WithWeightsLeftInFileTest, RefusesWhatIsNoModelWithOneGraph) {
  onnx::ModelProto no_graph;
  no_graph.set_ir_version(8);
  onnx::ModelProto model;
  model.mutable_graph()->add_initializer()->set_raw_data(std::string(2000, 'w'));
  std::string serialized = model.SerializeAsString();
  for (const auto& [bytes, reason] : std::vector<std::pair<std::string, std::string>>{
           {no_graph.SerializeAsString(), "not an ONNX model (no graph)"},
           {serialized + serialized, "the model has two graphs"},
           {serialized.substr(0, serialized.size() - 1), "(truncated or another format)"},
           {"not a model", "(truncated or another format)"}}) {
    std::string error;
    std::string parse_error;
    EXPECT_FALSE(WithWeightsLeftInFile(bytes, "model.onnx", 1024, &error)) << bytes;
    EXPECT_NE(error.find(reason), std::string::npos) << error;
    EXPECT_FALSE(OnnxModel::Parse(bytes, &parse_error));
    EXPECT_EQ(error, parse_error);
  }
}

}  // namespace
}  // namespace hiertag::tooltest
