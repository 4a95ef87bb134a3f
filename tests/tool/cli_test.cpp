// Tests of the tool's command line (RunTool): usage, options, dispatch, usage errors.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tool_test_support.h"

namespace hiertag::tooltest {
namespace {

class CliTest : public ToolTest {
 protected:
  // Runs the tool with `args` and checks a usage error: exit 2, nothing on out,
  // one line on err holding `message_part`.
  static void ExpectUsageError(const std::vector<std::string>& args, const std::string& message_part) {
    RunResult result = Tool(args);
    EXPECT_EQ(result.code, 2) << result.out << result.err;
    EXPECT_EQ(result.out, "");
    ASSERT_EQ(Lines(result.err).size(), 1u) << result.err;
    EXPECT_EQ(result.err.back(), '\n');
    EXPECT_NE(result.err.find(message_part), std::string::npos) << result.err;
    // A command's line names it, as the Python verbs' do; one unknown says "hiertag:".
    bool known = args.size() > 0 && (args[0] == "validate" || args[0] == "tree" || args[0] == "extract");
    EXPECT_EQ(result.err.rfind(known ? "hiertag " + args[0] + ": " : std::string("hiertag: "), 0), 0u) << result.err;
  }

  // Runs the tool with `args` and checks that it printed usage starting with `first_line` on out.
  static void ExpectUsage(const std::vector<std::string>& args, const std::string& first_line) {
    RunResult result = Tool(args);
    EXPECT_EQ(result.code, 0) << result.err;
    EXPECT_EQ(result.err, "");
    std::vector<std::string> lines = Lines(result.out);
    ASSERT_GT(lines.size(), 1u) << result.out;
    EXPECT_EQ(lines[0], first_line);
  }
};

// Check that --help (and -h) for the tool prints the tool's usage, naming both commands.
TEST_F(CliTest, ToolHelpPrintsUsage) {
  ExpectUsage({"--help"}, "usage: hiertag COMMAND MODEL.onnx [options]");
  ExpectUsage({"-h"}, "usage: hiertag COMMAND MODEL.onnx [options]");
  RunResult result = Tool({"--help"});
  EXPECT_NE(result.out.find("validate MODEL.onnx"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("tree MODEL.onnx"), std::string::npos) << result.out;
}

// Check that no command at all is a usage error.
TEST_F(CliTest, NoCommandIsUsageError) { ExpectUsageError({}, "no command"); }

// Check that validate --help prints validate's usage, even with a model and options around it.
TEST_F(CliTest, ValidateHelpPrintsUsage) {
  ExpectUsage({"validate", "--help"}, "usage: hiertag validate MODEL.onnx [--json]");
  ExpectUsage({"validate", "missing.onnx", "--json", "--help"}, "usage: hiertag validate MODEL.onnx [--json]");
}

// Check that tree --help prints tree's usage, even with a model and options around it.
TEST_F(CliTest, TreeHelpPrintsUsage) {
  ExpectUsage({"tree", "--help"}, "usage: hiertag tree MODEL.onnx [--json | --csv] [--depth N]");
  ExpectUsage({"tree", "missing.onnx", "--depth", "1", "-h"},
              "usage: hiertag tree MODEL.onnx [--json | --csv] [--depth N]");
}

// Check that a known command with a model runs it.
TEST_F(CliTest, KnownCommandRuns) {
  std::string path = WriteModel(LayeredModel());
  RunResult result = Tool({"validate", path});
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.out, path + ": valid: 7 nodes tagged, 4 modules\n");
  EXPECT_EQ(result.err, "");
}

// Check that an unknown command is a usage error naming it.
TEST_F(CliTest, UnknownCommandIsUsageError) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"check", path}, "unknown command 'check'");
}

// Check that the tool's options reach the commands: validate --json and tree --json --depth N.
TEST_F(CliTest, KnownOptionsReachCommands) {
  std::string path = WriteModel(LayeredModel());
  RunResult validate = Tool({"validate", path, "--json"});
  RunResult direct_validate = Validate(path, /*json=*/true);
  EXPECT_EQ(validate.code, 0);
  EXPECT_EQ(validate.out, direct_validate.out);
  RunResult tree = Tool({"tree", "--json", "--depth", "1", path});
  RunResult direct_tree = Tree(path, /*json=*/true, 1);
  EXPECT_EQ(tree.code, 0) << tree.err;
  EXPECT_EQ(tree.out, direct_tree.out);
  EXPECT_EQ(tree.err, "");
  RunResult text_tree = Tool({"tree", path});
  EXPECT_EQ(text_tree.out, Tree(path).out);
}

// Check that an unknown option is a usage error naming it.
TEST_F(CliTest, UnknownOptionIsUsageError) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"validate", path, "--verbose"}, "unknown option '--verbose'");
  ExpectUsageError({"tree", path, "-v"}, "unknown option '-v'");
}

