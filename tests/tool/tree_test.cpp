// Tests of `hiertag tree` (RunTree): node, op and parameter counts per module, depth, order, text / JSON / CSV.
#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <string>
#include <vector>

#include "hiertag/core/format/json.h"
#include "tool_test_support.h"

namespace hiertag::tooltest {
namespace {

struct JsonModule {
  std::string tag, path, class_name;
  double depth = -1;
  double nodes_own = -1, nodes_total = -1;
  double params_own = -1, params_total = -1;
  double bytes_own = -1, bytes_total = -1;
  double calls = -1;
  std::vector<std::string> folded_into;
  // Each rewrite listing the module: "<kind> with <other tags, comma-separated> by <pass> in '<node>'".
  std::vector<std::string> rewrites;
  std::map<std::string, double> ops;
};

class TreeTest : public ToolTest {
 protected:
  // Runs `tree --csv` on the file at `path`.
  static RunResult TreeCsv(const std::string& path, int depth = -1) {
    RunResult result;
    std::ostringstream out, err;
    result.code = RunTree(path, TreeFormat::kCsv, depth, out, err);
    result.out = out.str();
    result.err = err.str();
    return result;
  }

  // Runs `tree --json` on `model` and returns its modules in printed order.
  std::vector<JsonModule> TreeJson(const ModelSpec& model, int depth = -1) {
    std::string path = WriteModel(model);
    RunResult result = Tree(path, /*json=*/true, depth);
    EXPECT_EQ(result.code, 0) << result.err;
    EXPECT_EQ(result.err, "");
    std::string error;
    std::optional<Json> json = ParseJson(result.out, &error);
    EXPECT_TRUE(json) << error << "\n" << result.out;
    if (!json || FindMember(*json, "modules") == nullptr || !FindMember(*json, "modules")->is_array()) {
      ADD_FAILURE() << "no \"modules\" array in " << result.out;
      return {};
    }
    std::vector<JsonModule> modules;
    for (const Json& item : *FindMember(*json, "modules")) {
      JsonModule module;
      auto text = [&](const char* key) {
        const Json* member = FindMember(item, key);
        EXPECT_TRUE(member && member->is_string()) << key << " in " << result.out;
        return member && member->is_string() ? member->get<std::string>() : std::string();
      };
      auto number = [&](const char* key) {
        const Json* member = FindMember(item, key);
        EXPECT_TRUE(member && member->is_number()) << key << " in " << result.out;
        return member && member->is_number() ? member->get<double>() : -1.0;
      };
      module.tag = text("tag");
      module.path = text("path");
      module.class_name = text("class");
      module.depth = number("depth");
      module.nodes_own = number("nodes_own");
      module.nodes_total = number("nodes_total");
      module.params_own = number("params_own");
      module.params_total = number("params_total");
      module.bytes_own = number("bytes_own");
      module.bytes_total = number("bytes_total");
      module.calls = number("calls");
      auto strings = [&](const Json* array) {
        std::optional<std::vector<std::string>> list = array ? ReadStrings(*array) : std::nullopt;
        EXPECT_TRUE(list) << result.out;
        return list.value_or(std::vector<std::string>{});
      };
      module.folded_into = strings(FindMember(item, "folded_into"));
      const Json* rewrites = FindMember(item, "rewrites");
      EXPECT_TRUE(rewrites && rewrites->is_array()) << "rewrites in " << result.out;
      for (const Json& rewrite : rewrites && rewrites->is_array() ? *rewrites : Json::array()) {
        std::string others;
        for (const std::string& tag : strings(FindMember(rewrite, "with"))) others += (others.empty() ? "" : ",") + tag;
        module.rewrites.push_back(rewrite.value("kind", "") + " with " + others + " by " + rewrite.value("pass", "") +
                                  " in '" + rewrite.value("node", "") + "'");
      }
      const Json* ops = FindMember(item, "ops");
      EXPECT_TRUE(ops && ops->is_object()) << "ops in " << result.out;
      if (ops) {
        for (const auto& [op_type, count] : ops->items()) module.ops[op_type] = count.get<double>();
      }
      modules.push_back(std::move(module));
    }
    return modules;
  }

  static std::vector<std::string> Tags(const std::vector<JsonModule>& modules) {
    std::vector<std::string> tags;
    for (const JsonModule& module : modules) tags.push_back(module.tag);
    return tags;
  }

