// The hiertag command-line tool's commands, as a library the tests link: each
// opens one ONNX file, runs one operation of core/file/file_commands.h over it,
// writes its report to `out` and one-line errors to `err`, and returns the
// process exit code:
//   0  the command succeeded (validate: the file is valid)
//   1  validate: the file has problems, one line each (`<file>: node '<name>' (<op>): ...`)
//   2  bad input or usage: missing, unreadable, truncated, non-ONNX or untagged
//      file, unknown option or module, a module extract cannot cut out; one
//      line, nothing else
#pragma once

#include <iosfwd>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "hiertag/core/file/file_commands.h"

namespace hiertag {

// `hiertag validate MODEL.onnx [--json]`: Validate, one line per problem and a
// summary line, or the JSON object.
int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err);
int RunValidate(const TaggedFile& file, const std::string& path, bool json, std::ostream& out, std::ostream& err);

// `hiertag tree MODEL.onnx [--json | --csv] [--depth N]`: PrintTree.
int RunTree(const std::string& path, TreeFormat format, int depth, std::ostream& out, std::ostream& err);

// `hiertag extract MODEL.onnx --module TAG [--call K] [-o OUT.onnx] [--external-data MODE]
// [--value-types TYPES.onnx] [--json]`: Extract, its summary line or the JSON object.
int RunExtract(const std::string& path, const std::string& tag, const ExtractOptions& options, bool json,
               std::ostream& out, std::ostream& err);
int RunExtract(const TaggedFile& file, const std::string& path, const std::string& tag, const ExtractOptions& options,
               bool json, std::ostream& out, std::ostream& err);

// One command of the tool, declared once: `hiertag --help` lists its arguments
// and summary, `hiertag NAME --help` prints "usage: hiertag NAME ARGUMENTS" and
// the details, and the Python `hiertag` command's table reads its name and
// summary (hiertag._core.tool_commands).
struct ToolCommand {
  std::string_view name;
  std::string_view arguments;  // as the usage line shows them
  std::string_view summary;    // one line, lower case, no full stop
  std::string_view details;    // the rest of its --help: what it does, each option, its exit status
};

// validate, tree and extract, in that order.
std::span<const ToolCommand> ToolCommands();

// Parses the command line (argv without the program name) and runs a command;
// `--help` anywhere prints the usage of the command (or of the tool). Extract's
// values the file does not type come from `infer_types` (the native tool's:
// ONNX shape inference where its build has it).
int RunTool(const std::vector<std::string>& args, const InferTypes& infer_types, std::ostream& out, std::ostream& err);

}  // namespace hiertag
