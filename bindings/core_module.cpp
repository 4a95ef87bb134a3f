// hiertag._core: the torch-free core (include/hiertag/core) and the tool's file
// side (tagged_file.h, module_calls_in_file.h, module_boundaries.h) for the
// Python package, so its verbs spell the format with the plugin's and the
// tool's own code instead of a copy of it. Links those alone: no torch, no
// onnxruntime, no protobuf; importing it imports nothing but itself.
//
//   keys and version   TAG_KEY, CALL_KEY, SHARED_KEY, SPANS_KEY, REWRITE_KEY,
//                      TABLE_KEY, REWRITES_KEY, FORMAT_VERSION_KEY, FORMAT_VERSION,
//                      KEY_PREFIX, SOURCE_KEY, CARRY_KEY
//   entries            write_module_table, write_rewrites, write_tag_list
//   grammar            escape_class_name, escape_qualifier, canonical_tag,
//                      parse_call_ref, format_call_ref, is_tag_ancestor_or_self, parent_tag
//   options            TorchModuleSegments.parse (HIERTAG_TORCH_MODULES' values)
//   tags               ModuleTable (module_table.h) and CallTags (call_tags.h)
//   rules              place_by_rules, calls_of_readers, unplaced: the rules that
//                      place a node no record tags (placement_rules.h)
//   calls in a file    CallTable (module_calls_in_file.h)
//   boundaries         rewrite_records, module_boundaries, rewritten_boundaries,
//                      weight_values: the rewrites the file records, the module-boundary
//                      rule `hiertag extract` cuts by, and the calls whose boundary
//                      a recorded rewrite removed, the weights (tool/module_boundaries.h)
//   value types        main_graph_value_infos: an inferred model's types without its graph
//   weights in place   with_weights_left_in_file: a model file read without its weights' bytes
//   an opened file     TaggedFile: validate, tree, extract, module_boundaries,
//                      rewritten_boundaries, rewrite_records, weight_values, graph_inputs,
//                      graph_outputs, opset over one read of the
//                      file (core/file/file_commands.h), results as the objects
//                      `--json` prints, refusals as TaggedFileError's subclasses
//   carry's graph      ValueGraph: a main graph's values, makers, readers and
//                      descent, for carry's correspondence (value_graph_binding.cpp)
//   the command line   run_tool: the native tool's commands in process; tool_commands: their names and summaries
//
// A malformed argument raises ValueError with the core's one-line reason.
#include <nanobind/nanobind.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "bindings/value_graph_binding.h"
#include "hiertag/core/export/export_options.h"
#include "hiertag/core/file/file_commands.h"
#include "hiertag/core/file/module_boundaries.h"
#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/json.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/placement_rules.h"
#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/format/tagged_entries.h"
#include "hiertag/core/onnx/external_data.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/onnx_model.h"
#include "hiertag/core/onnx/proto_wire.h"
#include "hiertag/tool/tool_commands.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace hiertag {
namespace {

// (path, qualified class, short class, has segment), root first, parents before children.
using ModuleRow = std::tuple<std::string, std::string, std::string, bool>;

// A finalized ModuleTable built from rows; ValueError for rows Add refuses.
ModuleTable TableOf(const std::vector<ModuleRow>& rows) {
  ModuleTable table;
  try {
    for (const auto& [path, qualified, short_class, has_segment] : rows) {
      table.Add(path, qualified, short_class, has_segment);
    }
    if (table.size() == 0) throw std::invalid_argument("a module table needs the root module");
    table.Finalize();
  } catch (const std::invalid_argument& error) {
    throw nb::value_error(error.what());
  }
  return table;
}

// Python bytes as the owner of the buffer the core reads in place (OnnxModel::Parse):
// a reference to them, dropped under the GIL, so a model's bytes are not held twice.
std::shared_ptr<const void> OwnerOf(const nb::bytes& bytes) {
  return std::shared_ptr<const void>(new nb::bytes(bytes), [](const void* held) {
    nb::gil_scoped_acquire gil;
    delete static_cast<const nb::bytes*>(held);
  });
}

std::string_view ViewOf(const nb::bytes& bytes) { return std::string_view(bytes.c_str(), bytes.size()); }

// The tagged file of a serialized model; ValueError with the reader's reason.
TaggedFile TaggedFileOf(const nb::bytes& model) {
  std::string error;
  std::optional<TaggedFile> file = ParseTaggedFile(OwnerOf(model), ViewOf(model), "model", &error);
  if (!file) throw nb::value_error(error.c_str());
  return std::move(*file);
}

// [(tag, call, inputs, outputs, nodes)] for every call of every module of a
// serialized tagged model, each row made as the core finds the call's boundary;
// nodes (ModuleBoundary::nodes) are positions in the main graph's node list,
// packed as native int32 (Python's array("i") reads them): a call lists every
// node of the calls inside it, so a deep model's calls list each node many times.
nb::list ModuleBoundariesOf(const TaggedFile& file) {
  std::vector<int32_t> position(file.model.nodes.size(), -1);
  const std::vector<int>& main = file.model.graphs.at(0).nodes;
  for (size_t i = 0; i < main.size(); ++i) position[main[i]] = static_cast<int32_t>(i);
  nb::list rows;
  std::vector<int32_t> nodes;
  std::string error;
  bool found = ForEachModuleBoundary(
      file,
      [&](CallBoundary&& call) {
        nodes.clear();
        for (int index : call.boundary.nodes) nodes.push_back(position[index]);
        rows.append(
            nb::make_tuple(call.tag, call.call, call.boundary.inputs, call.boundary.outputs,
                           nb::bytes(reinterpret_cast<const char*>(nodes.data()), nodes.size() * sizeof(int32_t))));
      },
      &error);
  if (!found) throw nb::value_error(error.c_str());
  return rows;
}

std::vector<std::tuple<std::string, int64_t, std::string>> RewrittenBoundariesOf(const TaggedFile& file) {
  std::vector<std::tuple<std::string, int64_t, std::string>> rows;
  for (CutCall& cut : AllCutCalls(file)) rows.emplace_back(std::move(cut.tag), cut.call, std::move(cut.why));
  return rows;
}

nb::list RewriteRecordsOf(const TaggedFile& file) {
  nb::list records;
  for (const Rewrite& rewrite : file.rewrites) {
    nb::dict record;
    record["pass"] = rewrite.pass;
    record["kind"] = rewrite.kind;
    record["modules"] = rewrite.modules;
    record["node"] = rewrite.node;
    if (!rewrite.cause.empty()) record["cause"] = rewrite.cause;
    if (!rewrite.reason.empty()) record["reason"] = rewrite.reason;
    records.append(record);
  }
  return records;
}

// The calls a tagged file's table records, asked as module_calls_in_file.h asks:
// the file's table is kept, since CallsInFile refers to it, and its model let go
// (no question asked here reads a node; the bytes and nodes are 2.5 times the
// file, held as long as carry holds the table).
struct CallTable {
  explicit CallTable(TaggedFile read) : file(std::move(read)), calls(file) { file.model = OnnxModel(); }
  CallTable(const CallTable&) = delete;  // `calls` refers to this object's `file`
  CallTable& operator=(const CallTable&) = delete;
  TaggedFile file;
  CallsInFile calls;
};

using PyRef = std::tuple<std::string, std::optional<int64_t>>;
CallRef RefOf(const PyRef& ref) { return {std::get<0>(ref), std::get<1>(ref)}; }

// A dict's optional member as T, or `fallback` when absent or None.
template <typename T>
T Member(const nb::dict& entry, const char* key, T fallback) {
  if (!entry.contains(key) || entry[key].is_none()) return fallback;
  return nb::cast<T>(entry[key]);
}

// hiertag.modules as the plugin writes it, from {tag: {"path", "class", and
// optionally "calls", "parent_calls", "ran", "folded_into"}} in the order given.
std::string WriteTable(const nb::dict& table) {
  std::vector<TableEntry> entries;
  for (auto [key, value] : table) {
    nb::dict entry = nb::cast<nb::dict>(value);
    TableEntry row;
    row.tag = nb::cast<std::string>(key);
    row.path = nb::cast<std::string>(entry["path"]);
    row.class_name = nb::cast<std::string>(entry["class"]);
    row.calls = Member(entry, "calls", std::vector<int64_t>{});
    row.parent_calls = Member(entry, "parent_calls", std::vector<int64_t>{});
    row.ran = Member(entry, "ran", true);
    row.folded_into = Member(entry, "folded_into", std::vector<std::string>{});
    entries.push_back(std::move(row));
  }
  return WriteModuleTable(entries);
}

// hiertag.rewrites as the plugin writes it, from dicts with "pass", "kind",
// "modules", and optionally "node", "cause" and "reason".
std::string WriteRewriteRecords(const nb::list& records) {
  std::vector<RewriteEntry> entries;
  for (nb::handle item : records) {
    nb::dict record = nb::cast<nb::dict>(item);
    entries.push_back({nb::cast<std::string>(record["pass"]), nb::cast<std::string>(record["kind"]),
                       nb::cast<std::vector<std::string>>(record["modules"]), Member(record, "node", std::string()),
                       Member(record, "reason", std::string()), Member(record, "cause", std::string())});
  }
  return WriteRewrites(entries);
}

// A model file's bytes with its main graph's weights pointing at where they lie in it.
nb::bytes WithWeightsLeftInFileOf(const nb::bytes& file, std::string_view location, uint64_t over_bytes) {
  std::string error;
  std::optional<std::string> model =
      WithWeightsLeftInFile(std::string_view(file.c_str(), file.size()), location, over_bytes, &error);
  if (!model) throw nb::value_error(error.c_str());
  return nb::bytes(model->data(), model->size());
}

// The main graph's inputs, outputs and value_info as a serialized GraphProto.
nb::bytes MainGraphValueInfosOf(const nb::bytes& model) {
  std::string error;
  std::optional<std::string> values = MainGraphValueInfos(std::string_view(model.c_str(), model.size()), &error);
  if (!values) throw nb::value_error(("model: " + error).c_str());
  return nb::bytes(values->data(), values->size());
}

// The main graph's weights: its initializers and the outputs of its weight nodes.
std::vector<std::string> WeightValuesOf(const OnnxModel& model) {
  const OnnxGraph& main = model.graphs.at(0);
  std::unordered_map<int, std::vector<std::string_view>> reads;
  for (int index : main.nodes) reads[index] = NodeReads(model, index);
  std::vector<std::string> values;
  for (const OnnxInitializer& initializer : main.initializers) values.push_back(initializer.name);
  for (int index : WeightNodes(model, reads)) {
    for (std::string_view output : model.nodes[index].outputs) values.emplace_back(output);
  }
  return values;
}

// The model of a serialized ModelProto (tagged or not); ValueError with the reader's reason.
OnnxModel ModelOf(const nb::bytes& bytes) {
  std::string error;
  std::optional<OnnxModel> model = OnnxModel::Parse(OwnerOf(bytes), ViewOf(bytes), &error);
  if (!model) throw nb::value_error(("model: " + error).c_str());
  return std::move(*model);
}

// place_by_rules' rows (holder, has_inputs, neighbours) -> (tag or id, rule name).
using PlacementRow = std::tuple<std::optional<int>, bool, std::vector<int>>;

std::vector<std::tuple<int, std::string>> PlacedRows(
    const std::vector<PlacementRow>& rows,
    const std::function<std::vector<Placement>(const std::vector<UnplacedNode>&)>& place) {
  std::vector<UnplacedNode> nodes;
  nodes.reserve(rows.size());
  for (const auto& [holder, has_inputs, neighbours] : rows) nodes.push_back({holder, has_inputs, neighbours});
  std::vector<Placement> placements;
  try {
    placements = place(nodes);
  } catch (const std::out_of_range& error) {
    throw nb::value_error(error.what());
  }
  std::vector<std::tuple<int, std::string>> result;
  result.reserve(placements.size());
  for (const Placement& placement : placements) result.emplace_back(placement.tag, TagRuleName(placement.rule));
  return result;
}

// A JSON value as Python objects (objects keep their order).
nb::object ToPython(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return nb::none();
    case Json::value_t::boolean:
      return nb::bool_(value.get<bool>());
    case Json::value_t::number_integer:
      return nb::int_(value.get<int64_t>());
    case Json::value_t::number_unsigned:
      return nb::int_(value.get<uint64_t>());
    case Json::value_t::number_float:
      return nb::float_(value.get<double>());
    case Json::value_t::string:
      return nb::str(value.get_ref<const std::string&>().c_str(), value.get_ref<const std::string&>().size());
    case Json::value_t::array: {
      nb::list items;
      for (const Json& item : value) items.append(ToPython(item));
      return items;
    }
    case Json::value_t::object: {
      nb::dict members;
      for (const auto& [key, item] : value.items()) members[nb::str(key.c_str(), key.size())] = ToPython(item);
      return members;
    }
    default:
      throw std::logic_error("a JSON value of no JSON type");
  }
}