  static const JsonModule& Get(const std::vector<JsonModule>& modules, const std::string& tag) {
    for (const JsonModule& module : modules) {
      if (module.tag == tag) return module;
    }
    static const JsonModule kMissing;
    ADD_FAILURE() << "no module " << tag;
    return kMissing;
  }
};

// A root /Seq with children Encoder and Decoder (Decoder sorts first by tag).
ModelSpec SeqModel() {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Initializer("we", {2, 2}).Initializer("wd", {2, 2});
  model.Module("/Seq", "", "test.Seq")
      .Module("/Seq/Decoder", "decoder", "test.Decoder")
      .Module("/Seq/Encoder", "encoder", "test.Encoder");
  return model;
}

// Check that the text tree shows each module's class, path, node counts, params and ops, children in graph order.
TEST_F(TreeTest, TextTreeOfLayeredModel) {
  std::string path = WriteModel(LayeredModel());
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0);
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(result.out,
            "Net  test.Net  (root)\n"
            "    nodes 1 own / 7 total;  params 2 own / 57 total (236 B)\n"
            "    ops Add 1\n"
            "  Layer.0  test.Block  layers.0\n"
            "      nodes 3 own / 4 total;  params 15 own / 31 total (124 B)\n"
            "      ops Add 1, Mul 1, Relu 1\n"
            "    Attn  test.Attention  layers.0.attn\n"
            "        nodes 1 own / 1 total;  params 16 own / 16 total (64 B)\n"
            "        ops MatMul 1\n"
            "  Layer.1  test.Block  layers.1\n"
            "      nodes 2 own / 2 total;  params 24 own / 24 total (96 B)\n"
            "      ops MatMul 1, Mul 1\n");
}

// Check that own node counts hold a module's own nodes and totals add its descendants'.
TEST_F(TreeTest, NodeCountsOwnAndTotal) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel());
  EXPECT_EQ(Get(modules, "/Net").nodes_own, 1);
  EXPECT_EQ(Get(modules, "/Net").nodes_total, 7);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").nodes_own, 3);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").nodes_total, 4);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").nodes_own, 1);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").nodes_total, 1);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").nodes_own, 2);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").nodes_total, 2);
}

// Check that a module with no nodes of its own has own 0 and its children's nodes in total.
TEST_F(TreeTest, ModuleWithoutOwnNodesCountsDescendants) {
  ModelSpec model = LayeredModel();
  for (const char* name : {"n1", "n2", "n3"}) {
    model.graph.Find(name).metadata.clear();
    model.graph.Find(name).Tag("/Net/Layer.0/Attn");
  }
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").nodes_own, 0);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").nodes_total, 4);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").nodes_own, 4);
  EXPECT_TRUE(Get(modules, "/Net/Layer.0").ops.empty());
}

// Check that the ops line lists a module's own op types, most frequent first, then by name.
TEST_F(TreeTest, OpHistogramMostFrequentFirst) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n2").op_type = "Relu";
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0);
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_GE(lines.size(), 6u) << result.out;
  EXPECT_EQ(lines[3], "  Layer.0  test.Block  layers.0");
  EXPECT_EQ(lines[5], "      ops Relu 2, Mul 1") << result.out;
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").ops, (std::map<std::string, double>{{"Mul", 1}, {"Relu", 2}}));
}

// Check that a module with no own nodes prints no ops line.
TEST_F(TreeTest, NoOpsLineWithoutOwnNodes) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n6").metadata.clear();
  model.graph.Find("n6").Tag("/Net/Layer.1");
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0);
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_GE(lines.size(), 3u) << result.out;
  EXPECT_EQ(lines[1], "    nodes 0 own / 7 total;  params 2 own / 57 total (236 B)");
  EXPECT_EQ(lines[2], "  Layer.0  test.Block  layers.0");
}

// Check that an initializer read only by nodes of /Net/Layer.0 counts as Layer.0's own and in Net's total.
TEST_F(TreeTest, InitializerOfOneLayerCountsForThatLayer) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel());
  // b0: FLOAT [3,5] read by n2 of Layer.0 only; wq: FLOAT [4,4] read by Attn, inside Layer.0.
  EXPECT_EQ(Get(modules, "/Net/Layer.0").params_own, 15);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").bytes_own, 60);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").params_total, 31);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").bytes_total, 124);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").params_own, 16);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").bytes_own, 64);
  EXPECT_EQ(Get(modules, "/Net").params_total, 57);
  EXPECT_EQ(Get(modules, "/Net").bytes_total, 236);
}

// Check that an initializer read by nodes of Layer.0 and Layer.1 counts as their common ancestor's own only.
TEST_F(TreeTest, InitializerOfTwoLayersCountsForCommonAncestor) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel());
  // scale: INT64 [2] (8 bytes each) read by n3 (Layer.0) and n4 (Layer.1).
  EXPECT_EQ(Get(modules, "/Net").params_own, 2);
  EXPECT_EQ(Get(modules, "/Net").bytes_own, 16);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").params_own, 24);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").params_total, 24);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").bytes_total, 96);
}

