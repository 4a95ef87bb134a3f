// The hiertag command-line tool's commands, as a library the tests link.
//
// Each command reads one ONNX file, writes its report to `out` and one-line
// errors to `err`, and returns the process exit code:
//   0  the command succeeded (validate: the file is valid)
//   1  validate: the file has problems, one line each (`<file>: node '<name>' (<op>): ...`)
//   2  bad input or usage: missing, unreadable, truncated, non-ONNX or untagged
//      file, unknown option or module, a module extract cannot cut out; one
//      line, nothing else
#pragma once

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace hiertag {

// `hiertag validate MODEL.onnx [--json]`: every node (nested graphs included)
// has a tag that parses under the grammar and is in the module table; every
// table entry's ancestors are in the table; no tag is listed twice; a qualifier
// names the entry's path. No two tags under one parent name the same path (in
// files of format 1, the module tree: every entry names one module path, which
// lies under its parent's); "calls", "parent_calls" and
// "folded_into" are well-formed and consistent; hiertag.call is below its tag's
// call count; hiertag.spans lists tags under the node's tag, with
// hiertag.rewrite; hiertag.rewrites holds well-formed records of listed tags.
int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err);

// How `hiertag tree` prints the tree: indented text, one JSON object, or CSV
// (one row per module under the header
// `tag,class,path,depth,nodes_own,nodes_total,params_own,params_total,bytes_own,bytes_total,calls,ran`,
// fields quoted as RFC 4180 asks: tags and paths may hold commas and quotes).
enum class TreeFormat { kText, kJson, kCsv };

// `hiertag tree MODEL.onnx [--json | --csv] [--depth N]`: the module tree with,
// per module, class, path, node counts (own and with descendants), op-type
// histogram, and parameters (count and bytes of the initializers whose
// consumers all lie within the module); modules without nodes too; its call
// count when above one, the initializers it was folded into, and the rewrites
// listing it. Modules in pre-order, children in the order they run. depth < 0:
// no limit.
int RunTree(const std::string& path, TreeFormat format, int depth, std::ostream& out, std::ostream& err);

// The text (json false) or JSON tree.
inline int RunTree(const std::string& path, bool json, int depth, std::ostream& out, std::ostream& err) {
  return RunTree(path, json ? TreeFormat::kJson : TreeFormat::kText, depth, out, err);
}

// `hiertag extract MODEL.onnx --module TAG [--call K] [-o OUT.onnx] [--json]`:
// the nodes tagged TAG or a descendant (or sharing a node with one), only those
// of TAG's call K when `call` is given, as a standalone model (see
// tool/extract.cpp). OUT defaults to MODEL.<tag>.onnx (MODEL.<tag>.callK.onnx).
// An unknown tag lists the closest ones; a call out of range, a module whose
// boundary a rewrite removed and a non-convex module are refused; nothing is
// written unless the whole model is built (written beside OUT, then renamed).
// An OUT (or OUT.data) that is MODEL or one of its external data files, or a
// link to one, is refused: extract never writes over its input.
int RunExtract(const std::string& path, const std::string& tag, std::optional<int64_t> call,
               const std::string& out_path, bool json, std::ostream& out, std::ostream& err);

// What extract does with initializers the source keeps in external data files:
//   kAuto       inline when the output stays under protobuf's 2 GiB, else kCopy
//   kInline     their data in the output model itself
//   kCopy       their data copied into OUT.data beside the output (written first)
//   kReference  locations rewritten to the source's files, which must then lie
//               inside the output's folder
// A location that leads outside the source model's folder is refused.
enum class ExternalDataMode { kAuto, kInline, kCopy, kReference };
int RunExtract(const std::string& path, const std::string& tag, std::optional<int64_t> call,
               const std::string& out_path, ExternalDataMode external_data, bool json, std::ostream& out,
               std::ostream& err);

// All of extract's options. `value_types_path`: an ONNX model whose main graph
// gives the types of values the source records none for (inputs, outputs,
// value_info: the source after onnx.shape_inference.infer_shapes, weights not
// needed), consulted before the tool's own shape inference.
struct ExtractOptions {
  std::optional<int64_t> call;
  std::string out_path;
  ExternalDataMode external_data = ExternalDataMode::kAuto;
  std::string value_types_path;
  bool json = false;
};
int RunExtract(const std::string& path, const std::string& tag, const ExtractOptions& options, std::ostream& out,
               std::ostream& err);

// A range of an external data file to copy into the output's data file.
struct DataCopy {
  std::filesystem::path source;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Parses the command line (argv without the program name) and runs a command;
// `--help` anywhere prints the usage of the command (or of the tool).
int RunTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace hiertag