// The Python exceptions a tagged file's operations raise: TaggedFileError
// (a ValueError: the file cannot be read as a tagged file), and for extract
// one subclass per refusal kind. Each carries the one line the tool prints.
struct FileErrors {
  nb::object file, unknown_module, refused, overwrites_input, bad_input, write_failed;
};
FileErrors& Errors() {
  static FileErrors* errors = new FileErrors;  // never destroyed: Python may be gone by then
  return *errors;
}

[[noreturn]] void Raise(const nb::object& type, const std::string& line) {
  PyErr_SetString(type.ptr(), line.c_str());
  throw nb::python_error();
}

// A tagged file opened once: the file layer's operations over it.
class OpenedFile {
 public:
  explicit OpenedFile(std::string path) : path_(std::move(path)) {
    std::string error;
    std::optional<TaggedFile> file = LoadTaggedFile(path_, &error);
    if (!file) Raise(Errors().file, error);
    file_ = std::move(*file);
  }

  nb::object Validate() const { return ToPython(ValidationJson(file_, path_, hiertag::Validate(file_))); }

  nb::object Tree(int depth) const {
    std::string error;
    std::optional<Json> tree = TreeJson(file_, path_, depth, &error);
    if (!tree) Raise(Errors().file, error);
    return ToPython(*tree);
  }

