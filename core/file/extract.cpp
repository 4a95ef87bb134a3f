// hiertag extract: one module's nodes as a standalone ONNX model.
//
// Selection: the call's members by the module-boundary rule
// (module_boundaries.h: the one implementation, which the Python verifier asks
// too), a node's If/Loop bodies with it, plus every weight node the selection
// reads (Constants and nodes computing from weights alone: the same for every
// module and call that reads them, data of none, so copied, never cut).
// Inputs and outputs: the boundary's; initializers the selection reads are
// copied. Node order, opsets and IR version are the source's. A module whose
// nodes are not a convex region (a path leaves it and re-enters) is refused; a
// use of a shared node by another module it was kept for is that module's own
// copy of the computation and breaks no convexity. A constant module's model
// has outputs and no inputs.
//
// Two more reasons to refuse, and one way to cut finer (files of format 1 have
// neither rewrites nor calls):
//   rewrites  a rewrite (hiertag.rewrites, or a node's hiertag.spans) listing a
//             module within the extracted one and one outside it removed their
//             boundary: a node computes both, or the value between them is gone.
//   --call K  only the nodes of the module's call K. A node's call at its own tag
//             is its hiertag.call (0 when absent); one level up, call o of tag t
//             ran in call parent_calls[o] of t's parent (0 when absent).
#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <tuple>

#include "hiertag/core/file/file_commands.h"
#include "hiertag/core/file/module_boundaries.h"
#include "hiertag/core/file/tagged_file.h"
#include "hiertag/core/file/value_types.h"
#include "hiertag/core/format/printable.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/external_data.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

// A range of an external data file to copy into the output's data file.
struct DataCopy {
  std::filesystem::path source;
  uint64_t offset = 0;
  uint64_t length = 0;
};

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ClosestTags(const TaggedFile& file, const std::string& tag) {
  std::vector<std::pair<size_t, std::string>> ranked;
  for (const ModuleEntry& entry : file.modules) ranked.emplace_back(EditDistance(entry.tag, tag), entry.tag);
  std::sort(ranked.begin(), ranked.end());
  std::string list;
  for (size_t i = 0; i < ranked.size() && i < 3; ++i) list += (i ? ", " : "") + DisplayTag(ranked[i].second);
  return list;
}

class Extractor {
 public:
  Extractor(const TaggedFile& file, std::string tag, std::optional<int64_t> call, std::string target,
            ExternalDataMode mode, ValueTypeMap supplied_types, InferTypes infer_types)
      : file_(file),
        output_path_(std::move(target)),
        mode_(mode),
        tag_(std::move(tag)),
        call_(call),
        target_{tag_, call_},
        entry_(*file.FindModule(tag_)),
        types_(file.model, std::move(supplied_types), std::move(infer_types)) {}

  // Selects the module's nodes and prepares the output (WriteModel writes it);
  // false with a one-line reason.
  bool Run(std::string* error) {
    if (call_ && *call_ >= entry_.call_count()) {
      *error = "module '" + DisplayTag(tag_) + "' has " + std::to_string(entry_.call_count()) +
               " calls; --call takes K < " + std::to_string(entry_.call_count()) + ", not " + std::to_string(*call_);
      return false;
    }
    if (!CheckRewrites(error)) return false;
    if (!Select(error)) return false;
    for (const OnnxInitializer& initializer : file_.model.graphs.at(0).initializers) {
      initializers_[initializer.name] = &initializer;
    }
    return Assemble(error);
  }

  size_t node_count() const { return selected_.size(); }
  const std::vector<std::string>& inputs() const { return boundary_.inputs; }
  const std::vector<std::string>& outputs() const { return boundary_.outputs; }
  size_t initializer_count() const { return needed_initializers_.size(); }
  // The ranges of the source's external data files to copy, in order, into the
  // data file beside the output (--external-data copy); empty when none.
  const std::vector<DataCopy>& data_copies() const { return data_copies_; }
  std::string data_file_name() const { return std::filesystem::path(output_path_).filename().string() + ".data"; }

 private:
  // "module 'T'", or "call K of module 'T'".
  std::string Described() const {
    return (call_ ? "call " + std::to_string(*call_) + " of " : std::string()) + "module '" + DisplayTag(tag_) + "'";
  }

