// A tagged file: model + module table + rewrites, with one-line errors for bad input.
#include "hiertag/core/file/tagged_file.h"

#include <set>

#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

void ReadRewrites(TaggedFile* file) {
  auto text = file->model.metadata.find(std::string(kRewritesKey));
  std::string error;
  std::optional<Json> records = text == file->model.metadata.end() ? std::nullopt : ParseJson(text->second, &error);
  std::set<std::string, std::less<>> fused_nodes;
  if (records && records->is_array()) {
    for (const Json& record : *records) {
      std::optional<Rewrite> rewrite = ReadRewrite(record);
      if (!rewrite) continue;
      if (rewrite->kind == "fused") fused_nodes.insert(rewrite->node);
      file->rewrites.push_back(std::move(*rewrite));
    }
  }
  for (const OnnxNode& node : file->model.nodes) {
    std::optional<std::vector<std::string>> spans = NodeTagList(node, kSpansKey);
    if (!spans || fused_nodes.count(node.name)) continue;
    auto pass = node.metadata.find(std::string(kRewriteKey));
    // A node without the pass's name is reported by validate; the rewrite still stands.
    file->rewrites.push_back({pass == node.metadata.end() ? "an export pass" : std::string(pass->second), "fused",
                              std::move(*spans), std::string(node.name)});
  }
}

}  // namespace

const ModuleEntry* TaggedFile::FindModule(std::string_view tag) const {
  auto found = entry_of_tag.find(tag);
  return found == entry_of_tag.end() ? nullptr : &modules[found->second];
}

const ModuleEntry* TaggedFile::ResolveModule(std::string_view tag) const {
  if (const ModuleEntry* exact = FindModule(tag)) return exact;
  std::optional<std::string> canonical = CanonicalTag(tag);
  if (!canonical) return nullptr;
  const ModuleEntry* found = nullptr;
  for (const ModuleEntry& entry : modules) {
    if (CanonicalTag(entry.tag) != canonical) continue;
    if (found != nullptr) return nullptr;
    found = &entry;
  }
  return found;
}

std::string DisplayTag(std::string_view tag) {
  std::optional<std::string> canonical = CanonicalTag(tag);
  return canonical ? *canonical : std::string(tag);
}

namespace {

// The tagged file of a read model; `name` starts its errors (the path).
std::optional<TaggedFile> TaggedFileOf(std::optional<OnnxModel> model, const std::string& name,
                                       const std::string& reason, std::string* error) {
  if (!model) {
    *error = name + ": " + reason;
    return std::nullopt;
  }
  auto table_text = model->metadata.find(std::string(kModuleTableKey));
  if (table_text == model->metadata.end()) {
    *error = name + ": not tagged by hiertag (no " + std::string(kModuleTableKey) + " in the model's metadata_props)";
    return std::nullopt;
  }
  std::string table_error;
  std::optional<ParsedJson> table = ParseJsonDocument(table_text->second, &table_error);
  if (!table || !table->value.is_object()) {
    *error = name + ": the module table is not a JSON object" + (table ? "" : " (" + table_error + ")");
    return std::nullopt;
  }
  TaggedFile file{std::move(*model), std::move(table->value), std::move(table->repeated_top_level_keys), {}, {}, {}};
  for (const auto& [tag, entry] : file.table.items()) {
    if (std::optional<TableEntry> read = ReadModuleTableEntry(tag, entry)) {
      file.entry_of_tag.emplace(tag, file.modules.size());
      file.modules.push_back(std::move(*read));
    }
  }
  ReadRewrites(&file);
  return file;
}

}  // namespace

std::optional<TaggedFile> LoadTaggedFile(const std::string& path, std::string* error) {
  std::string reason;
  std::optional<OnnxModel> model = OnnxModel::Load(path, &reason);
  return TaggedFileOf(std::move(model), path, reason, error);
}

std::optional<TaggedFile> ParseTaggedFile(std::string bytes, const std::string& name, std::string* error) {
  std::string reason;
  std::optional<OnnxModel> model = OnnxModel::Parse(std::move(bytes), &reason);
  return TaggedFileOf(std::move(model), name, reason, error);
}

std::optional<TaggedFile> ParseTaggedFile(std::shared_ptr<const void> owner, std::string_view bytes,
                                          const std::string& name, std::string* error) {
  std::string reason;
  std::optional<OnnxModel> model = OnnxModel::Parse(std::move(owner), bytes, &reason);
  return TaggedFileOf(std::move(model), name, reason, error);
}

const std::string_view* NodeTag(const OnnxNode& node) {
  auto found = node.metadata.find(std::string(kHierarchyTagKey));
  return found == node.metadata.end() ? nullptr : &found->second;
}

std::string DescribeNode(const OnnxNode& node) {
  return "'" + std::string(node.name) + "' (" + std::string(node.op_type) + ")";
}

std::optional<std::vector<std::string>> NodeTagList(const OnnxNode& node, std::string_view key) {
  auto found = node.metadata.find(std::string(key));
  if (found == node.metadata.end()) return std::nullopt;
  return ReadStringList(found->second);
}

std::optional<int64_t> ParseOrdinal(std::string_view text) {
  if (text.empty() || text.size() > 12) return std::nullopt;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace hiertag