  nb::object Extract(const std::string& module, std::optional<int64_t> call, const std::string& out,
                     const std::string& external_data, const nb::object& value_types) {
    ExtractOptions options;
    options.call = call;
    options.out_path = out;
    options.external_data = ModeOf(external_data);
    if (!value_types.is_none()) {
      // Every type is inferred once and kept, for the file's next extract;
      // this one gets those it asks for.
      options.infer_types = [this, value_types](const OnnxModel&, const ValueTypeMap&, const ValueNames* wanted,
                                                std::string* error) -> std::optional<ValueTypeMap> {
        const ValueTypeMap& types = Inferred(value_types, kPieceBytes);
        if (!inference_error_.empty()) {
          *error = inference_error_;
          return std::nullopt;
        }
        if (wanted == nullptr) return types;
        ValueTypeMap asked;
        for (const std::string& name : *wanted) {
          if (auto found = types.find(name); found != types.end()) asked.emplace(*found);
        }
        return asked;
      };
    }
    ExtractError error;
    std::optional<Json> result = hiertag::Extract(file_, path_, module, options, &error);
    if (!result) Raise(ErrorOf(error.kind), error.line);
    return ToPython(*result);
  }

  const std::string& path() const { return path_; }
  size_t node_count() const { return file_.model.nodes.size(); }
  nb::list ModuleBoundaries() const { return ModuleBoundariesOf(file_); }
  std::vector<std::tuple<std::string, int64_t, std::string>> RewrittenBoundaries() const {
    return RewrittenBoundariesOf(file_);
  }
  nb::list RewriteRecords() const { return RewriteRecordsOf(file_); }
  std::vector<std::string> WeightValues() const { return WeightValuesOf(file_.model); }