// Check that an initializer read by a module and its own descendant counts for the module.
TEST_F(TreeTest, InitializerOfModuleAndDescendantCountsForModule) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n2").inputs = {"r", "wq"};  // wq: also read by Attn, inside Layer.0
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").params_own, 16);
  EXPECT_EQ(Get(modules, "/Net/Layer.0/Attn").params_own, 0);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").params_total, 16);
  EXPECT_EQ(Get(modules, "/Net").params_total, 42);  // b0 is read by no one now
}

// Check that parameter counts above a thousand and bytes above a KiB are printed grouped and scaled.
TEST_F(TreeTest, LargeParameterCountsArePrintedReadably) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.Initializer("w", {32, 32});
  model.graph.Add(Node("mm", "MatMul").In({"x", "w"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net");
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0);
  EXPECT_EQ(result.out,
            "Net  test.Net  (root)\n"
            "    nodes 1 own / 1 total;  params 1,024 own / 1,024 total (4.0 KiB)\n"
            "    ops MatMul 1\n");
}

// A root /Net whose one MatMul reads initializer `w`.
ModelSpec OneInitializerModel(InitializerSpec w) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.initializers.push_back(std::move(w));
  model.graph.Add(Node("mm", "MatMul").In({"x", "w"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net");
  return model;
}

// Check that dims written one field each give elements = product of dims and bytes = elements * 4 for FLOAT.
TEST_F(TreeTest, UnpackedDimsCountElements) {
  std::vector<JsonModule> modules = TreeJson(OneInitializerModel({"w", {3, 7, 5}, kFloat, false}));
  EXPECT_EQ(Get(modules, "/Net").params_own, 105);
  EXPECT_EQ(Get(modules, "/Net").bytes_own, 420);
}

// Check that dims written as one packed field count the same.
TEST_F(TreeTest, PackedDimsCountElements) {
  std::vector<JsonModule> modules = TreeJson(OneInitializerModel({"w", {3, 7, 5}, kFloat, true}));
  EXPECT_EQ(Get(modules, "/Net").params_own, 105);
  EXPECT_EQ(Get(modules, "/Net").bytes_own, 420);
  modules = TreeJson(OneInitializerModel({"w", {300, 200}, kFloat, true}));  // two-byte varints
  EXPECT_EQ(Get(modules, "/Net").params_own, 60000);
  EXPECT_EQ(Get(modules, "/Net").bytes_own, 240000);
}

// Check that bytes use the element size of the data type (FLOAT16: 2, INT64: 8).
TEST_F(TreeTest, BytesFollowDataType) {
  EXPECT_EQ(Get(TreeJson(OneInitializerModel({"w", {6}, kFloat16, false})), "/Net").bytes_own, 12);
  EXPECT_EQ(Get(TreeJson(OneInitializerModel({"w", {6}, kInt64, false})), "/Net").bytes_own, 48);
}

// Check that sizes a file declares (in dims of external data) past INT64_MAX saturate there, in own and total
// counts alike, instead of overflowing (a fuzz finding: the sum into /Net overflowed).
TEST_F(TreeTest, DeclaredSizesPastInt64MaxSaturate) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.initializers.push_back({"a", {kMax / 2, 3}, kFloat, false, ExternalData{"a.bin", 0, 0}});
  model.graph.initializers.push_back({"b", {kMax}, kFloat, false, ExternalData{"b.bin", 0, 0}});
  model.graph.Add(Node("n", "Add").In({"x", "a"}).Out({"h"}).Tag("/Net"));
  model.graph.Add(Node("m", "Add").In({"h", "b"}).Out({"y"}).Tag("/Net/B"));
  model.graph.outputs = {"y"};
  model.Module("/Net", "", "test.Net");
  model.Module("/Net/B", "b", "test.B");
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net").params_own, kMax);
  EXPECT_EQ(Get(modules, "/Net/B").params_own, kMax);
  EXPECT_EQ(Get(modules, "/Net").params_total, kMax);
  EXPECT_EQ(Get(modules, "/Net").bytes_total, kMax);
}

// Check that a scalar initializer (no dims) is one element.
TEST_F(TreeTest, ScalarInitializerIsOneElement) {
  std::vector<JsonModule> modules = TreeJson(OneInitializerModel({"w", {}, kFloat, false}));
  EXPECT_EQ(Get(modules, "/Net").params_own, 1);
  EXPECT_EQ(Get(modules, "/Net").bytes_own, 4);
}

// A chain of `depth` modules below /Net, each one's tag its parent's plus "/B", each
// with one Add reading its own 1-element weight; "shared" is read by level 1 and the deepest.
ModelSpec ChainModel(int depth) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.Initializer("shared", {1});
  std::string tag = "/Net", value = "x";
  model.Module(tag, "", "test.Net");
  auto named = [](const char* prefix, int level) { return std::string(prefix).append(std::to_string(level)); };
  for (int level = 0; level <= depth; ++level) {
    if (level > 0) {
      tag += "/B";
      model.Module(tag, named("b", level), "test.B");
    }
    std::string weight = named("w", level), out = named("v", level);
    model.graph.Initializer(weight, {1});
    model.graph.Add(Node(named("n", level), "Add").In({value, weight}).Out({out}).Tag(tag));
    value = out;
  }
  model.graph.Add(Node("first", "Mul").In({"x", "shared"}).Out({"f"}).Tag("/Net/B"));
  model.graph.Add(Node("last", "Mul").In({value, "shared"}).Out({"y"}).Tag(tag));
  model.graph.outputs = {"f", "y"};
  return model;
}

// Check that a tree 3,000 levels deep (tags of 6,000 characters) is counted and
// printed whole: depths, totals summed up the chain, a weight shared by level 1
// and the deepest owned by level 1, every module in text, JSON and CSV. (The
// counts used to walk every node's ancestors, copying their tags, and the
// printers to recurse once per level.)
TEST_F(TreeTest, DeepChainIsCountedAndPrintedWhole) {
  constexpr int kDepth = 3000;
  std::string path = WriteModel(ChainModel(kDepth));
  std::vector<JsonModule> modules = TreeJson(ChainModel(kDepth));
  ASSERT_EQ(modules.size(), size_t{kDepth + 1});
  for (int level = 0; level <= kDepth; ++level) {
    const JsonModule& module = modules[level];
    ASSERT_EQ(module.depth, level) << module.tag.size();
    ASSERT_EQ(module.tag.size(), size_t(4 + 2 * level));
    EXPECT_EQ(module.nodes_own, level == 1 || level == kDepth ? 2 : 1) << level;
    EXPECT_EQ(module.nodes_total, kDepth + 1 - level + (level <= 1 ? 2 : 1)) << level;
    EXPECT_EQ(module.params_own, level == 1 ? 2 : 1) << level;
    EXPECT_EQ(module.params_total, kDepth + 1 - level + (level <= 1 ? 1 : 0)) << level;
  }
  RunResult text = Tree(path);
  EXPECT_EQ(text.code, 0);
  EXPECT_EQ(std::count(text.out.begin(), text.out.end(), '\n'), 3 * (kDepth + 1)) << text.err;
  RunResult csv = TreeCsv(path);
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), kDepth + 2);
}

