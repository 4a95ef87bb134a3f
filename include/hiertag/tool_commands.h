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

#include <iosfwd>
#include <string>
#include <vector>

namespace hiertag {

// `hiertag validate MODEL.onnx [--json]`: every node (nested graphs included)
// has a tag that parses under the grammar and is in the module table; every
// table entry's ancestors are in the table; every entry names one module path
// (no tag listed twice, no path under two tags) that lies under its parent's.
int RunValidate(const std::string& path, bool json, std::ostream& out, std::ostream& err);

// `hiertag tree MODEL.onnx [--json] [--depth N]`: the module tree with, per
// module, class, path, node counts (own and with descendants), op-type
// histogram, and parameters (count and bytes of the initializers whose
// consumers all lie within the module). depth < 0: no limit.
int RunTree(const std::string& path, bool json, int depth, std::ostream& out, std::ostream& err);

// `hiertag extract MODEL.onnx --module TAG [-o OUT.onnx] [--json]`: the nodes
// tagged TAG or a descendant (or sharing a node with one) as a standalone model
// (see tool/extract.cpp). OUT defaults to MODEL.<tag>.onnx. An unknown tag
// lists the closest ones; a non-convex module is refused; nothing is written
// unless the whole model is built (written beside OUT, then renamed).
int RunExtract(const std::string& path, const std::string& tag, const std::string& out_path, bool json,
               std::ostream& out, std::ostream& err);

// Parses the command line (argv without the program name) and runs a command;
// `--help` anywhere prints the usage of the command (or of the tool).
int RunTool(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace hiertag