  // A rewrite that removed the call's boundary (CutBy) refuses it.
  bool CheckRewrites(std::string* error) const {
    std::optional<std::string> why = CutBy(file_, CallsInFile(file_), target_);
    if (why) *error = Described() + " cannot be extracted: " + *why;
    return !why;
  }

  // The module's boundary and nodes, the constants they need and the
  // initializers they read. The graph's index, after the file the largest
  // thing extract holds, lives only while selecting: shape inference, which
  // may follow, never runs beside it.
  bool Select(std::string* error) {
    MainGraphIndex index(file_);
    std::optional<ModuleBoundary> boundary = index.BoundaryOf(target_, error);
    if (!boundary) return false;
    boundary_ = std::move(*boundary);
    selected_ = boundary_.members;
    if (selected_.empty()) {
      *error = Described() + " has no nodes in the main graph";
      return false;
    }
    if (!CheckConvex(index, error)) return false;
    AddNeededConstants(index);
    std::set<std::string_view> seen;
    for (int node : selected_) {
      for (std::string_view input : index.Reads(node)) {
        if (index.IsInitializer(input) && seen.insert(input).second) needed_initializers_.emplace_back(input);
      }
    }
    return true;
  }

  // No node outside the selection may both depend on it and feed it.
  bool CheckConvex(const MainGraphIndex& graph, std::string* error) const {
    std::set<int> downstream;  // outside nodes reachable from the selection
    std::vector<int> work(selected_.begin(), selected_.end());
    while (!work.empty()) {
      int index = work.back();
      work.pop_back();
      for (std::string_view output : file_.model.nodes[index].outputs) {
        for (int user : graph.Consumers(output)) {
          if (graph.Leaves(index, user, selected_, target_) && downstream.insert(user).second) {
            work.push_back(user);
          }
        }
      }
    }
    std::set<int> upstream;  // outside nodes the selection depends on
    work.assign(selected_.begin(), selected_.end());
    while (!work.empty()) {
      int index = work.back();
      work.pop_back();
      for (std::string_view input : graph.Reads(index)) {
        int producer = graph.Producer(input);
        if (producer < 0 || selected_.count(producer)) continue;
        if (downstream.count(producer)) {
          if (!entry_.ran) {
            // No boundary was ever claimed for it: its caller reached past it
            // to its children, and ran code of its own between them.
            *error = Described() +
                     " never ran (its caller reached past it to its children) and its children's "
                     "nodes are interleaved with its caller's: node " +
                     DescribeNode(file_.model.nodes[producer]) + " lies between them";
            return false;
          }
          *error = Described() + " is not a convex region of the graph: node " +
                   DescribeNode(file_.model.nodes[producer]) +
                   " takes values from the module and gives values back to it";
          if (!call_ && entry_.call_count() > 1) {
            *error += "; extract one call with --call K (K < " + std::to_string(entry_.call_count()) + ")";
          }
          return false;
        }
        if (upstream.insert(producer).second) work.push_back(producer);
      }
    }
    return true;
  }

  // Copies in the weight nodes the selection reads (Constants, and nodes that
  // compute from weights alone: the Identity of a deduplicated parameter), with
  // the weight nodes they read: weights the module needs, not values it makes.
  void AddNeededConstants(const MainGraphIndex& graph) {
    std::vector<int> work(selected_.begin(), selected_.end());
    while (!work.empty()) {
      int index = work.back();
      work.pop_back();
      for (std::string_view input : graph.Reads(index)) {
        int producer = graph.Producer(input);
        if (producer < 0 || selected_.count(producer) || !graph.IsWeight(producer)) continue;
        selected_.insert(producer);
        work.push_back(producer);
      }
    }
  }