// Check that a usage error quoting an argument with control characters stays one line, escaped.
TEST_F(CliTest, UsageErrorEscapesControlCharacters) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"tree", path, "--x\n\x1b[2J"}, "unknown option '--x\\n\\x1b[2J'");
}

// Check that --depth, an option of tree only, is a usage error for validate.
TEST_F(CliTest, DepthIsUnknownToValidate) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"validate", path, "--depth", "1"}, "unknown option '--depth'");
}

// Check that a command without a model is a usage error.
TEST_F(CliTest, MissingModelIsUsageError) {
  ExpectUsageError({"validate"}, "needs MODEL.onnx");
  ExpectUsageError({"tree", "--json"}, "needs MODEL.onnx");
}

// Check that two models are a usage error naming both.
TEST_F(CliTest, TwoModelsAreUsageError) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"validate", path, path + ".2"}, "more than one model");
  ExpectUsageError({"tree", path, "--json", "other.onnx"}, "'other.onnx'");
}

// Check that --depth takes whole numbers from 0 up.
TEST_F(CliTest, DepthTakesWholeNumber) {
  std::string path = WriteModel(LayeredModel());
  for (const char* depth : {"0", "1", "10"}) {
    RunResult result = Tool({"tree", path, "--depth", depth});
    EXPECT_EQ(result.code, 0) << depth << ": " << result.err;
    EXPECT_EQ(result.out, Tree(path, /*json=*/false, std::stoi(depth)).out) << depth;
  }
}

// Check that --depth without a number, with a negative or a non-number is a usage error.
TEST_F(CliTest, DepthWithoutWholeNumberIsUsageError) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"tree", path, "--depth"}, "--depth");
  ExpectUsageError({"tree", path, "--depth", "-1"}, "'-1'");
  ExpectUsageError({"tree", path, "--depth", "two"}, "'two'");
  ExpectUsageError({"tree", path, "--depth", "1x"}, "'1x'");
  ExpectUsageError({"tree", path, "--depth", ""}, "--depth");
  ExpectUsageError({"tree", path, "--depth", "99999999999999999999"}, "--depth");
}

// Check that bad input reached through the command line keeps exit 2 and one line on err.
TEST_F(CliTest, BadInputThroughCommandLine) {
  std::string missing = (dir_ / "missing.onnx").string();
  for (const char* command : {"validate", "tree"}) {
    RunResult result = Tool({command, missing});
    EXPECT_EQ(result.code, 2) << command;
    EXPECT_EQ(result.out, "") << command;
    EXPECT_EQ(Lines(result.err).size(), 1u) << command << ": " << result.err;
    EXPECT_EQ(result.err,
              "hiertag " + std::string(command) + ": " + missing + ": cannot open the file (missing or unreadable)\n");
  }
}

// Check that validate's problems reach the command line's exit status 1.
TEST_F(CliTest, InvalidModelExitsOne) {
  ModelSpec model = LayeredModel();
  model.graph.Find("n1").metadata.clear();
  std::string path = WriteModel(model);
  RunResult result = Tool({"validate", path});
  EXPECT_EQ(result.code, 1);
  EXPECT_NE(result.out.find(path + ": node 'n1' (Relu): has no hierarchy_tag\n"), std::string::npos) << result.out;
}

// Check that tree --csv (with --depth) reaches the command and prints what RunTree prints as CSV.
TEST_F(CliTest, CsvReachesTree) {
  std::string path = WriteModel(LayeredModel());
  RunResult result = Tool({"tree", path, "--csv", "--depth", "1"});
  EXPECT_EQ(result.code, 0) << result.err;
  EXPECT_EQ(result.err, "");
  std::ostringstream out, err;
  EXPECT_EQ(RunTree(path, TreeFormat::kCsv, 1, out, err), 0);
  EXPECT_EQ(result.out, out.str());
  EXPECT_EQ(Lines(result.out).size(), 4u) << result.out;  // the header, the root and its two children
}

// Check that --csv together with --json is a usage error, in either order.
TEST_F(CliTest, CsvWithJsonIsUsageError) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"tree", path, "--csv", "--json"}, "--json or --csv, not both");
  ExpectUsageError({"tree", "--json", path, "--csv"}, "--json or --csv, not both");
}

// Check that --csv, an option of tree only, is a usage error for validate and extract.
TEST_F(CliTest, CsvIsUnknownToValidateAndExtract) {
  std::string path = WriteModel(LayeredModel());
  ExpectUsageError({"validate", path, "--csv"}, "unknown option '--csv'");
  ExpectUsageError({"extract", path, "--module", "/Net", "--csv"}, "unknown option '--csv'");
}

}  // namespace
}  // namespace hiertag::tooltest
