// What can be done with a tagged file once it is open: validate it, read its
// module tree, extract one module (or one call) as a standalone model. Each
// operation returns the result as one JSON value (the object `--json` prints)
// or fails with one line; the native `hiertag` tool prints them
// (tool/tool_commands.h) and the Python package reads them as objects
// (hiertag._core.TaggedFile), both over these calls and the one opened file.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/file/value_types.h"
#include "hiertag/core/format/json.h"

namespace hiertag {

// validate: every node (nested graphs included) has a tag that parses under
// the grammar and is in the module table; every table entry's ancestors are in
// the table; no tag is listed twice; a qualifier names the entry's path. No two
// tags under one parent name the same path (in files of format 1, the module
// tree: every entry names one module path, which lies under its parent's);
// "calls", "parent_calls" and "folded_into" are well-formed and consistent;
// hiertag.call is below its tag's call count; hiertag.spans lists tags under
// the node's tag, with hiertag.rewrite; hiertag.rewrites holds well-formed
// records of listed tags.
struct ValidationProblem {
  const OnnxNode* node = nullptr;  // nullptr: a problem of a model entry, named by `subject`
  std::string subject;
  std::string text;
};
std::vector<ValidationProblem> Validate(const TaggedFile& file);

// {"file", "valid", "nodes", "modules", "problems": [{"node", "op_type" | "subject", "problem"}]}
Json ValidationJson(const TaggedFile& file, const std::string& path, const std::vector<ValidationProblem>& problems);

// The module tree: per module its class, path, node counts (own and with
// descendants), op-type histogram, and parameters (count and bytes of the
// initializers whose consumers all lie within the module); modules without
// nodes too; its call count when above one, the initializers it was folded
// into, and the rewrites listing it. Modules in pre-order, children in the
// order they run. depth < 0: no limit.
enum class TreeFormat { kText, kJson, kCsv };

// {"file", "modules": [...]}, or std::nullopt with a one-line *error (a table
// without exactly one root tag).
std::optional<Json> TreeJson(const TaggedFile& file, const std::string& path, int depth, std::string* error);

// Prints the tree as indented text, one JSON object, or CSV (one row per
// module under the header
// `tag,class,path,depth,nodes_own,nodes_total,params_own,params_total,bytes_own,bytes_total,calls,ran`,
// fields quoted as RFC 4180 asks: tags and paths may hold commas and quotes).
// False with a one-line *error as TreeJson.
bool PrintTree(const TaggedFile& file, const std::string& path, TreeFormat format, int depth, std::ostream& out,
               std::string* error);

// extract: the nodes tagged TAG or a descendant (or sharing a node with one),
// only those of TAG's call K when `call` is given, as a standalone model (see
// core/file/extract.cpp). OUT defaults to MODEL.<tag>.onnx
// (MODEL.<tag>.callK.onnx). An unknown tag lists the closest ones; a call out
// of range, a module whose boundary a rewrite removed and a non-convex module
// are refused; nothing is written unless the whole model is built (written
// beside OUT, then renamed). An OUT (or OUT.data) that is MODEL or one of its
// external data files, or a link to one, is refused: extract never writes over
// its input.
//
// What extract does with initializers the source keeps in external data files:
//   kAuto       inline when the output stays under protobuf's 2 GiB, else kCopy
//   kInline     their data in the output model itself
//   kCopy       their data copied into OUT.data beside the output (written first)
//   kReference  locations rewritten to the source's files, which must then lie
//               inside the output's folder
// A location that leads outside the source model's folder is refused.
enum class ExternalDataMode { kAuto, kInline, kCopy, kReference };

struct ExtractOptions {
  std::optional<int64_t> call;
  std::string out_path;
  ExternalDataMode external_data = ExternalDataMode::kAuto;
  // Types for values the source records none for, consulted before `infer_types`:
  // the main graph of an ONNX model (inputs, outputs, value_info), as a path
  // (the tool's --value-types) or none.
  std::string value_types_path;
  // Asked once, on the first value without a type: the types ONNX shape
  // inference gives the source's main graph (value_types.h InferTypes); none
  // leaves such values untyped, and extract names the first one.
  InferTypes infer_types;
};

// Why extract wrote nothing, and the one line that says so.
struct ExtractError {
  enum class Kind {
    kUnknownModule,    // no module of the file has that tag (the line lists the closest)
    kRefused,          // the module (call) cannot stand alone: see above
    kOverwritesInput,  // OUT or OUT.data is the source or one of its data files
    kBadInput,         // a --value-types file that cannot be read
    kWriteFailed,      // the output could not be written
  };
  Kind kind = Kind::kRefused;
  std::string line;
};

// {"file", "module", "call"?, "output", "nodes", "inputs", "outputs",
// "initializers", "data_file"?} after writing the model; std::nullopt with *error.
std::optional<Json> Extract(const TaggedFile& file, const std::string& path, const std::string& tag,
                            const ExtractOptions& options, ExtractError* error);

// The one-line text summary of an Extract result, as the tool prints it.
std::string ExtractSummary(const Json& result);

}  // namespace hiertag