  // The model: the selection's nodes, the initializers they read, and the
  // boundary's inputs and outputs with their types.
  bool Assemble(std::string* error) {
    if (boundary_.outputs.empty()) {
      *error = Described() + " produces nothing used outside it";
      return false;
    }
    size_t node_bytes = 0;
    for (int index : selected_) node_bytes += file_.model.nodes[index].raw.size() + kFieldHeaderBytes;
    ExternalDataMode mode = mode_;
    if (mode == ExternalDataMode::kAuto || mode == ExternalDataMode::kInline) {
      std::optional<uint64_t> external_bytes = ExternalBytes(error);
      if (!external_bytes) return false;
      bool fits = *external_bytes + node_bytes < kInlineLimit;
      // Checked before anything is read: tensors may name one range many times.
      if (mode == ExternalDataMode::kInline && !fits) {
        *error = Described() + ": its initializers' external data (" + std::to_string(*external_bytes) +
                 " bytes) cannot be inlined: a model passes protobuf's 2 GiB limit; use --external-data copy";
        return false;
      }
      mode = fits ? ExternalDataMode::kInline : ExternalDataMode::kCopy;
    }
    std::vector<std::string> boundary_values = boundary_.inputs;
    boundary_values.insert(boundary_values.end(), boundary_.outputs.begin(), boundary_.outputs.end());
    std::vector<std::optional<std::string_view>> types = types_.Find(boundary_values);
    std::vector<std::pair<uint32_t, std::string_view>> typed;  // (graph field, ValueInfoProto)
    for (size_t value = 0; value < boundary_values.size(); ++value) {
      if (!types[value]) {
        *error = "no type for value '" + boundary_values[value] + "'" +
                 (types_.inference_error().empty() ? "" : " (" + types_.inference_error() + ")");
        return false;
      }
      typed.emplace_back(value < boundary_.inputs.size() ? kGraphInput : kGraphOutput, *types[value]);
    }
    // The graph's fields in order, as views of the source's bytes or of the
    // tensors rewritten for their external data: written straight to the
    // output file (WriteModel), never assembled whole in memory.
    for (int index : selected_) graph_fields_.emplace_back(kGraphNode, file_.model.nodes[index].raw);
    graph_fields_.emplace_back(kGraphName, "hiertag_extract");
    for (const std::string& name : needed_initializers_) {
      const OnnxInitializer& initializer = *initializers_.at(name);
      if (!initializer.external) {
        graph_fields_.emplace_back(kGraphInitializer, initializer.raw);
        continue;
      }
      std::optional<std::string> tensor = TensorForOutput(initializer, mode, error);
      if (!tensor) return false;
      graph_fields_.emplace_back(kGraphInitializer, rewritten_tensors_.emplace_back(std::move(*tensor)));
    }
    for (const auto& [field, type] : typed) graph_fields_.emplace_back(field, type);
    graph_size_ = 0;
    for (const auto& [field, payload] : graph_fields_) graph_size_ += wire::LengthDelimitedSize(field, payload.size());
    return true;
  }

 public:
  // The output model, written to `out` (after Run): the source's ModelProto fields with
  // the new graph, a module table restricted to the extracted module, its
  // descendants and its ancestors (entries as the source wrote them,
  // folded_into kept to the initializers and Constants copied), and the
  // rewrites that lie within the module.
  void WriteModel(std::ostream& out) const {
    std::string entries;  // the model's metadata_props
    for (const auto& [key, value] : MetadataEntries()) AppendStringEntry(&entries, kModelMetadataProps, key, value);
    wire::Reader reader(file_.model.bytes());
    wire::Field field;
    bool entries_written = false;
    auto write = [&out](std::string_view bytes) {
      out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    };
    while (!reader.done() && reader.Next(&field)) {
      if (!entries_written && field.number > kModelMetadataProps) {
        write(entries);
        entries_written = true;
      }
      if (field.number == kModelGraph) {
        std::string header;
        wire::AppendLengthDelimitedHeader(&header, kModelGraph, graph_size_);
        write(header);
        for (const auto& [number, payload] : graph_fields_) {
          header.clear();
          wire::AppendLengthDelimitedHeader(&header, number, payload.size());
          write(header);
          write(payload);
        }
      } else if (field.number != kModelMetadataProps) {
        write(field.raw);
      }
    }
    if (!entries_written) write(entries);
  }

 private:
  // The bytes of the initializers the output keeps outside, as they are in the source.
  std::optional<uint64_t> ExternalBytes(std::string* error) const {
    uint64_t total = 0;
    for (const std::string& name : needed_initializers_) {
      const OnnxInitializer& initializer = *initializers_.at(name);
      if (!initializer.external) continue;
      std::optional<uint64_t> size = ExternalDataSize(file_.model.directory, *initializer.external, error);
      if (!size) {
        *error = "initializer '" + name + "': " + *error;
        return std::nullopt;
      }
      total += *size;
    }
    return total;
  }