// Check that --depth 1 shows the root and its children only, with totals unchanged.
TEST_F(TreeTest, DepthOneHidesDeeperModules) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel(), 1);
  EXPECT_EQ(Tags(modules), (std::vector<std::string>{"/Net", "/Net/Layer.0", "/Net/Layer.1"}));
  EXPECT_EQ(Get(modules, "/Net/Layer.0").nodes_total, 4);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").params_total, 31);
  std::string path = WriteModel(LayeredModel());
  RunResult result = Tree(path, /*json=*/false, 1);
  EXPECT_EQ(result.code, 0);
  EXPECT_EQ(result.out.find("Attn"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("  Layer.1  test.Block  layers.1\n"), std::string::npos) << result.out;
}

// Check that without a depth limit (or a limit deep enough) every module is shown.
TEST_F(TreeTest, NoDepthLimitShowsAllModules) {
  std::vector<std::string> all{"/Net", "/Net/Layer.0", "/Net/Layer.0/Attn", "/Net/Layer.1"};
  EXPECT_EQ(Tags(TreeJson(LayeredModel())), all);
  EXPECT_EQ(Tags(TreeJson(LayeredModel(), 2)), all);
}

// Check that --depth 0 shows the root only.
TEST_F(TreeTest, DepthZeroShowsRootOnly) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel(), 0);
  EXPECT_EQ(Tags(modules), (std::vector<std::string>{"/Net"}));
  EXPECT_EQ(Get(modules, "/Net").nodes_total, 7);
}

