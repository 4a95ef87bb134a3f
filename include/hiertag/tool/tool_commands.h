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
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace hiertag {

// `hiertag validate MODEL.onnx [--json]`: every node (nested graphs included)
// has a tag that parses under the grammar and is in the module table; every
// table entry's ancestors are in the table; no tag is listed twice; a qualifier
// names the entry's path. Format 1 (the module tree): every entry names one
// module path, which lies under its parent's. Format 2 (the call tree): no two
// tags under one parent name the same path; "calls", "parent_calls" and
// "folded_into" are well-formed and consistent; hiertag.call is below its tag's
// call count; hiertag.spans lists tags under the node's tag, with
// hiertag.rewrite; hiertag.rewrites holds well-formed records of listed tags.
int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err);

// `hiertag tree MODEL.onnx [--json] [--depth N]`: the module tree with, per
// module, class, path, node counts (own and with descendants), op-type
// histogram, and parameters (count and bytes of the initializers whose
// consumers all lie within the module); modules without nodes too; its call
// count when above one, the initializers it was folded into, and the rewrites
// listing it. depth < 0: no limit.
int RunTree(const std::string& path, bool json, int depth, std::ostream& out, std::ostream& err);

// `hiertag extract MODEL.onnx --module TAG [--call K] [-o OUT.onnx] [--json]`:
// the nodes tagged TAG or a descendant (or sharing a node with one), only those
// of TAG's call K when `call` is given, as a standalone model (see
// tool/extract.cpp). OUT defaults to MODEL.<tag>.onnx (MODEL.<tag>.callK.onnx).
// An unknown tag lists the closest ones; a call out of range, a module whose
// boundary a rewrite removed and a non-convex module are refused; nothing is
// written unless the whole model is built (written beside OUT, then renamed).
int RunExtract(const std::string& path, const std::string& tag, std::optional<int64_t> call,
               const std::string& out_path, bool json, std::ostream& out, std::ostream& err);

// Parses the command line (argv without the program name) and runs a command;
// `--help` anywhere prints the usage of the command (or of the tool).
int RunTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace hiertag