  // An initializer as the output holds it: as in the source when its data is
  // inline; else its data inline, copied into the output's data file, or
  // referenced where it lies (from the output's folder).
  std::optional<std::string> TensorForOutput(const OnnxInitializer& initializer, ExternalDataMode mode,
                                             std::string* error) {
    if (!initializer.external) return std::string(initializer.raw);
    const ExternalData& where = *initializer.external;
    auto fail = [&](const std::string& reason) -> std::optional<std::string> {
      *error = "initializer '" + initializer.name + "': " + reason;
      return std::nullopt;
    };
    std::string reason;
    if (mode == ExternalDataMode::kInline) {
      std::optional<std::string> data = ReadExternalData(file_.model.directory, where, initializer.bytes, &reason);
      if (!data) return fail(reason);
      return TensorWithInlineData(initializer.raw, *data);
    }
    std::optional<uint64_t> length = ExternalDataSize(file_.model.directory, where, &reason);
    if (!length) return fail(reason);
    namespace fs = std::filesystem;
    fs::path source_folder = file_.model.directory.empty() ? fs::path(".") : fs::path(file_.model.directory);
    if (mode == ExternalDataMode::kCopy) {
      // A range several initializers hold (tied weights saved once) is copied once.
      fs::path source = (source_folder / where.location).lexically_normal();
      auto [copy, first] = copied_ranges_.try_emplace({source.string(), where.offset, *length}, data_file_size_);
      if (first) {
        data_copies_.push_back({source, where.offset, *length});
        data_file_size_ += *length;
      }
      return TensorWithExternalData(initializer.raw, {data_file_name(), copy->second, *length});
    }
    std::error_code status;
    fs::path target_folder = fs::weakly_canonical(fs::absolute(output_path_).parent_path(), status);
    fs::path relative = fs::weakly_canonical(source_folder / where.location, status).lexically_relative(target_folder);
    if (status || relative.empty() || UnsafeLocationReason(relative.string())) {
      return fail("its data file '" + where.location +
                  "' is not inside the output's folder; write it with "
                  "--external-data copy or inline");
    }
    return TensorWithExternalData(initializer.raw, {relative.string(), where.offset, where.length});
  }

  // The output's metadata_props: the module table, the rewrites within the
  // module, the format version (see WriteModel).
  std::vector<std::pair<std::string_view, std::string>> MetadataEntries() const {
    std::set<std::string> copied(needed_initializers_.begin(), needed_initializers_.end());
    for (int index : selected_) {
      const OnnxNode& node = file_.model.nodes[index];
      if (node.op_type == "Constant") copied.insert(node.outputs.begin(), node.outputs.end());
    }
    Json table = Json::object();
    for (const auto& [tag, entry] : file_.table.items()) {
      if (!IsTagAncestorOrSelf(tag_, tag) && !IsTagAncestorOrSelf(tag, tag_)) continue;
      Json kept = entry;
      if (const Json* folded_into = FindMember(entry, "folded_into"); folded_into && folded_into->is_array()) {
        Json names = Json::array();
        for (const Json& name : *folded_into) {
          if (name.is_string() && copied.count(name.get<std::string>())) names.push_back(name);
        }
        kept.erase("folded_into");
        if (!names.empty()) kept["folded_into"] = std::move(names);
      }
      AppendNewMember(table, tag, std::move(kept));  // the source's keys, each once
    }
    std::vector<std::pair<std::string_view, std::string>> entries{{kModuleTableKey, WriteJson(table)}};
    if (std::optional<Json> rewrites = RewritesWithin()) entries.emplace_back(kRewritesKey, WriteJson(*rewrites));
    auto version = file_.model.metadata.find(std::string(kFormatVersionKey));
    entries.emplace_back(kFormatVersionKey,
                         version == file_.model.metadata.end() ? std::string(kFormatVersion) : version->second);
    return entries;
  }

  // The source's hiertag.rewrites records whose modules all lie within the
  // extracted module (CheckRewrites refused any that cross its boundary), or
  // std::nullopt when there are none.
  std::optional<Json> RewritesWithin() const {
    auto text = file_.model.metadata.find(std::string(kRewritesKey));
    std::string error;
    std::optional<Json> records = text == file_.model.metadata.end() ? std::nullopt : ParseJson(text->second, &error);
    if (!records) return std::nullopt;
    if (!records->is_array()) return std::nullopt;
    Json within = Json::array();
    for (const Json& record : *records) {
      const Json* modules = FindMember(record, "modules");
      std::optional<std::vector<std::string>> tags = modules ? ReadStrings(*modules) : std::nullopt;
      if (tags && !tags->empty() && std::all_of(tags->begin(), tags->end(), [&](const std::string& text) {
            std::optional<CallRef> ref = ParseCallRef(text);
            return ref && IsTagAncestorOrSelf(tag_, ref->tag);
          })) {
        within.push_back(record);
      }
    }
    if (within.empty()) return std::nullopt;
    return within;
  }

