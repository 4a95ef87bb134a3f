// The hiertag tool's command line: usage, options, dispatch.
#include <charconv>
#include <cstdint>
#include <optional>
#include <ostream>
#include <sstream>
#include <string>

#include "hiertag/core/format/printable.h"
#include "hiertag/tool/tool_commands.h"

namespace hiertag {
namespace {

// The tool's commands, declared once (tool_commands.h ToolCommand).
constexpr ToolCommand kCommands[] = {
    {"validate", "MODEL.onnx [--json]", "check every node's tag against the grammar and the module table",
     "Checks that every node, nested graphs included, has a hierarchy_tag that parses under the tag\n"
     "grammar and is in the module table; that every tag's ancestors are in the table; that each\n"
     "table entry names one module path (no two entries under one parent name the same path; in\n"
     "files of format 1, before call tags, a path lies inside its parent's), and its calls,\n"
     "parent_calls and folded_into fit; that\n"
     "hiertag.call, hiertag.spans / hiertag.rewrite and hiertag.rewrites fit the table.\n"
     "Prints one line per problem (<file>: node '<name>' (<op_type>): <problem>) and a summary line.\n"
     "  --json   print the result as one JSON object\n"
     "Exit status: 0 valid, 1 problems found, 2 missing, truncated, non-ONNX or untagged file.\n"},
    {"tree", "MODEL.onnx [--json | --csv] [--depth N]", "print the module tree with node, op and parameter counts",
     "Prints the call tree (files of format 1: the module tree): per module its class, qualified path, node\n"
     "counts (own and with descendants), op-type histogram, parameters (initializers whose consumers\n"
     "all lie within the module: count and bytes), its calls when more than one, the initializers its\n"
     "computation was folded into, and the rewrites across its boundary; children in graph order.\n"
     "  --json      print the modules as JSON\n"
     "  --csv       print one CSV row per module (pre-order), under the header\n"
     "              "
     "tag,class,path,depth,nodes_own,nodes_total,params_own,params_total,bytes_own,bytes_total,calls,ran\n"
     "              (fields with commas, quotes or line breaks quoted, quotes doubled)\n"
     "  --depth N   only modules at most N levels below the root\n"
     "Exit status: 0 success, 2 missing, truncated, non-ONNX or untagged file.\n"},
    {"extract",
     "MODEL.onnx --module TAG [--call K] [-o OUT.onnx] [--external-data MODE] [--value-types TYPES.onnx] [--json]",
     "write one module (or one of its calls) as a standalone ONNX model",
     "Writes the nodes tagged TAG or a descendant of TAG (and nodes CSE kept for them,\n"
     "hiertag.shared_with) as a standalone model: its inputs are the values they read from\n"
     "outside (typed from the file, --value-types or ONNX shape inference), its outputs the values they make\n"
     "that are read outside or are model outputs; the initializers and Constant nodes they need\n"
     "are copied; node order, opsets and IR version are the source's.\n"
     "  --module TAG   the module's tag as hiertag tree prints it; tags %-escape control characters\n"
     "                 (a newline is %0A), and that spelling also names a module whose tag a file\n"
     "                 written before holds with the character itself\n"
     "  --call K       only the nodes of TAG's call K (0-based; hiertag tree shows the calls)\n"
     "  --external-data MODE\n"
     "                 initializers the source keeps in external data files: auto (default: inline\n"
     "                 when the output stays under 2 GiB, else copy), inline, copy (into OUT.data beside\n"
     "                 the output, a range several initializers share once), reference (the source's\n"
     "                 files, which must lie inside OUT's folder);\n"
     "                 a location leading outside the source's folder is refused\n"
     "  -o OUT.onnx    where to write (default: MODEL.<tag>.onnx, MODEL.<tag>.callK.onnx); an OUT (or\n"
     "                 OUT.data) that is MODEL or one of its data files, or a link to one, is refused\n"
     "  --value-types TYPES.onnx\n"
     "                 types for values MODEL records none for: TYPES's main graph inputs, outputs\n"
     "                 and value_info (MODEL after onnx.shape_inference.infer_shapes), before the\n"
     "                 tool's own shape inference (a build without an ONNX library has none)\n"
     "  --json         print the result as JSON\n"
     "Exit status: 0 written, 2 bad input, unknown module (the closest are listed), a call out of\n"
     "range, a module whose boundary an export pass rewrote away, or a module that is not a convex\n"
     "region of the graph (nothing is written).\n"},
};

const ToolCommand* FindCommand(std::string_view name) {
  for (const ToolCommand& command : kCommands) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

// `hiertag --help`: every command's arguments and summary.
std::string ToolUsage() {
  std::string usage =
      "usage: hiertag COMMAND MODEL.onnx [options]\n"
      "\n"
      "Commands over ONNX files tagged by hiertag (build/libhiertag.so, HIERTAG=1):\n";
  for (const ToolCommand& command : kCommands) {
    usage.append("  ").append(command.name).append(" ").append(command.arguments).append("\n");
    usage.append("      ").append(command.summary).append("\n");
  }
  return usage +
         "\n"
         "Exit status: 0 success, 1 validate found problems, 2 bad input or usage.\n"
         "Run 'hiertag COMMAND --help' for a command's details.\n";
}

// `hiertag COMMAND --help`.
std::string CommandUsage(const ToolCommand& command) {
  return "usage: hiertag " + std::string(command.name) + " " + std::string(command.arguments) + "\n\n" +
         std::string(command.details);
}

// One line on err: "hiertag: MESSAGE (see 'hiertag --help')", or, for a
// command, "hiertag COMMAND: MESSAGE (see 'hiertag COMMAND --help')".
int UsageError(const std::string& message, std::ostream& err, const std::string& command = "") {
  const std::string name = command.empty() ? "hiertag" : "hiertag " + command;
  err << name << ": " << Printable(message) << " (see '" << name << " --help')\n";
  return 2;
}

int RunCommand(const std::vector<std::string>& args, const InferTypes& infer_types, std::ostream& out,
               std::ostream& err);

}  // namespace

// Every line a command writes on err says which command: "hiertag COMMAND: ...",
// as the Python verbs' do (a line that already says so is left as it is).
int RunTool(const std::vector<std::string>& args, const InferTypes& infer_types, std::ostream& out, std::ostream& err) {
  if (args.empty()) return UsageError("no command given", err);
  const std::string& command = args[0];
  if (FindCommand(command) == nullptr) return RunCommand(args, infer_types, out, err);
  std::ostringstream said;
  int status = RunCommand(args, infer_types, out, said);
  const std::string prefix = "hiertag " + command + ": ";
  std::istringstream lines(said.str());
  for (std::string line; std::getline(lines, line);) err << (line.rfind(prefix, 0) == 0 ? "" : prefix) << line << "\n";
  return status;
}

namespace {

int RunCommand(const std::vector<std::string>& args, const InferTypes& infer_types, std::ostream& out,
               std::ostream& err) {
  const std::string& command = args[0];
  bool help = false;
  for (const std::string& arg : args) help |= arg == "--help" || arg == "-h";
  const ToolCommand* declared = FindCommand(command);
  if (declared == nullptr) {
    if (help) {
      out << ToolUsage();
      return 0;
    }
    return UsageError("unknown command '" + command + "'", err);
  }
  if (help) {
    out << CommandUsage(*declared);
    return 0;
  }
  std::string model;
  std::string module;
  ExtractOptions extract;
  bool json = false;
  bool csv = false;
  int depth = -1;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--json") {
      json = true;
    } else if (arg == "--csv" && command == "tree") {
      csv = true;
    } else if (arg == "--depth" && command == "tree") {
      if (i + 1 >= args.size()) return UsageError("--depth needs a number", err, command);
      const std::string& value = args[++i];
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), depth);
      if (error != std::errc() || end != value.data() + value.size() || depth < 0) {
        return UsageError("--depth takes a whole number >= 0, not '" + value + "'", err, command);
      }
    } else if (arg == "--external-data" && command == "extract") {
      if (i + 1 >= args.size()) return UsageError("--external-data needs a mode", err, command);
      const std::string& value = args[++i];
      if (value == "auto") {
        extract.external_data = ExternalDataMode::kAuto;
      } else if (value == "inline") {
        extract.external_data = ExternalDataMode::kInline;
      } else if (value == "copy") {
        extract.external_data = ExternalDataMode::kCopy;
      } else if (value == "reference") {
        extract.external_data = ExternalDataMode::kReference;
      } else {
        return UsageError("--external-data takes auto, inline, copy or reference, not '" + value + "'", err, command);
      }
    } else if (arg == "--call" && command == "extract") {
      if (i + 1 >= args.size()) return UsageError("--call needs a number", err, command);
      const std::string& value = args[++i];
      int64_t ordinal = -1;
      auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), ordinal);
      if (error != std::errc() || end != value.data() + value.size() || ordinal < 0) {
        return UsageError("--call takes a whole number >= 0, not '" + value + "'", err, command);
      }
      extract.call = ordinal;
    } else if ((arg == "--module" || arg == "-o" || arg == "--value-types") && command == "extract") {
      if (i + 1 >= args.size()) return UsageError(arg + " needs a value", err, command);
      (arg == "-o" ? extract.out_path : arg == "--module" ? module : extract.value_types_path) = args[++i];
    } else if (!arg.empty() && arg[0] == '-') {
      return UsageError("unknown option '" + arg + "'", err, command);
    } else if (model.empty()) {
      model = arg;
    } else {
      return UsageError("more than one model given ('" + model + "', '" + arg + "')", err, command);
    }
  }
  if (model.empty()) return UsageError("needs MODEL.onnx", err, command);
  if (command == "validate") return RunValidate(model, json, out, err);
  if (command == "tree") {
    if (json && csv) return UsageError("tree takes --json or --csv, not both", err, command);
    return RunTree(model, csv ? TreeFormat::kCsv : json ? TreeFormat::kJson : TreeFormat::kText, depth, out, err);
  }
  if (module.empty()) return UsageError("needs --module TAG", err, command);
  extract.infer_types = infer_types;
  return RunExtract(model, module, extract, json, out, err);
}

}  // namespace

std::span<const ToolCommand> ToolCommands() { return kCommands; }

}  // namespace hiertag