// Check that --json gives every module's tag, path, class, depth and counts.
TEST_F(TreeTest, JsonHasEveryField) {
  std::vector<JsonModule> modules = TreeJson(LayeredModel());
  ASSERT_EQ(modules.size(), 4u);
  const JsonModule& attn = Get(modules, "/Net/Layer.0/Attn");
  EXPECT_EQ(attn.path, "layers.0.attn");
  EXPECT_EQ(attn.class_name, "test.Attention");
  EXPECT_EQ(attn.depth, 2);
  EXPECT_EQ(attn.nodes_own, 1);
  EXPECT_EQ(attn.nodes_total, 1);
  EXPECT_EQ(attn.params_own, 16);
  EXPECT_EQ(attn.params_total, 16);
  EXPECT_EQ(attn.bytes_own, 64);
  EXPECT_EQ(attn.bytes_total, 64);
  EXPECT_EQ(attn.ops, (std::map<std::string, double>{{"MatMul", 1}}));
  EXPECT_EQ(Get(modules, "/Net").path, "");
  EXPECT_EQ(Get(modules, "/Net").depth, 0);
}

// Check that children are listed in the order their modules run, not in tag order.
TEST_F(TreeTest, ChildrenFollowGraphOrder) {
  ModelSpec model = SeqModel();
  model.graph.Add(Node("e0", "MatMul").In({"x", "we"}).Out({"e"}).Tag("/Seq/Encoder"))
      .Add(Node("d0", "MatMul").In({"e", "wd"}).Out({"y"}).Tag("/Seq/Decoder"));
  EXPECT_EQ(Tags(TreeJson(model)), (std::vector<std::string>{"/Seq", "/Seq/Encoder", "/Seq/Decoder"}));
  model.graph.nodes = {Node("d0", "MatMul").In({"x", "wd"}).Out({"d"}).Tag("/Seq/Decoder"),
                       Node("e0", "MatMul").In({"d", "we"}).Out({"y"}).Tag("/Seq/Encoder")};
  EXPECT_EQ(Tags(TreeJson(model)), (std::vector<std::string>{"/Seq", "/Seq/Decoder", "/Seq/Encoder"}));
}

// Check that an initializer-only Identity or a Constant placed at the top does not move its module first.
TEST_F(TreeTest, InitializerIdentityAtTopDoesNotMoveModuleFirst) {
  ModelSpec model = SeqModel();
  model.graph.Add(Node("d_id", "Identity").In({"wd"}).Out({"wd_copy"}).Tag("/Seq/Decoder"))
      .Add(Node("d_const", "Constant").Out({"c"}).Tag("/Seq/Decoder"))
      .Add(Node("e0", "MatMul").In({"x", "we"}).Out({"e"}).Tag("/Seq/Encoder"))
      .Add(Node("d0", "MatMul").In({"e", "wd_copy"}).Out({"d"}).Tag("/Seq/Decoder"))
      .Add(Node("d1", "Add").In({"d", "c"}).Out({"y"}).Tag("/Seq/Decoder"));
  EXPECT_EQ(Tags(TreeJson(model)), (std::vector<std::string>{"/Seq", "/Seq/Encoder", "/Seq/Decoder"}));
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 8u) << result.out;  // the root has no own nodes: no ops line
  EXPECT_EQ(lines[2], "  Encoder  test.Encoder  encoder");
  EXPECT_EQ(lines[5], "  Decoder  test.Decoder  decoder");
}

// Check that nodes of a Loop body count for their tags, and an outer initializer read there for its reader.
TEST_F(TreeTest, LoopBodyNodesAndTheirInitializersCount) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Initializer("wl", {5});
  GraphSpec body;
  body.Add(Node("body_mul", "Mul").In({"xi", "wl"}).Out({"m"}).Tag("/Net/Body"))
      .Add(Node("body_relu", "Relu").In({"m"}).Out({"o"}).Tag("/Net/Body"));
  model.graph.Add(Node("loop", "Loop").In({"", "", "x"}).Out({"y"}).Tag("/Net").Body(body));
  model.Module("/Net", "", "test.Net").Module("/Net/Body", "body", "test.Body");
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net").nodes_own, 1);
  EXPECT_EQ(Get(modules, "/Net").nodes_total, 3);
  EXPECT_EQ(Get(modules, "/Net/Body").nodes_own, 2);
  EXPECT_EQ(Get(modules, "/Net/Body").params_own, 5);
  EXPECT_EQ(Get(modules, "/Net/Body").bytes_own, 20);
  EXPECT_EQ(Get(modules, "/Net").params_own, 0);
  EXPECT_EQ(Get(modules, "/Net").params_total, 5);
}

