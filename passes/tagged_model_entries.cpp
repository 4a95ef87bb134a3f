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
  entries.texts = std::make_unique<std::pmr::monotonic_buffer_resource>(MappedMemory());
  entries.nodes.reserve(tagging.nodes.size());
  std::vector<std::string_view> kept_tags(call_tags.size());  // per call tag: its text in entries.texts, once kept
  // Per op type, its name in entries.texts, once kept: torch's interned name
  // can move (a short one lives inside a string of a table that grows).
  std::unordered_map<c10::unique_t, std::string_view> kept_op_types;
  for (const TaggedNode& tagged : tagging.nodes) {
    torch::jit::Node* node = JitNode(tagged);
    // The list of outputs made in the arena (a pmr list keeps its resource when assigned to).
    SerializedNodeTag entry{{}, {}, {}, {}, std::pmr::vector<std::string_view>(entries.texts.get())};
    entry.outputs.reserve(node->outputs().size());
    for (const torch::jit::Value* output : node->outputs()) entry.outputs.push_back(entries.Keep(output->debugName()));
    auto [op_type, fresh] = kept_op_types.try_emplace(static_cast<c10::unique_t>(node->kind()));
    if (fresh) op_type->second = entries.Keep(node->kind().toUnqualString());
    entry.op_type = op_type->second;
    if (static_cast<size_t>(tagged.tag) >= kept_tags.size()) kept_tags.resize(tagged.tag + 1);
    std::string_view& tag = kept_tags[tagged.tag];
    if (tag.empty()) tag = entries.Keep(call_tags.Tag(tagged.tag));
    entry.tag = tag;
    // Most nodes have nothing but a tag: described only when they have more.
    if (tagged.records || tagging.CallCount(tagged.tag) > 1) {
      NodeEntries described = DescribeNode(tagged, tagging, call_tags);
      entry.shared_with = std::move(described.shared_with);
      entry.more = std::move(described.more);
    }
    entries.nodes.push_back(std::move(entry));
  }
  std::unordered_map<uint64_t, std::string> initializer_names;
  for (const torch::jit::Value* input : graph.inputs()) initializer_names[input->unique()] = input->debugName();
  entries.model = DescribeModel(
      tagging, call_tags, modules, [&](size_t k) { return NodeName(JitNode(tagging.nodes[k])); },
      [&](size_t k) -> std::optional<std::string> {
        torch::jit::Node* node = JitNode(tagging.nodes[k]);
        if (node->outputs().size() != 1) return std::nullopt;
        return node->output(0)->debugName();
      },
      [&](uint64_t initializer) -> std::optional<std::string> {
        auto name = initializer_names.find(initializer);
        if (name == initializer_names.end()) return std::nullopt;
        return name->second;
      });
  return entries;
}

}  // namespace hiertag