  // A protobuf message cannot pass 2 GiB; a margin is left for the graph's own bytes.
  static constexpr uint64_t kInlineLimit = (uint64_t{2} << 30) - (uint64_t{64} << 20);
  // At most a field's key and length varints (a key of a field number below 2^11, a length below 2^35).
  static constexpr size_t kFieldHeaderBytes = 7;

  const TaggedFile& file_;
  std::string output_path_;
  ExternalDataMode mode_;
  std::vector<DataCopy> data_copies_;
  uint64_t data_file_size_ = 0;
  std::map<std::tuple<std::string, uint64_t, uint64_t>, uint64_t>
      copied_ranges_;  // (file, offset, length) -> offset in OUT.data
  std::string tag_;
  std::optional<int64_t> call_;
  ModuleCall target_;
  const ModuleEntry& entry_;
  ValueTypes types_;
  std::map<std::string, const OnnxInitializer*> initializers_;
  std::set<int> selected_;                                           // ordered: node indices are the source's order
  std::vector<std::pair<uint32_t, std::string_view>> graph_fields_;  // the output graph's, in order
  std::deque<std::string> rewritten_tensors_;  // initializers whose external data the output holds otherwise
  uint64_t graph_size_ = 0;
  ModuleBoundary boundary_;
  std::vector<std::string> needed_initializers_;
};

std::string DefaultOutputPath(const std::string& path, const std::string& tag, std::optional<int64_t> call) {
  std::string stem = std::filesystem::path(path).replace_extension().string();
  std::string suffix;
  for (char c : tag.substr(1)) suffix.push_back(std::isalnum(static_cast<unsigned char>(c)) || c == '.' ? c : '_');
  if (call) suffix += ".call" + std::to_string(*call);
  return stem + "." + suffix + ".onnx";
}

// Why writing `output` would destroy one of extract's inputs, or std::nullopt:
// the model at `path`, or an external data file it names. Two paths are one
// file when they are one device and inode (std::filesystem::equivalent): the
// same path, or a symbolic or hard link to it.
std::optional<std::string> OverwrittenInput(const std::string& output, const std::string& path,
                                            const OnnxModel& model) {
  namespace fs = std::filesystem;
  std::error_code status;
  if (!fs::exists(output, status)) return std::nullopt;
  auto same = [](const fs::path& a, const fs::path& b) {
    std::error_code ignored;
    return fs::equivalent(a, b, ignored);
  };
  const std::string refusal = ": refusing to overwrite it";
  if (same(output, path)) {
    bool spelled_alike =
        fs::absolute(output, status).lexically_normal() == fs::absolute(path, status).lexically_normal();
    return "output '" + output + "' is the input '" + path + "'" +
           (spelled_alike ? "" : " (the same file through a link)") + refusal;
  }
  fs::path folder = model.directory.empty() ? fs::path(".") : fs::path(model.directory);
  for (const OnnxGraph& graph : model.graphs) {
    for (const OnnxInitializer& initializer : graph.initializers) {
      if (!initializer.external || UnsafeLocationReason(initializer.external->location)) continue;
      const std::string& location = initializer.external->location;
      if (same(output, folder / location)) {
        return "output '" + output + "' is the external data file '" + location + "' of the input '" + path + "'" +
               refusal;
      }
    }
  }
  return std::nullopt;
}

// Writes next to the target and renames, so no half-written file is left as OUT.
bool WriteFileAtomically(const std::string& path, const std::function<void(std::ostream&)>& write, std::string* error) {
  std::string temporary = path + ".hiertag-partial";
  {
    std::ofstream file(temporary, std::ios::binary | std::ios::trunc);
    if (file) write(file);
    file.close();
    if (!file) {
      std::remove(temporary.c_str());
      *error = "cannot write " + path;
      return false;
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    std::remove(temporary.c_str());
    *error = "cannot write " + path;
    return false;
  }
  return true;
}

}  // namespace