  // The main graph's inputs that are not initializers (what a run feeds), in order.
  std::vector<std::string> GraphInputs() const {
    const OnnxGraph& main = file_.model.graphs.at(0);
    std::set<std::string_view> initializers;
    for (const OnnxInitializer& initializer : main.initializers) initializers.insert(initializer.name);
    std::vector<std::string> names;
    for (const OnnxValue& input : main.inputs) {
      if (!initializers.count(input.name)) names.push_back(input.name);
    }
    return names;
  }

  std::vector<std::string> GraphOutputs() const {
    std::vector<std::string> names;
    for (const OnnxValue& output : file_.model.graphs.at(0).outputs) names.push_back(output.name);
    return names;
  }

  // The version of the default domain ("" or "ai.onnx") the file imports; none when it imports none.
  std::optional<int64_t> Opset() const {
    for (const OnnxOpset& opset : file_.model.opsets) {
      if (opset.domain.empty() || opset.domain == "ai.onnx") return opset.version;
    }
    return std::nullopt;
  }

  // The types shape inference gives the main graph's values the file does not
  // type, by `value_types` (as InferFrom's) a piece at a time, each piece at
  // most about `piece_bytes` of nodes: {name: serialized ValueInfoProto}. The
  // first inference of every value by a given callable is kept (the file does
  // not change); asked for `names`, inference runs for those alone, as
  // extract's does, and keeps nothing.
  nb::dict ValueTypes(const nb::object& value_types, size_t piece_bytes,
                      const std::optional<std::vector<std::string>>& names) {
    std::optional<ValueTypeMap> asked;
    if (names) {
      ValueNames wanted(names->begin(), names->end());
      std::string error;
      asked = InferFrom(value_types, piece_bytes)(file_.model, RecordedValueTypes(file_.model), &wanted, &error);
      if (!asked) Raise(Errors().file, path_ + ": " + (error.empty() ? "shape inference gave no types" : error));
    }
    const ValueTypeMap& types = asked ? *asked : Inferred(value_types, piece_bytes);
    if (!asked && !inference_error_.empty()) Raise(Errors().file, path_ + ": " + inference_error_);
    nb::dict result;
    for (const auto& [name, value_info] : types) {
      result[nb::str(name.data(), name.size())] = nb::bytes(value_info.data(), value_info.size());
    }
    return result;
  }

  // `value_types`: None, or a callable taking a serialized model (a piece of
  // the file's main graph, InferInPieces) and returning it serialized as
  // ONNX's shape inference types it (or None when inference fails).
  static InferTypes InferFrom(const nb::object& value_types, size_t piece_bytes = kPieceBytes) {
    if (value_types.is_none()) return {};
    return InferInPieces(
        [value_types](std::string_view piece, std::string* error) -> std::optional<ValueTypeMap> {
          nb::object given = value_types(nb::bytes(piece.data(), piece.size()));
          if (given.is_none()) {
            *error = "shape inference gave no types";
            return std::nullopt;
          }
          nb::bytes bytes = nb::cast<nb::bytes>(given);
          std::optional<std::string> values = MainGraphValueInfos(std::string_view(bytes.c_str(), bytes.size()), error);
          if (!values) return std::nullopt;
          std::string typed;  // a model whose graph holds those values alone
          wire::AppendLengthDelimited(&typed, onnx_field::kModelGraph, *values);
          std::optional<OnnxModel> types = OnnxModel::Parse(std::move(typed), error);
          if (!types) return std::nullopt;
          return RecordedValueTypes(*types);
        },
        piece_bytes);
  }

 private:
  static ExternalDataMode ModeOf(const std::string& mode) {
    if (mode == "auto") return ExternalDataMode::kAuto;
    if (mode == "inline") return ExternalDataMode::kInline;
    if (mode == "copy") return ExternalDataMode::kCopy;
    if (mode == "reference") return ExternalDataMode::kReference;
    throw nb::value_error(("external_data takes auto, inline, copy or reference, not '" + mode + "'").c_str());
  }