// Check that an outer initializer read both in a Loop body and by the Loop node counts for their common ancestor.
TEST_F(TreeTest, InitializerReadInsideAndOutsideLoopBodyCountsForAncestor) {
  ModelSpec model;
  model.graph.inputs = {"x"};
  model.graph.outputs = {"y"};
  model.graph.Initializer("wl", {5});
  GraphSpec body;
  body.Add(Node("body_mul", "Mul").In({"xi", "wl"}).Out({"m"}).Tag("/Net/Body"));
  model.graph.Add(Node("loop", "Loop").In({"", "", "wl"}).Out({"y"}).Tag("/Net").Body(body));
  model.Module("/Net", "", "test.Net").Module("/Net/Body", "body", "test.Body");
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net").params_own, 5);
  EXPECT_EQ(Get(modules, "/Net/Body").params_own, 0);
  EXPECT_EQ(Get(modules, "/Net/Body").params_total, 0);
}

// Check that a table with one root gives a tree.
TEST_F(TreeTest, OneRootIsATree) {
  ModelSpec model;
  model.graph.Add(Node("a", "Relu").In({"x"}).Out({"y"}).Tag("/Net"));
  model.Module("/Net", "", "test.Net");
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out,
            "Net  test.Net  (root)\n    nodes 1 own / 1 total;  params 0 own / 0 total (0 B)\n    ops Relu 1\n");
}

// Check that a table with two root tags is bad input: one line on err, exit 2.
TEST_F(TreeTest, TwoRootsAreBadInput) {
  ModelSpec model;
  model.graph.Add(Node("a", "Relu").In({"x"}).Out({"y"}).Tag("/Net"))
      .Add(Node("b", "Relu").In({"y"}).Out({"z"}).Tag("/Other"));
  model.Module("/Net", "", "test.Net").Module("/Other", "", "test.Other");
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(result.err, path + ": the module table has 2 root tags, not one\n");
}

// Check that a module called by a module that does not own it is shown under its caller, with its own path.
TEST_F(TreeTest, CalleeIsShownUnderItsCaller) {
  std::string path = WriteModel(CallTreeModel());
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out,
            "Net  test.Net  (root)\n"
            "    nodes 1 own / 3 total;  params 0 own / 16 total (64 B)\n"
            "    ops Add 1\n"
            "  Layer.0  test.EncoderLayer  layers.0\n"
            "      nodes 0 own / 2 total;  params 0 own / 16 total (64 B)\n"
            "    Sublayer.0  test.SublayerConnection  layers.0.sublayer.0\n"
            "        nodes 1 own / 2 total;  params 0 own / 16 total (64 B)\n"
            "        ops Add 1\n"
            "      Attn  test.Attention  layers.0.attn\n"
            "          nodes 1 own / 1 total;  params 16 own / 16 total (64 B)\n"
            "          ops MatMul 1\n");
}

// Check that a module with no node whose computation was folded is shown with 0 nodes and its initializers.
TEST_F(TreeTest, FoldedModuleWithoutNodesIsShown) {
  ModelSpec model = LayeredModel();
  model.Module("/Net/Layer.1/Norm", "layers.1.norm", "test.Norm");
  model.FindModule("/Net/Layer.1/Norm").FoldedInto({"w1", "scale"});
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_NE(result.out.find("      ops MatMul 1, Mul 1\n"
                            "    Norm  test.Norm  layers.1.norm\n"
                            "        nodes 0 own / 0 total;  params 0 own / 0 total (0 B)\n"
                            "        folded into w1, scale\n"),
            std::string::npos)
      << result.out;
  std::vector<JsonModule> modules = TreeJson(model);
  const JsonModule& norm = Get(modules, "/Net/Layer.1/Norm");
  EXPECT_EQ(norm.nodes_total, 0);
  EXPECT_EQ(norm.folded_into, (std::vector<std::string>{"w1", "scale"}));
}

// Check that a module folded into nothing prints no "folded into" line and an empty list.
TEST_F(TreeTest, UnfoldedModuleHasNoFoldedLine) {
  std::string path = WriteModel(LayeredModel());
  EXPECT_EQ(Tree(path).out.find("folded into"), std::string::npos);
  EXPECT_TRUE(Get(TreeJson(LayeredModel()), "/Net/Layer.1").folded_into.empty());
}

// Check that a container whose forward never ran says so on its nodes line.
TEST_F(TreeTest, ContainerThatNeverRanIsShown) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Field("ran", "false");
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_NE(result.out.find(";  never ran (its caller reached past it)\n"), std::string::npos) << result.out;
  EXPECT_EQ(Tree(WriteModel(LayeredModel())).out.find("never ran"), std::string::npos);
}

