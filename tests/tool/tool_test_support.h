// Shared by the tool tests: a per-test temporary directory to write models into,
// the commands run with captured output, and the tagged model most tests start from.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hiertag/tool/shape_inference.h"
#include "hiertag/tool/tool_commands.h"
#include "model_builder.h"

namespace hiertag::tooltest {

struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
};

// The lines of `text`, without their "\n".
inline std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// A tagged three-level model, valid, 7 nodes, 4 modules:
//   /Net (root)        n6 Add                                         scale (INT64 [2]) read by Layer.0 and Layer.1
//   /Net/Layer.0       n1 Relu, n2 Add (b0: FLOAT [3,5]), n3 Mul (scale)
//   /Net/Layer.0/Attn  n0 MatMul (wq: FLOAT [4,4])
//   /Net/Layer.1       n4 Mul (scale), n5 MatMul (w1: FLOAT [2,3,4])
inline ModelSpec LayeredModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Initializer("wq", {4, 4})
      .Initializer("b0", {3, 5})
      .Initializer("scale", {2}, kInt64)
      .Initializer("w1", {2, 3, 4});
  model.graph.Add(Node("n0", "MatMul").In({"x", "wq"}).Out({"q"}).Tag("/Net/Layer.0/Attn"))
      .Add(Node("n1", "Relu").In({"q"}).Out({"r"}).Tag("/Net/Layer.0"))
      .Add(Node("n2", "Add").In({"r", "b0"}).Out({"a"}).Tag("/Net/Layer.0"))
      .Add(Node("n3", "Mul").In({"a", "scale"}).Out({"m"}).Tag("/Net/Layer.0"))
      .Add(Node("n4", "Mul").In({"m", "scale"}).Out({"s"}).Tag("/Net/Layer.1"))
      .Add(Node("n5", "MatMul").In({"s", "w1"}).Out({"t"}).Tag("/Net/Layer.1"))
      .Add(Node("n6", "Add").In({"t", "x"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.Block")
      .Module("/Net/Layer.0/Attn", "layers.0.attn", "test.Attention")
      .Module("/Net/Layer.1", "layers.1", "test.Block");
  return model;
}

// A format-2 file of the Annotated Transformer pattern, valid, 3 nodes, 4 modules: Layer.0 owns
// Attn, but Attn runs inside its Sublayer.0's forward, so the tag tree (the call tree) puts Attn
// under Sublayer.0 though its path is not inside the sublayer's:
//   /Net                           ""                    n2 Add
//   /Net/Layer.0                   layers.0
//   /Net/Layer.0/Sublayer.0        layers.0.sublayer.0   n1 Add
//   /Net/Layer.0/Sublayer.0/Attn   layers.0.attn         n0 MatMul (wq: FLOAT [4,4])
inline ModelSpec CallTreeModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Initializer("wq", {4, 4});
  model.graph.Add(Node("n0", "MatMul").In({"x", "wq"}).Out({"q"}).Tag("/Net/Layer.0/Sublayer.0/Attn"))
      .Add(Node("n1", "Add").In({"x", "q"}).Out({"s"}).Tag("/Net/Layer.0/Sublayer.0"))
      .Add(Node("n2", "Add").In({"s", "x"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net")
      .Module("/Net/Layer.0", "layers.0", "test.EncoderLayer")
      .Module("/Net/Layer.0/Sublayer.0", "layers.0.sublayer.0", "test.SublayerConnection")
      .Module("/Net/Layer.0/Sublayer.0/Attn", "layers.0.attn", "test.Attention");
  return model;
}

// The escaped tag of the hostile module of HostileNameModel, as this writer spells it.
inline constexpr const char* kHostileTag = "/Net/Expert[line%0Abreak]";

// A valid tagged model whose module is named as hostilely as Python allows, 2 nodes, 2 modules:
//   /Net          ""             n0 Relu(x) -> r    x, r, y: FLOAT [2,3]
//   `tag`         "line\nbreak"  n1 Neg(r) -> y     class "test.esc\x1b[1m"
// `tag` is kHostileTag, or "/Net/Expert[line\nbreak]" as writers before the escape of control
// characters spelled it.
inline ModelSpec HostileNameModel(const std::string& tag = kHostileTag) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Type("x", {2, 3}).Type("y", {2, 3}).Type("r", {2, 3});
  model.graph.Add(Node("n0", "Relu").In({"x"}).Out({"r"}).Tag("/Net"))
      .Add(Node("n1\x1b]0;title\x07", "Neg").In({"r"}).Out({"y"}).Tag(tag));
  model.Module("/Net", "", "test.Net").Module(tag, "line\nbreak", "test.esc\x1b[1m");
  return model;
}

class ToolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("hiertag_tool_tests." + std::to_string(getpid()) + "." + info->test_suite_name() + "." + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }

  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Writes `bytes` to `file` in the test's directory and returns its path.
  std::string Write(const std::string& bytes, const std::string& file = "model.onnx") {
    std::string path = (dir_ / file).string();
    std::ofstream stream(path, std::ios::binary);
    stream << bytes;
    EXPECT_TRUE(stream.good()) << path;
    return path;
  }

  std::string WriteModel(const ModelSpec& model, const std::string& file = "model.onnx") {
    return Write(model.Bytes(), file);
  }

  static RunResult Validate(const std::string& path, bool json = false) {
    RunResult result;
    std::ostringstream out, err;
    result.code = RunValidate(path, json, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  static RunResult Tree(const std::string& path, bool json = false, int depth = -1) {
    RunResult result;
    std::ostringstream out, err;
    result.code = RunTree(path, json ? TreeFormat::kJson : TreeFormat::kText, depth, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  // Runs extract; an empty `out_path` leaves OUT to its default.
  static RunResult Extract(const std::string& path, const std::string& tag, const std::string& out_path = "",
                           bool json = false, std::optional<int64_t> call = std::nullopt) {
    RunResult result;
    std::ostringstream out, err;
    result.code = RunExtract(path, tag, ExtractOptions{call, out_path, ExternalDataMode::kAuto, "", NativeInferTypes()},
                             json, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  static RunResult Tool(const std::vector<std::string>& args) {
    RunResult result;
    std::ostringstream out, err;
    result.code = RunTool(args, NativeInferTypes(), out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  std::filesystem::path dir_;
};

}  // namespace hiertag::tooltest