  static const nb::object& ErrorOf(ExtractError::Kind kind) {
    switch (kind) {
      case ExtractError::Kind::kUnknownModule:
        return Errors().unknown_module;
      case ExtractError::Kind::kOverwritesInput:
        return Errors().overwrites_input;
      case ExtractError::Kind::kBadInput:
        return Errors().bad_input;
      case ExtractError::Kind::kWriteFailed:
        return Errors().write_failed;
      case ExtractError::Kind::kRefused:
        break;
    }
    return Errors().refused;
  }

  // The types `value_types` infers (inference_error_ when it failed), inferred
  // on the first call with that callable and kept.
  const ValueTypeMap& Inferred(const nb::object& value_types, size_t piece_bytes) {
    if (!inferred_by_ || !inferred_by_.is(value_types) || inferred_piece_bytes_ != piece_bytes) {
      inference_error_.clear();
      std::optional<ValueTypeMap> types =
          InferFrom(value_types, piece_bytes)(file_.model, RecordedValueTypes(file_.model), nullptr, &inference_error_);
      if (!types && inference_error_.empty()) inference_error_ = "shape inference gave no types";
      inferred_ = types ? std::move(*types) : ValueTypeMap{};
      inferred_by_ = value_types;
      inferred_piece_bytes_ = piece_bytes;
    }
    return inferred_;
  }

  std::string path_;
  TaggedFile file_;
  nb::object inferred_by_;
  size_t inferred_piece_bytes_ = 0;
  ValueTypeMap inferred_;
  std::string inference_error_;
};

// The native tool's command line, in process: (exit status, stdout, stderr).
std::tuple<int, nb::bytes, nb::bytes> RunToolInProcess(const std::vector<std::string>& args,
                                                       const nb::object& value_types) {
  std::ostringstream out, err;
  int status = RunTool(args, OpenedFile::InferFrom(value_types), out, err);
  std::string printed = out.str(), said = err.str();
  return {status, nb::bytes(printed.data(), printed.size()), nb::bytes(said.data(), said.size())};
}

}  // namespace
}  // namespace hiertag

