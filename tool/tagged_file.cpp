// A tagged file: model + module table + rewrites, with one-line errors for bad input.
#include "tagged_file.h"

#include <set>

#include "hiertag/tag_format.h"

namespace hiertag {
namespace {

// Ordinals beyond this are no call count of a real export, and keep doubles exact.
constexpr int64_t kMaxOrdinal = int64_t{1} << 40;

ModuleEntry ReadEntry(const std::string& tag, const Json& entry, const Json& path, const Json& class_name) {
  ModuleEntry module;
  module.tag = tag;
  module.path = path.text;
  module.class_name = class_name.text;
  if (const Json* calls = entry.Find("calls")) {
    std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*calls);
    if (ordinals && !ordinals->empty()) module.call_count = static_cast<int64_t>(ordinals->size());
  }
  if (const Json* parent_calls = entry.Find("parent_calls")) {
    std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*parent_calls);
    if (ordinals && static_cast<int64_t>(ordinals->size()) == module.call_count) module.parent_calls = *ordinals;
  }
  if (const Json* folded_into = entry.Find("folded_into")) {
    module.folded_into = ReadStrings(*folded_into).value_or(std::vector<std::string>{});
  }
  if (const Json* ran = entry.Find("ran")) module.ran = !(ran->kind == Json::Kind::kBool && !ran->boolean);
  return module;
}

std::optional<Rewrite> ReadRewrite(const Json& record) {
  const Json* pass = record.Find("pass");
  const Json* kind = record.Find("kind");
  const Json* modules = record.Find("modules");
  const Json* node = record.Find("node");
  if (pass == nullptr || pass->kind != Json::Kind::kString || kind == nullptr ||
      kind->kind != Json::Kind::kString || modules == nullptr || node == nullptr ||
      node->kind != Json::Kind::kString) {
    return std::nullopt;
  }
  std::optional<std::vector<std::string>> tags = ReadStrings(*modules);
  if (!tags) return std::nullopt;
  return Rewrite{pass->text, kind->text, std::move(*tags), node->text};
}

void ReadRewrites(TaggedFile* file) {
  auto text = file->model.metadata.find(std::string(kRewritesKey));
  std::string error;
  std::optional<Json> records =
      text == file->model.metadata.end() ? std::nullopt : ParseJson(text->second, &error);
  std::set<std::string> fused_nodes;
  if (records) {
    for (const Json& record : records->items) {
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
    file->rewrites.push_back({pass == node.metadata.end() ? "an export pass" : pass->second, "fused",
                              std::move(*spans), node.name});
  }
}

}  // namespace

const ModuleEntry* TaggedFile::FindModule(std::string_view tag) const {
  auto found = entry_of_tag.find(tag);
  return found == entry_of_tag.end() ? nullptr : &modules[found->second];
}

std::optional<TaggedFile> LoadTaggedFile(const std::string& path, std::string* error) {
  std::string reason;
  std::optional<OnnxModel> model = OnnxModel::Load(path, &reason);
  if (!model) {
    *error = path + ": " + reason;
    return std::nullopt;
  }
  auto table_text = model->metadata.find(std::string(kModuleTableKey));
  if (table_text == model->metadata.end()) {
    *error = path + ": not tagged by hiertag (no " + std::string(kModuleTableKey) +
             " in the model's metadata_props)";
    return std::nullopt;
  }
  std::optional<Json> table = ParseJson(table_text->second, &reason);
  if (!table || table->kind != Json::Kind::kObject) {
    *error = path + ": the module table is not a JSON object" + (table ? "" : " (" + reason + ")");
    return std::nullopt;
  }
  TaggedFile file{std::move(*model), std::move(*table), {}, {}, {}};
  for (const auto& [tag, entry] : file.table.members) {
    const Json* module_path = entry.Find("path");
    const Json* class_name = entry.Find("class");
    if (module_path != nullptr && module_path->kind == Json::Kind::kString && class_name != nullptr &&
        class_name->kind == Json::Kind::kString) {
      file.entry_of_tag.emplace(tag, file.modules.size());
      file.modules.push_back(ReadEntry(tag, entry, *module_path, *class_name));
    }
  }
  ReadRewrites(&file);
  return file;
}

const std::string* NodeTag(const OnnxNode& node) {
  auto found = node.metadata.find(std::string(kHierarchyTagKey));
  return found == node.metadata.end() ? nullptr : &found->second;
}

std::string DescribeNode(const OnnxNode& node) {
  return "'" + node.name + "' (" + node.op_type + ")";
}

std::optional<std::vector<std::string>> NodeTagList(const OnnxNode& node, std::string_view key) {
  auto found = node.metadata.find(std::string(key));
  if (found == node.metadata.end()) return std::nullopt;
  std::string error;
  std::optional<Json> list = ParseJson(found->second, &error);
  return list ? ReadStrings(*list) : std::nullopt;
}

std::optional<std::vector<std::string>> ReadStrings(const Json& value) {
  if (value.kind != Json::Kind::kArray) return std::nullopt;
  std::vector<std::string> strings;
  for (const Json& item : value.items) {
    if (item.kind != Json::Kind::kString) return std::nullopt;
    strings.push_back(item.text);
  }
  return strings;
}

std::optional<std::vector<int64_t>> ReadOrdinals(const Json& value) {
  if (value.kind != Json::Kind::kArray) return std::nullopt;
  std::vector<int64_t> ordinals;
  for (const Json& item : value.items) {
    if (item.kind != Json::Kind::kNumber || item.number < 0 || item.number > kMaxOrdinal ||
        item.number != static_cast<double>(static_cast<int64_t>(item.number))) {
      return std::nullopt;
    }
    ordinals.push_back(static_cast<int64_t>(item.number));
  }
  return ordinals;
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
