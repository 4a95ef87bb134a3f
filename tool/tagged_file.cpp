// A tagged file: model + module table, with one-line errors for bad input.
#include "tagged_file.h"

#include "hiertag/tag_format.h"

namespace hiertag {

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
  TaggedFile file{std::move(*model), std::move(*table), {}};
  for (const auto& [tag, entry] : file.table.members) {
    const Json* module_path = entry.Find("path");
    const Json* class_name = entry.Find("class");
    if (module_path != nullptr && module_path->kind == Json::Kind::kString && class_name != nullptr &&
        class_name->kind == Json::Kind::kString) {
      file.modules.push_back({tag, module_path->text, class_name->text});
    }
  }
  return file;
}

const std::string* NodeTag(const OnnxNode& node) {
  auto found = node.metadata.find(std::string(kHierarchyTagKey));
  return found == node.metadata.end() ? nullptr : &found->second;
}

std::string DescribeNode(const OnnxNode& node) {
  return "'" + node.name + "' (" + node.op_type + ")";
}

}  // namespace hiertag
