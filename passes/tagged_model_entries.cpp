// Tagged model entries: node metadata, the module table and the rewrite records.
#include "hiertag/passes/tagged_model_entries.h"

#include <torch/csrc/onnx/onnx.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/format/tagged_entries.h"

namespace hiertag {
namespace {

std::string NodeName(torch::jit::Node* node) {
  c10::Symbol name = c10::Symbol::attr(::torch::onnx::kOnnxNodeNameAttribute);
  return node->hasAttribute(name) ? node->s(name) : "";
}

const char* KindName(RewriteRecord::Kind kind) {
  switch (kind) {
    case RewriteRecord::Kind::kRemoved:
      return "removed";
    case RewriteRecord::Kind::kFolded:
      return "folded";
    case RewriteRecord::Kind::kRewired:
      return "rewired";
  }
  return "?";
}

}  // namespace

std::string_view TaggedModelEntries::Keep(std::string_view text) {
  if (text.empty()) return {};
  char* kept = static_cast<char*>(texts->allocate(text.size(), 1));
  std::memcpy(kept, text.data(), text.size());
  return {kept, text.size()};
}

TaggedModelEntries DescribeTaggedModel(const HierarchyTagging& tagging, CallTags& call_tags, const ModuleTable& modules,
                                       const torch::jit::Graph& graph) {
  TaggedModelEntries entries;
  std::vector<RewriteEntry> rewrites;
  // "TAG", or "TAG#K" for one call of a tag called more than once.
  auto refs_of = [&](const std::vector<TagRef>& refs) {
    std::vector<std::string> texts;
    for (const TagRef& ref : refs) {
      bool one_call = ref.call != TagRef::kEveryCall && tagging.CallCount(ref.tag) > 1;
      texts.push_back(
          FormatCallRef(call_tags.Tag(ref.tag), one_call ? std::optional<int64_t>(ref.call) : std::nullopt));
    }
    // Sorted, each once (a constant every layer reads lists hundreds: no search per text).
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    return texts;
  };
  entries.texts = std::make_unique<std::pmr::monotonic_buffer_resource>(MappedMemory());
  entries.nodes.reserve(tagging.nodes.size());
  std::vector<std::string_view> kept_tags(call_tags.size());  // per call tag: its text in entries.texts, once kept
  // Per op type, its name in entries.texts, once kept: torch's interned name
  // can move (a short one lives inside a string of a table that grows).
  std::unordered_map<c10::unique_t, std::string_view> kept_op_types;
  for (const TaggedNode& tagged : tagging.nodes) {
    // The list of outputs made in the arena (a pmr list keeps its resource when assigned to).
    SerializedNodeTag entry{{}, {}, {}, {}, std::pmr::vector<std::string_view>(entries.texts.get())};
    entry.outputs.reserve(tagged.node->outputs().size());
    for (const torch::jit::Value* output : tagged.node->outputs()) {
      entry.outputs.push_back(entries.Keep(output->debugName()));
    }
    auto [op_type, fresh] = kept_op_types.try_emplace(static_cast<c10::unique_t>(tagged.node->kind()));
    if (fresh) op_type->second = entries.Keep(tagged.node->kind().toUnqualString());
    entry.op_type = op_type->second;
    if (static_cast<size_t>(tagged.tag) >= kept_tags.size()) kept_tags.resize(tagged.tag + 1);
    std::string_view& tag = kept_tags[tagged.tag];
    if (tag.empty()) tag = entries.Keep(call_tags.Tag(tagged.tag));
    entry.tag = tag;
    entry.shared_with = refs_of(tagged.shared_with());
    if (tagging.CallCount(tagged.tag) > 1) entry.more.emplace_back(kCallKey, std::to_string(tagged.call));
    std::vector<std::string> spans = refs_of(tagged.spans());
    if (spans.size() > 1) {
      entry.more.emplace_back(kSpansKey, WriteStringList(spans));
      entry.more.emplace_back(kRewriteKey, tagged.rewrite());
      rewrites.push_back({tagged.rewrite(), "fused", std::move(spans), NodeName(tagged.node)});
    }
    entries.nodes.push_back(std::move(entry));
  }
  // What became of a module that ran but left no node: the constants and
  // initializers its computation was folded into (a module that kept nodes
  // lists none: folding part of a computation is the exporter's daily work).
  std::vector<uint8_t> with_nodes(call_tags.size(), 0);  // per call tag: it or a callee has a node
  for (const TaggedNode& tagged : tagging.nodes) {
    for (int id = tagged.tag; id >= 0 && !with_nodes[id]; id = call_tags.Parent(id)) with_nodes[id] = 1;
  }
  std::map<int, std::vector<std::string>> folded_into;
  auto add_folded = [&](int tag, const std::string& name) {
    if (with_nodes.at(tag)) return;
    std::vector<std::string>& names = folded_into[tag];
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const TaggedNode& tagged : tagging.nodes) {
    for (int tag : tagged.folded_from()) {
      if (tagged.node->outputs().size() == 1) add_folded(tag, tagged.node->output(0)->debugName());
    }
  }
  std::unordered_map<size_t, std::string> initializer_names;
  for (const torch::jit::Value* input : graph.inputs()) initializer_names[input->unique()] = input->debugName();
  std::set<std::tuple<std::string, RewriteRecord::Kind, std::vector<std::string>>> listed_rewrites;
  for (const TagRewrite& rewrite : tagging.rewrites) {
    if (rewrite.kind == RewriteRecord::Kind::kFolded) {
      auto name = initializer_names.find(rewrite.initializer);
      if (name == initializer_names.end()) continue;  // removed since (deduplicated, unused)
      for (const TagRef& ref : rewrite.refs) add_folded(ref.tag, name->second);
      continue;
    }
    std::vector<std::string> modules = refs_of(rewrite.refs);
    // Calls of one tag that ran only once are told apart no more.
    if (rewrite.kind == RewriteRecord::Kind::kRemoved && modules.size() < 2) continue;
    // Each (pass, kind, calls) once, in the order first met: a set, not a
    // search of the list per record (a model rewritten in every layer lists
    // thousands).
    if (listed_rewrites.emplace(rewrite.pass, rewrite.kind, modules).second) {
      rewrites.push_back({rewrite.pass, KindName(rewrite.kind), std::move(modules), ""});
    }
  }

  std::map<std::string, int> listed;
  for (int used : tagging.UsedTags()) {
    for (int id = used; id >= 0; id = call_tags.Parent(id)) {
      if (!listed.emplace(call_tags.Tag(id), id).second) break;
    }
  }
  std::vector<TableEntry> table;
  for (const auto& [tag, id] : listed) {
    const ModuleRecord& record = modules.at(call_tags.Module(id));
    TableEntry entry{tag, record.path, record.class_name, {}, {}, tagging.never_ran.count(id) == 0, {}};
    auto calls = tagging.calls.find(id);
    if (calls != tagging.calls.end()) {
      entry.calls.assign(calls->second.instance_calls.begin(), calls->second.instance_calls.end());
      entry.parent_calls.assign(calls->second.parent_calls.begin(), calls->second.parent_calls.end());
    }
    auto folded = folded_into.find(id);
    if (folded != folded_into.end()) entry.folded_into = folded->second;
    table.push_back(std::move(entry));
  }
  entries.model.push_back({std::string(kModuleTableKey), WriteModuleTable(table)});
  if (!rewrites.empty()) entries.model.push_back({std::string(kRewritesKey), WriteRewrites(rewrites)});
  entries.model.push_back({std::string(kFormatVersionKey), std::string(kFormatVersion)});
  return entries;
}

}  // namespace hiertag
