// Tagged model entries: what a HierarchyTagging writes into the ONNX file.
//
// Precondition: torch has named the nodes (the `onnx_name` attribute of
// _jit_pass_onnx_assign_scoped_names_for_node_and_value), so rewrite records
// can name the node they concern. Pure bookkeeping: the graph is not changed.
//
// Per node (proto_tagging.h): hierarchy_tag, hiertag.shared_with, hiertag.call
// (tags with several calls), hiertag.spans + hiertag.rewrite (fused nodes).
// Per model: hiertag.modules, the table of every used tag and its ancestors:
//   {tag: {"path", "class", "calls"?, "parent_calls"?, "ran"?, "folded_into"?}}
// where "ran": false marks a container whose forward never ran (a caller
// reached past it to a module it owns), and
// folded_into (initializers and Constant outputs) is written only for a module
// that ran but left no node.
// hiertag.rewrites (when any), hiertag.format_version.
#pragma once

#include <memory>
#include <memory_resource>
#include <string_view>
#include <vector>

#include "hiertag/core/export/proto_tagging.h"
#include "hiertag/core/format/call_tags.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/passes/assign_hierarchy_tags.h"

namespace hiertag {

// The nodes' entries view their op types, tags and output names in `texts`,
// an arena of mapped pages the entries own, which holds their lists of
// outputs too: made and let go of at once, not a string or two per node on
// the heap (a node's shared_with and further entries, which few nodes have,
// still are). Keep the entries whole while a copy of `nodes` is read; moving
// them keeps the views.
struct TaggedModelEntries {
  TaggedModelEntries() = default;
  TaggedModelEntries(TaggedModelEntries&&) = default;
  // Member by member, `texts` last: the old nodes give their lists back to
  // the old arena before it goes.
  TaggedModelEntries& operator=(TaggedModelEntries&&) = default;
  ~TaggedModelEntries() { nodes.clear(); }  // before `texts`, declared last, goes

  std::vector<SerializedNodeTag> nodes;
  std::vector<ModelMetadataEntry> model;
  std::unique_ptr<std::pmr::monotonic_buffer_resource> texts;

  // A copy of `text` in `texts` (made by DescribeTaggedModel).
  std::string_view Keep(std::string_view text);
};

// `graph`: the graph tagged, its values named by torch.
TaggedModelEntries DescribeTaggedModel(const HierarchyTagging& tagging, CallTags& call_tags, const ModuleTable& modules,
                                       const torch::jit::Graph& graph);

}  // namespace hiertag
