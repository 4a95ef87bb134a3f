// Tagged entries: the module table and the rewrite records, to and from JSON.
#include "hiertag/core/format/tagged_entries.h"

#include <algorithm>

namespace hiertag {

Json ModuleTableEntryJson(const TableEntry& entry) {
  Json json = {{"path", entry.path}, {"class", entry.class_name}};
  if (!entry.calls.empty() && entry.calls != std::vector<int64_t>{0}) json["calls"] = entry.calls;
  if (std::any_of(entry.parent_calls.begin(), entry.parent_calls.end(), [](int64_t call) { return call != 0; })) {
    json["parent_calls"] = entry.parent_calls;
  }
  if (!entry.ran) json["ran"] = false;
  if (!entry.folded_into.empty()) json["folded_into"] = entry.folded_into;
  return json;
}

std::string WriteModuleTable(const std::vector<TableEntry>& entries) {
  Json table = Json::object();
  table.get_ref<Json::object_t&>().reserve(entries.size());
  JsonObjectWriter writer(table);  // a tag listed twice keeps its first place and its last entry
  for (const TableEntry& entry : entries) writer.Set(entry.tag, ModuleTableEntryJson(entry));
  return WriteJson(table);
}

std::optional<TableEntry> ReadModuleTableEntry(const std::string& tag, const Json& entry) {
  const Json* path = FindMember(entry, "path");
  const Json* class_name = FindMember(entry, "class");
  if (path == nullptr || !path->is_string() || class_name == nullptr || !class_name->is_string()) {
    return std::nullopt;
  }
  TableEntry read;
  read.tag = tag;
  read.path = path->get<std::string>();
  read.class_name = class_name->get<std::string>();
  if (const Json* calls = FindMember(entry, "calls")) {
    std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*calls);
    if (ordinals && !ordinals->empty()) read.calls = std::move(*ordinals);
  }
  if (const Json* parent_calls = FindMember(entry, "parent_calls")) {
    std::optional<std::vector<int64_t>> ordinals = ReadOrdinals(*parent_calls);
    if (ordinals && static_cast<int64_t>(ordinals->size()) == read.call_count()) read.parent_calls = *ordinals;
  }
  if (const Json* folded_into = FindMember(entry, "folded_into")) {
    read.folded_into = ReadStrings(*folded_into).value_or(std::vector<std::string>{});
  }
  if (const Json* ran = FindMember(entry, "ran")) read.ran = !(ran->is_boolean() && !ran->get<bool>());
  return read;
}

Json RewriteJson(const RewriteEntry& record) {
  Json json = {{"pass", record.pass}, {"kind", record.kind}, {"modules", record.modules}, {"node", record.node}};
  if (!record.cause.empty()) json["cause"] = record.cause;
  if (!record.reason.empty()) json["reason"] = record.reason;
  return json;
}

std::string WriteRewrites(const std::vector<RewriteEntry>& records) {
  Json list = Json::array();
  for (const RewriteEntry& record : records) list.push_back(RewriteJson(record));
  return WriteJson(list);
}

std::optional<RewriteEntry> ReadRewrite(const Json& record) {
  const Json* pass = FindMember(record, "pass");
  const Json* kind = FindMember(record, "kind");
  const Json* modules = FindMember(record, "modules");
  const Json* node = FindMember(record, "node");
  if (pass == nullptr || !pass->is_string() || kind == nullptr || !kind->is_string() || modules == nullptr ||
      node == nullptr || !node->is_string()) {
    return std::nullopt;
  }
  std::optional<std::vector<std::string>> tags = ReadStrings(*modules);
  if (!tags) return std::nullopt;
  auto optional_text = [&](const char* key) {
    const Json* text = FindMember(record, key);
    return text != nullptr && text->is_string() ? text->get<std::string>() : std::string();
  };
  return RewriteEntry{pass->get<std::string>(), kind->get<std::string>(), std::move(*tags),
                      node->get<std::string>(), optional_text("reason"),  optional_text("cause")};
}

}  // namespace hiertag