// Streams the copies into `path`; false with a reason.
bool WriteDataFile(const std::string& path, const std::vector<DataCopy>& copies, std::string* error) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  std::vector<char> buffer(1 << 20);
  for (const DataCopy& copy : copies) {
    std::ifstream source(copy.source, std::ios::binary);
    source.seekg(static_cast<std::streamoff>(copy.offset));
    for (uint64_t left = copy.length; left > 0 && source && file;) {
      std::streamsize chunk = static_cast<std::streamsize>(std::min<uint64_t>(left, buffer.size()));
      source.read(buffer.data(), chunk);
      file.write(buffer.data(), source.gcount());
      left -= static_cast<uint64_t>(source.gcount());
      if (source.gcount() == 0) break;
    }
    if (!source || !file) {
      *error = "cannot copy external data from " + copy.source.string() + " to " + path;
      return false;
    }
  }
  return true;
}

std::optional<Json> Extract(const TaggedFile& file, const std::string& path, const std::string& requested,
                            const ExtractOptions& options, ExtractError* failure) {
  const std::optional<int64_t>& call = options.call;
  auto fail = [failure](ExtractError::Kind kind, std::string line) -> std::optional<Json> {
    *failure = {kind, std::move(line)};
    return std::nullopt;
  };
  using Kind = ExtractError::Kind;
  const ModuleEntry* module = file.ResolveModule(requested);
  if (module == nullptr) {
    return fail(Kind::kUnknownModule,
                path + ": unknown module '" + requested + "'; closest: " + ClosestTags(file, requested));
  }
  std::string error;
  ValueTypeMap supplied_types;
  if (!options.value_types_path.empty()) {
    std::optional<OnnxModel> types_model = OnnxModel::Load(options.value_types_path, &error);
    if (!types_model) return fail(Kind::kBadInput, options.value_types_path + ": " + error);
    supplied_types = RecordedValueTypes(*types_model);
  }
  const std::string tag = module->tag;
  std::string target = options.out_path.empty() ? DefaultOutputPath(path, tag, call) : options.out_path;
  if (std::optional<std::string> refused = OverwrittenInput(target, path, file.model)) {
    return fail(Kind::kOverwritesInput, *refused);
  }
  Extractor extractor(file, tag, call, target, options.external_data, std::move(supplied_types), options.infer_types);
  if (!extractor.Run(&error)) return fail(Kind::kRefused, path + ": " + error);
  // The data file first, then the model that names it: a model is never
  // written that references a file not there.
  std::string data_path;
  if (!extractor.data_copies().empty()) {
    data_path = (std::filesystem::path(target).parent_path() / extractor.data_file_name()).string();
    if (std::optional<std::string> refused = OverwrittenInput(data_path, path, file.model)) {
      return fail(Kind::kOverwritesInput, *refused);
    }
    std::string partial = data_path + ".hiertag-partial";
    if (!WriteDataFile(partial, extractor.data_copies(), &error) ||
        std::rename(partial.c_str(), data_path.c_str()) != 0) {
      std::remove(partial.c_str());
      return fail(Kind::kWriteFailed, path + ": " + (error.empty() ? "cannot write " + data_path : error));
    }
  }
  if (!WriteFileAtomically(target, [&extractor](std::ostream& out) { extractor.WriteModel(out); }, &error)) {
    if (!data_path.empty()) std::remove(data_path.c_str());
    return fail(Kind::kWriteFailed, path + ": " + error);
  }
  Json result = {{"file", path}, {"module", tag}};
  if (call) result["call"] = *call;
  result["output"] = target;
  result["nodes"] = extractor.node_count();
  result["inputs"] = extractor.inputs();
  result["outputs"] = extractor.outputs();
  result["initializers"] = extractor.initializer_count();
  if (!data_path.empty()) result["data_file"] = data_path;
  return result;
}

std::string ExtractSummary(const Json& result) {
  std::string summary = result["output"].get<std::string>() + ": " + DisplayTag(result["module"].get<std::string>());
  if (result.contains("call")) summary += " call " + std::to_string(result["call"].get<int64_t>());
  summary += ": " + std::to_string(result["nodes"].get<size_t>()) + " nodes, " +
             std::to_string(result["inputs"].size()) + " inputs, " + std::to_string(result["outputs"].size()) +
             " outputs, " + std::to_string(result["initializers"].get<size_t>()) + " initializers";
  if (result.contains("data_file")) summary += " (data in " + result["data_file"].get<std::string>() + ")";
  return summary;
}

}  // namespace hiertag