NB_MODULE(_core, m) {
  using namespace hiertag;
  m.doc() = "hiertag's torch-free core: the format's keys, grammar, module table, call tags and module boundaries";

  m.attr("TAG_KEY") = std::string(kHierarchyTagKey);
  m.attr("CALL_KEY") = std::string(kCallKey);
  m.attr("SHARED_KEY") = std::string(kSharedWithKey);
  m.attr("SPANS_KEY") = std::string(kSpansKey);
  m.attr("REWRITE_KEY") = std::string(kRewriteKey);
  m.attr("TABLE_KEY") = std::string(kModuleTableKey);
  m.attr("REWRITES_KEY") = std::string(kRewritesKey);
  m.attr("FORMAT_VERSION_KEY") = std::string(kFormatVersionKey);
  m.attr("FORMAT_VERSION") = std::string(kFormatVersion);
  m.attr("KEY_PREFIX") = std::string(kKeyPrefix);
  m.attr("SOURCE_KEY") = std::string(kSourceKey);
  m.attr("CARRY_KEY") = std::string(kCarryKey);

  m.def(
      "printable", [](const nb::bytes& text) { return Printable(std::string_view(text.c_str(), text.size())); },
      "text"_a,
      "UTF-8 bytes as every line hiertag prints quotes a name (core/format/printable.h): control characters and "
      "ill-formed UTF-8 escaped, so the text stays one line.");
  m.def("escape_class_name", &EscapeClassName, "raw"_a, "A class name as a tag segment spells it (%-escaped).");
  m.def("escape_qualifier", &EscapeQualifier, "raw"_a, "A module path as a segment's [qualifier] spells it.");
  m.def("canonical_tag", &CanonicalTag, "tag"_a, "The tag as this writer spells it; None when it does not parse.");
  m.def(
      "parse_call_ref",
      [](std::string_view text) -> std::tuple<std::string, std::optional<int64_t>> {
        std::optional<CallRef> ref = ParseCallRef(text);
        if (!ref) throw nb::value_error(("not a call reference: '" + std::string(text) + "'").c_str());
        return {ref->tag, ref->call};
      },
      "text"_a, "'TAG' -> (TAG, None); 'TAG#K' -> (TAG, K).");
  m.def("format_call_ref", &FormatCallRef, "tag"_a, "call"_a.none(), "(TAG, None) -> 'TAG'; (TAG, K) -> 'TAG#K'.");
  m.def("is_tag_ancestor_or_self", &IsTagAncestorOrSelf, "ancestor"_a, "tag"_a);
  m.def(
      "parent_tag", [](std::string_view tag) { return std::string(ParentTag(tag)); }, "tag"_a,
      "The tag of the parent module; '' for a root tag.");

  m.def(
      "place_by_rules",
      [](const std::vector<PlacementRow>& rows, const CallTags& call_tags) {
        return PlacedRows(rows, [&](const std::vector<UnplacedNode>& nodes) { return PlaceByRules(nodes, call_tags); });
      },
      "nodes"_a, "call_tags"_a,
      "Places the nodes no record tags by hiertag's rules (placement_rules.h): nodes are (holder, has_inputs, "
      "neighbours) in sweep order, holder None outside nested graphs; a holder or neighbour is a call tag id or "
      "unplaced(k), the k-th node of the list. Returns (tag, rule) per node, rule 'enclosing', 'consumers', "
      "'neighbours' or 'root'.");
  m.def(
      "place_by_rules",
      [](const std::vector<PlacementRow>& rows, int root, const std::function<int(int, int)>& common) {
        return PlacedRows(rows,
                          [&](const std::vector<UnplacedNode>& nodes) { return PlaceByRules(nodes, root, common); });
      },
      "nodes"_a, "root"_a, "common"_a,
      "The same rules over the caller's own ids (>= 0): common(a, b) is the id of the innermost place holding "
      "both, root the id of a node nothing places. Returns (id, rule) per node.");
  m.def(
      "calls_of_readers",
      [](const std::vector<std::tuple<int, int, std::vector<std::tuple<int, int>>>>& rows) {
        std::vector<RulePlacedNode> nodes;
        nodes.reserve(rows.size());
        for (const auto& [tag, call, readers] : rows) {
          RulePlacedNode node{tag, call, {}};
          for (const auto& [reader_tag, reader_call] : readers) node.readers.push_back({reader_tag, reader_call});
          nodes.push_back(std::move(node));
        }
        try {
          return CallsOfReaders(nodes);
        } catch (const std::out_of_range& error) {
          throw nb::value_error(error.what());
        }
      },
      "nodes"_a,
      "The call of each node a rule placed in a tag with several calls (placement_rules.h CallsOfReaders): nodes "
      "are (tag, call, readers), a reader (tag, call) or (unplaced(k), 0) for the k-th node of the list; the call "
      "of the last reader with the node's tag, else its own.");
  m.def("unplaced", &Unplaced, "index"_a, "The reference place_by_rules reads as the index-th node of its list.");

  m.def(
      "module_boundaries", [](const nb::bytes& model) { return ModuleBoundariesOf(TaggedFileOf(model)); }, "model"_a,
      "For a serialized tagged model (bytes): (tag, call, inputs, outputs, nodes) for every call of every "
      "module of its table, by the rule `hiertag extract` cuts by. Nodes (weights too) are positions in the "
      "main graph's node list, packed native int32 (array('i')); inputs and outputs in node order. ValueError "
      "with the reason for a file that is not tagged or has malformed references.");

  m.def("write_module_table", &WriteTable, "table"_a,
        "hiertag.modules' text as the plugin writes it, from {tag: {'path', 'class', and optionally 'calls', "
        "'parent_calls', 'ran', 'folded_into'}} in the order given; optional fields only when not their defaults.");
  m.def("write_rewrites", &WriteRewriteRecords, "records"_a,
        "hiertag.rewrites' text as the plugin writes it, from dicts with 'pass', 'kind', 'modules', and optionally "
        "'node', 'cause' and 'reason'.");
  m.def("write_tag_list", &WriteStringList, "tags"_a,
        "A JSON list of tags or call references as hiertag.shared_with and hiertag.spans hold them.");
  m.def(
      "weight_values", [](const nb::bytes& model) { return WeightValuesOf(ModelOf(model)); }, "model"_a,
      "For a serialized model (bytes; tagged or not): its main graph's weights, the values no module call "
      "receives or hands out: initializers, and the outputs of Constants and of nodes computing from weights "
      "alone (tool/module_boundaries.h).");
  m.def("with_weights_left_in_file", &WithWeightsLeftInFileOf, "file"_a, "location"_a, "over_bytes"_a,
        "For a model file's bytes, read from a file named LOCATION: the model with each main-graph initializer "
        "over OVER_BYTES of raw_data pointing at those bytes in that file as external data instead of holding "
        "them (core/onnx/external_data.h WithWeightsLeftInFile). ValueError with the one-line reason when the "
        "bytes are not a model with one graph.");
  m.def("main_graph_value_infos", &MainGraphValueInfosOf, "model"_a,
        "For a serialized model (bytes): its main graph's inputs, outputs and value_info as a serialized "
        "GraphProto holding those alone (core/onnx/onnx_model.h MainGraphValueInfos), its nodes never decoded.");
  m.def(
      "rewrite_records", [](const nb::bytes& model) { return RewriteRecordsOf(TaggedFileOf(model)); }, "model"_a,
      "For a serialized tagged model (bytes): its well-formed hiertag.rewrites records, then a 'fused' record "
      "for every node with hiertag.spans that none names (tool/tagged_file.h TaggedFile::rewrites), as dicts: "
      "pass, kind, modules, node, and cause and reason when the writer gave them.");
  m.def(
      "rewritten_boundaries", [](const nb::bytes& model) { return RewrittenBoundariesOf(TaggedFileOf(model)); },
      "model"_a,
      "For a serialized tagged model (bytes): (tag, call, why) for every call whose boundary the file records an "
      "export pass (or hiertag carry) removed: the calls `hiertag extract` refuses and the verifier does not "
      "check (tool/module_boundaries.h CutBy).");

  nb::class_<TorchModuleSegments>(m, "TorchModuleSegments",
                                  "Which torch.nn / torch.ao classes keep a tag segment (HIERTAG_TORCH_MODULES).")
      .def_static(
          "parse",
          [](std::string_view text) {
            std::string error;
            std::optional<TorchModuleSegments> segments = ParseTorchModuleSegments(text, &error);
            if (!segments) throw nb::value_error(error.c_str());
            return *segments;
          },
          "text"_a, "'0' or '': none; '1': all; 'A,B': those classes. ValueError with the reason otherwise.")
      .def("keeps_segment", &TorchModuleSegments::KeepsSegment, "qualified"_a, "short_name"_a);
  m.def("unknown_torch_modules_note", &UnknownTorchModulesNote, "names"_a, "source"_a,
        "What to say of names in a torch-modules list that no torch.nn / torch.ao class has (the plugin's "
        "hiertag.unknown_torch_modules finds them), naming `source`: one line, '' for none.");

  nb::class_<CallTable>(m, "CallTable",
                        "A tagged model's module calls (tool/module_calls_in_file.h): which calls of an ancestor a "
                        "reference ran in, and whether a reader belongs to a reference. A reference is (tag, call), "
                        "call None for every call.")
      .def(
          "__init__", [](CallTable* self, nb::bytes model) { new (self) CallTable(TaggedFileOf(model)); }, "model"_a,
          "From a serialized tagged model (bytes).")
      .def(
          "calls_at",
          [](const CallTable& table, const PyRef& ref, const std::string& ancestor) {
            std::set<int64_t> calls = table.calls.CallsAt(RefOf(ref), ancestor);
            return std::vector<int64_t>(calls.begin(), calls.end());
          },
          "ref"_a, "ancestor"_a, "The calls of `ancestor` in which the call(s) `ref` names ran (empty when outside).")
      .def(
          "belongs",
          [](const CallTable& table, const PyRef& user, const PyRef& ref) {
            return table.calls.Belongs(RefOf(user), RefOf(ref));
          },
          "user"_a, "ref"_a, "Whether a reader whose own reference is `user` belongs to the call(s) `ref` names.");

  // An index out of range raises IndexError (the core's .at()), a call added
  // after the tags were settled RuntimeError.
  nb::class_<ModuleTable>(m, "ModuleTable", "The module instances and their tags (core/format/module_table.h).")
      .def(
          "__init__",
          [](ModuleTable* self, const std::vector<ModuleRow>& rows) { new (self) ModuleTable(TableOf(rows)); },
          "rows"_a,
          "rows: (path, qualified class, short class, has segment), the root (path '') first, "
          "parents before children. ValueError for a row the table refuses.")
      .def("__len__", &ModuleTable::size)
      .def("find", &ModuleTable::FindByPath, "path"_a, "The index of the module with this path, or -1.")
      .def(
          "path", [](const ModuleTable& t, int i) { return t.at(i).path; }, "index"_a)
      .def(
          "qualified_class", [](const ModuleTable& t, int i) { return t.at(i).class_name; }, "index"_a)
      .def(
          "short_class", [](const ModuleTable& t, int i) { return t.at(i).short_class; }, "index"_a)
      .def("tag", &ModuleTable::TagOf, "index"_a,
           "The tag of the module's nodes (its nearest ancestor-or-self with a segment).");

  nb::class_<CallTags>(m, "CallTags",
                       "The call tree (core/format/call_tags.h): entry 0 is the root call. Every module of the table "
                       "counts as having run, so no container is put between a caller and its callee.")
      .def(
          "__init__",
          [](CallTags* self, const ModuleTable& modules) {
            new (self) CallTags(modules);
            for (int i = 0; i < modules.size(); ++i) self->MarkRan(i);
          },
          "modules"_a, nb::keep_alive<1, 2>())
      .def_ro_static("ROOT", &CallTags::kRoot)
      .def("__len__", &CallTags::size)
      .def("call", &CallTags::Call, "caller"_a, "module"_a,
           "The entry of `module` called from entry `caller`; `caller` itself for a module without a segment.")
      .def("module", &CallTags::Module, "id"_a)
      .def("parent", &CallTags::Parent, "id"_a)
      .def("common_ancestor", &CallTags::CommonAncestor, "a"_a, "b"_a)
      .def("tag", &CallTags::Tag, "id"_a,
           "The entry's tag; settles every segment on first use, so add every call first.");

  FileErrors& errors = Errors();
  auto new_error = [&](const char* name, const nb::object& base, const char* doc) {
    nb::object type =
        nb::steal(PyErr_NewExceptionWithDoc(("hiertag._core." + std::string(name)).c_str(), doc, base.ptr(), nullptr));
    m.attr(name) = type;
    return type;
  };
  errors.file = new_error("TaggedFileError", nb::borrow(PyExc_ValueError),
                          "The file cannot be read as a tagged file, or an operation on it is refused (one line).");
  errors.unknown_module = new_error("UnknownModule", errors.file, "extract: no module has that tag (closest listed).");
  errors.refused = new_error("ExtractRefused", errors.file,
                             "extract: the module (call) cannot stand alone: a call out of range, a boundary a "
                             "rewrite removed, no nodes, nothing used outside it, not convex, untyped values.");
  errors.overwrites_input = new_error("OverwritesInput", errors.file,
                                      "extract: the output (or its data file) is the input or one of its data files.");
  errors.bad_input = new_error("BadValueTypes", errors.file, "extract: the value types given cannot be read.");
  errors.write_failed = new_error("WriteFailed", errors.file, "extract: the output could not be written.");

  nb::class_<OpenedFile>(m, "TaggedFile",
                         "A tagged ONNX file opened once (external data located, not read): validate, tree and "
                         "extract over it (core/file/file_commands.h), each result the object the native tool's "
                         "--json prints, and the questions the verbs ask of it (module boundaries, rewrites, "
                         "weights, value types, graph inputs and outputs, opset), all from its one read. "
                         "TaggedFileError (a ValueError) with the tool's one line when the file cannot be read as "
                         "a tagged file.")
      .def(nb::init<std::string>(), "path"_a)
      .def_prop_ro("path", &OpenedFile::path)
      .def_prop_ro("node_count", &OpenedFile::node_count, "Nodes of every graph, nested ones too.")
      .def_prop_ro("graph_inputs", &OpenedFile::GraphInputs,
                   "The main graph's inputs that are not initializers (what a run feeds), in order.")
      .def_prop_ro("graph_outputs", &OpenedFile::GraphOutputs, "The main graph's outputs, in order.")
      .def_prop_ro("opset", &OpenedFile::Opset, "The default domain's opset the file imports (None: none).")
      .def("module_boundaries", &OpenedFile::ModuleBoundaries, "As module_boundaries(bytes) of this file.")
      .def("rewritten_boundaries", &OpenedFile::RewrittenBoundaries, "As rewritten_boundaries(bytes) of this file.")
      .def("rewrite_records", &OpenedFile::RewriteRecords, "As rewrite_records(bytes) of this file.")
      .def("weight_values", &OpenedFile::WeightValues, "As weight_values(bytes) of this file.")
      .def("value_types", &OpenedFile::ValueTypes, "value_types"_a, "piece_bytes"_a = kPieceBytes,
           "names"_a = nb::none(),
           "{name: serialized ValueInfoProto} for each main-graph value the file does not type and shape inference "
           "does, by `value_types` (as extract's) run on the main graph a piece of about `piece_bytes` of nodes at a "
           "time (core/file/value_types.h InferInPieces); given `names`, for those values alone, inference holding "
           "only the types a later piece may need, as extract's. Raises TaggedFileError when inference fails.")
      .def("validate", &OpenedFile::Validate,
           "{'file', 'valid', 'nodes', 'modules', 'problems': [{'node', 'op_type' | 'subject', 'problem'}]}.")
      .def("tree", &OpenedFile::Tree, "depth"_a = -1,
           "{'file', 'modules': [...]} as `hiertag tree --json` prints it; depth < 0: no limit.")
      .def("extract", &OpenedFile::Extract, "module"_a, "call"_a = nb::none(), "out"_a = "", "external_data"_a = "auto",
           "value_types"_a = nb::none(),
           "Writes the module (its call `call`) as a standalone model to `out` (default MODEL.<tag>.onnx) and "
           "returns what `hiertag extract --json` prints. `value_types`: a callable taking a serialized model "
           "(a piece of the file's main graph) and returning it serialized as ONNX's shape inference types it (or "
           "None), asked on the first value the file does not type; what it gives is kept for the next extract with "
           "the same callable. Raises UnknownModule, ExtractRefused, OverwritesInput, BadValueTypes or WriteFailed "
           "with the tool's one line; nothing is written then.");
  BindValueGraph(m, &ModelOf);
  m.def("run_tool", &RunToolInProcess, "args"_a, "value_types"_a = nb::none(),
        "The native tool's command line (validate, tree, extract) in process: (exit status, stdout, stderr) as "
        "bytes. `value_types`: as TaggedFile.extract's.");
  m.def(
      "tool_commands",
      [] {
        std::vector<std::tuple<std::string, std::string>> commands;
        for (const ToolCommand& command : ToolCommands()) {
          commands.emplace_back(std::string(command.name), std::string(command.summary));
        }
        return commands;
      },
      "The native tool's commands as (name, summary), in its order (tool_commands.h ToolCommand): the "
      "`hiertag` command's table lists them.");
}