// Check that a module of several calls shows their number on its nodes line.
TEST_F(TreeTest, SeveralCallsAreShown) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Calls({0, 2});
  std::string path = WriteModel(model);
  std::vector<std::string> lines = Lines(Tree(path).out);
  ASSERT_EQ(lines.size(), 12u);
  EXPECT_EQ(lines[9], "  Layer.1  test.Block  layers.1");
  EXPECT_EQ(lines[10], "      nodes 2 own / 2 total;  params 24 own / 24 total (96 B);  calls 2");
  EXPECT_EQ(Get(TreeJson(model), "/Net/Layer.1").calls, 2);
}

// Check that a module of one call (absent "calls", or one element) shows no calls.
TEST_F(TreeTest, OneCallIsNotShown) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.1").Calls({3});
  std::string path = WriteModel(model);
  EXPECT_EQ(Tree(path).out.find("calls"), std::string::npos);
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net/Layer.1").calls, 1);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").calls, 1);
}

// Check that each module a rewrite lists shows it with the other modules and the pass; the others do not.
TEST_F(TreeTest, RewriteIsShownForEachModuleItLists) {
  ModelSpec model = LayeredModel();
  model.Rewrite("_jit_pass_onnx_peephole", "removed", {"/Net/Layer.0", "/Net/Layer.1"});
  std::string path = WriteModel(model);
  RunResult result = Tree(path);
  EXPECT_EQ(result.code, 0) << result.err;
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 14u) << result.out;
  EXPECT_EQ(lines[6], "      rewritten: removed with /Net/Layer.1 by _jit_pass_onnx_peephole");
  EXPECT_EQ(lines[7], "    Attn  test.Attention  layers.0.attn");
  EXPECT_EQ(lines[13], "      rewritten: removed with /Net/Layer.0 by _jit_pass_onnx_peephole");
  std::vector<JsonModule> modules = TreeJson(model);
  EXPECT_EQ(Get(modules, "/Net/Layer.0").rewrites,
            std::vector<std::string>{"removed with /Net/Layer.1 by _jit_pass_onnx_peephole in ''"});
  EXPECT_TRUE(Get(modules, "/Net/Layer.0/Attn").rewrites.empty());
  EXPECT_TRUE(Get(modules, "/Net").rewrites.empty());
}

// Check that a node's spans count as a fused rewrite once, whether or not hiertag.rewrites names the node too.
TEST_F(TreeTest, SpansAreOneFusedRewrite) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").Spans({"/Net/Layer.0/Attn", "/Net/Layer.0"}, "_jit_pass_onnx_eval_peephole");
  std::vector<std::string> expected{"fused with /Net/Layer.0 by _jit_pass_onnx_eval_peephole in 'n1'"};
  EXPECT_EQ(Get(TreeJson(model), "/Net/Layer.0/Attn").rewrites, expected);
  model.Rewrite("_jit_pass_onnx_eval_peephole", "fused", {"/Net/Layer.0/Attn", "/Net/Layer.0"}, "n1");
  EXPECT_EQ(Get(TreeJson(model), "/Net/Layer.0/Attn").rewrites, expected);
  std::string path = WriteModel(model);
  EXPECT_NE(Tree(path).out.find("        rewritten: fused with /Net/Layer.0 by _jit_pass_onnx_eval_peephole\n"),
            std::string::npos);
}

constexpr const char* kCsvHeader =
    "tag,class,path,depth,nodes_own,nodes_total,params_own,params_total,bytes_own,bytes_total,calls,ran";

// Check that --csv gives the header and one row per module in pre-order, with the counts of --json.
TEST_F(TreeTest, CsvHasOneRowPerModuleInPreOrder) {
  std::string path = WriteModel(LayeredModel());
  RunResult result = TreeCsv(path);
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  EXPECT_EQ(result.out, std::string(kCsvHeader) + "\n" +
                            "/Net,test.Net,,0,1,7,2,57,16,236,1,true\n"
                            "/Net/Layer.0,test.Block,layers.0,1,3,4,15,31,60,124,1,true\n"
                            "/Net/Layer.0/Attn,test.Attention,layers.0.attn,2,1,1,16,16,64,64,1,true\n"
                            "/Net/Layer.1,test.Block,layers.1,1,2,2,24,24,96,96,1,true\n");
}

