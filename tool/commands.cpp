// The tool's commands: open the file, run one operation of
// core/file/file_commands.h, print its result (text, or the JSON object).
#include <optional>
#include <ostream>
#include <string>

#include "hiertag/core/format/printable.h"
#include "hiertag/tool/tool_commands.h"

namespace hiertag {
namespace {

// Opens `path`, or prints why not and returns std::nullopt.
std::optional<TaggedFile> Open(const std::string& path, std::ostream& err) {
  std::string error;
  std::optional<TaggedFile> file = LoadTaggedFile(path, &error);
  if (!file) err << Printable(error) << "\n";
  return file;
}

}  // namespace

int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err) {
  std::optional<TaggedFile> file = Open(path, err);
  return file ? RunValidate(*file, path, json, out, err) : 2;
}

int RunValidate(const TaggedFile& file, const std::string& path, bool json, std::ostream& out, std::ostream&) {
  std::vector<ValidationProblem> problems = Validate(file);
  if (json) {
    out << WriteJson(ValidationJson(file, path, problems)) << "\n";
    return problems.empty() ? 0 : 1;
  }
  // Tags, paths and node names hold what Python allows: each problem is one
  // line through Printable (--json carries the exact text).
  for (const ValidationProblem& problem : problems) {
    out << Printable(path + ": " + (problem.node ? "node " + DescribeNode(*problem.node) : problem.subject) + ": " +
                     problem.text)
        << "\n";
  }
  size_t nodes = file.model.nodes.size();
  size_t modules = file.table.size();
  if (problems.empty()) {
    out << Printable(path) << ": valid: " << nodes << " nodes tagged, " << modules << " modules\n";
  } else {
    out << Printable(path) << ": invalid: " << problems.size() << " problems (" << nodes << " nodes, " << modules
        << " modules)\n";
  }
  return problems.empty() ? 0 : 1;
}

int RunTree(const std::string& path, TreeFormat format, int depth, std::ostream& out, std::ostream& err) {
  std::optional<TaggedFile> file = Open(path, err);
  if (!file) return 2;
  std::string error;
  if (PrintTree(*file, path, format, depth, out, &error)) return 0;
  err << Printable(error) << "\n";
  return 2;
}

int RunExtract(const std::string& path, const std::string& tag, const ExtractOptions& options, bool json,
               std::ostream& out, std::ostream& err) {
  std::optional<TaggedFile> file = Open(path, err);
  return file ? RunExtract(*file, path, tag, options, json, out, err) : 2;
}

// Names come from Python and from the command line: every line goes out
// through Printable, so it stays one line.
int RunExtract(const TaggedFile& file, const std::string& path, const std::string& tag, const ExtractOptions& options,
               bool json, std::ostream& out, std::ostream& err) {
  ExtractError error;
  std::optional<Json> result = Extract(file, path, tag, options, &error);
  if (!result) {
    err << Printable(error.line) << "\n";
    return 2;
  }
  if (json) {
    out << WriteJson(*result) << "\n";
  } else {
    out << Printable(ExtractSummary(*result)) << "\n";
  }
  return 0;
}

}  // namespace hiertag
