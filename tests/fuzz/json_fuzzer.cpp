// Fuzz target: the JSON codec (ParseJsonDocument with its nesting cap and
// repeated-key check) and the readers of hiertag's entries on any text: the
// module table, rewrite records, tag lists and call ordinals. Properties: what
// parses writes back to text that parses to the same value; a module table
// entry read, written and read again keeps its fields.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tagged_entries.h"

namespace hiertag::fuzz {
namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz: JSON property broken: %s\n", what);
  std::abort();
}

bool SameEntry(const TableEntry& a, const TableEntry& b) {
  auto normal = [](const TableEntry& entry) {
    std::vector<int64_t> parent_calls = entry.parent_calls;
    if (std::all_of(parent_calls.begin(), parent_calls.end(), [](int64_t call) { return call == 0; })) {
      parent_calls.clear();
    }
    return parent_calls;
  };
  return a.tag == b.tag && a.path == b.path && a.class_name == b.class_name && a.call_count() == b.call_count() &&
         (a.calls.empty() || b.calls.empty() || a.calls == b.calls) && normal(a) == normal(b) && a.ran == b.ran &&
         a.folded_into == b.folded_into;
}

void CheckTable(const Json& table) {
  std::vector<TableEntry> entries;
  for (const auto& [tag, entry] : table.items()) {
    if (std::optional<TableEntry> read = ReadModuleTableEntry(tag, entry)) entries.push_back(std::move(*read));
  }
  std::string error;
  std::optional<Json> written = ParseJson(WriteModuleTable(entries), &error);
  Require(written && written->is_object() && written->size() == entries.size(), "a written table parses");
  size_t i = 0;
  for (const auto& [tag, entry] : written->items()) {
    std::optional<TableEntry> again = ReadModuleTableEntry(tag, entry);
    Require(again && SameEntry(*again, entries[i++]), "a table entry survives writing and reading");
  }
}

void CheckRewrites(const Json& records) {
  std::vector<RewriteEntry> read;
  for (const Json& record : records) {
    if (std::optional<RewriteEntry> rewrite = ReadRewrite(record)) read.push_back(std::move(*rewrite));
  }
  std::string error;
  std::optional<Json> written = ParseJson(WriteRewrites(read), &error);
  Require(written && written->is_array() && written->size() == read.size(), "written rewrites parse");
  for (size_t i = 0; i < read.size(); ++i) {
    std::optional<RewriteEntry> again = ReadRewrite((*written)[i]);
    Require(again && again->pass == read[i].pass && again->kind == read[i].kind && again->modules == read[i].modules &&
                again->node == read[i].node,
            "a rewrite record survives writing and reading");
  }
}

}  // namespace
}  // namespace hiertag::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hiertag;
  std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string error;
  std::optional<ParsedJson> parsed = ParseJsonDocument(text, &error);
  ReadStringList(text);
  if (!parsed) return 0;
  const Json& value = parsed->value;
  std::optional<Json> again = ParseJson(WriteJson(value), &error);
  fuzz::Require(again.has_value(), "written JSON parses");
  fuzz::Require(*again == value, "written JSON parses to the same value");
  ReadStrings(value);
  ReadOrdinals(value);
  if (value.is_object()) fuzz::CheckTable(value);
  if (value.is_array()) fuzz::CheckRewrites(value);
  return 0;
}