// Check that --csv leaves out the modules below --depth, as the text and JSON trees do.
TEST_F(TreeTest, CsvRespectsDepth) {
  std::string path = WriteModel(LayeredModel());
  std::vector<std::string> lines = Lines(TreeCsv(path, 1).out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[1].substr(0, 5), "/Net,");
  EXPECT_EQ(lines[2].substr(0, 13), "/Net/Layer.0,");
  EXPECT_EQ(lines[3].substr(0, 13), "/Net/Layer.1,");
  EXPECT_EQ(Lines(TreeCsv(path, 0).out),
            (std::vector<std::string>{kCsvHeader, "/Net,test.Net,,0,1,7,2,57,16,236,1,true"}));
}

// Check that a tag, class or path holding commas or quotes is quoted, its quotes doubled; plain fields are not.
TEST_F(TreeTest, CsvQuotesCommasAndQuotes) {
  ModelSpec model;
  model.graph.Add(Node("a", "Relu").In({"x"}).Out({"y"}).Tag("/Net"))
      .Add(Node("b", "Relu").In({"y"}).Out({"z"}).Tag("/Net/Odd,Name[a\"b]"));
  model.Module("/Net", "", "test.Net").Module("/Net/Odd,Name[a\"b]", "a\"b", "test.Odd,Name");
  std::string path = WriteModel(model);
  RunResult result = TreeCsv(path);
  EXPECT_EQ(result.code, 0) << result.err;
  std::vector<std::string> lines = Lines(result.out);
  ASSERT_EQ(lines.size(), 3u) << result.out;
  EXPECT_EQ(lines[1], "/Net,test.Net,,0,1,2,0,0,0,0,1,true");
  EXPECT_EQ(lines[2], "\"/Net/Odd,Name[a\"\"b]\",\"test.Odd,Name\",\"a\"\"b\",1,1,1,0,0,0,0,1,true");
}

// Check that --csv gives a module's call count and false for a container that never ran.
TEST_F(TreeTest, CsvHasCallsAndRan) {
  ModelSpec model = LayeredModel();
  model.FindModule("/Net/Layer.0").Calls({0, 1});
  model.FindModule("/Net/Layer.1").Field("ran", "false");
  std::string path = WriteModel(model);
  std::vector<std::string> lines = Lines(TreeCsv(path).out);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[2], "/Net/Layer.0,test.Block,layers.0,1,3,4,15,31,60,124,2,true");
  EXPECT_EQ(lines[4], "/Net/Layer.1,test.Block,layers.1,1,2,2,24,24,96,96,1,false");
}

// Check that --csv on an untagged file is bad input like the other forms: one line on err, exit 2, nothing on out.
// Check that the text output shows one line per module, control characters in paths, classes and
// tags escaped, and that a tag holding one raw (a file written before) shows as extract takes it.
TEST_F(TreeTest, TextEscapesControlCharactersOneModuleALine) {
  for (const std::string tag : {std::string(kHostileTag), std::string("/Net/Expert[line\nbreak]")}) {
    RunResult result = Tree(WriteModel(HostileNameModel(tag)));
    EXPECT_EQ(result.code, 0) << result.err;
    EXPECT_EQ(result.out,
              "Net  test.Net  (root)\n"
              "    nodes 1 own / 2 total;  params 0 own / 0 total (0 B)\n"
              "    ops Relu 1\n"
              "  Expert[line%0Abreak]  test.esc\\x1b[1m  line\\nbreak\n"
              "      nodes 1 own / 1 total;  params 0 own / 0 total (0 B)\n"
              "      ops Neg 1\n");
  }
}

// Check that JSON and CSV carry the exact names, escaped only by their own quoting.
TEST_F(TreeTest, JsonAndCsvCarryTheExactNames) {
  std::vector<JsonModule> modules = TreeJson(HostileNameModel());
  ASSERT_EQ(modules.size(), 2u);
  EXPECT_EQ(modules[1].tag, kHostileTag);
  EXPECT_EQ(modules[1].path, "line\nbreak");
  EXPECT_EQ(modules[1].class_name, "test.esc\x1b[1m");
  RunResult csv = TreeCsv(WriteModel(HostileNameModel()));
  EXPECT_EQ(csv.code, 0) << csv.err;
  EXPECT_NE(csv.out.find("\n/Net/Expert[line%0Abreak],test.esc\x1b[1m,\"line\nbreak\",1,1,1,"), std::string::npos)
      << csv.out;
}

TEST_F(TreeTest, CsvOfUntaggedFileIsBadInput) {
  ModelSpec model = LayeredModel();
  model.tagged = false;
  std::string path = WriteModel(model);
  RunResult result = TreeCsv(path);
  EXPECT_EQ(result.code, 2);
  EXPECT_EQ(result.out, "");
  EXPECT_EQ(Lines(result.err).size(), 1u) << result.err;
}

}  // namespace
}  // namespace hiertag::tooltest
