// Proto tagging: adds the tags to a serialized ModelProto without decoding it.
//
// Precondition: `model` is the byte string torch's serializer produced
// (`Graph._export_onnx`), and `nodes` lists one entry per NodeProto in
// serialization pre-order: a node, then the nodes of each of its graph-valued
// attributes (If/Loop/Scan bodies) in attribute order, then the next node.
//
// What changes: each NodeProto gains metadata_props (field 9) entries
// `hierarchy_tag` (and `hiertag.shared_with` where listed); the ModelProto gains
// metadata_props (field 14) entries before its first higher-numbered field.
// Every other byte is torch's: only ModelProto.graph, GraphProto.node, the
// NodeProto.attribute entries holding a graph and AttributeProto.g/graphs are
// descended into.
//
// The result is planned, not built: a TaggedModelPlan is a list of chunks, each
// either a view into `model` (initializers, node bytes and every other untouched
// field, never copied) or a small written piece (length prefixes and metadata
// entries). Writing
// the chunks in order yields the tagged model, so a caller can stream it to a
// file without ever copying the weights. The plan borrows `model`: keep it alive.
//
// Before:  node { input: "x" output: "y" name: "/layer.0/Relu" op_type: "Relu" }
// After:   node { ... op_type: "Relu"
//                 metadata_props { key: "hierarchy_tag" value: "/Net/Layer.0" } }
//
// Each NodeProto takes the entry whose outputs are its outputs (its identity,
// not its position), and must have that entry's op_type. Fails (returns false
// with a one-line reason) when the bytes are not a well-formed ModelProto, a
// node has no entry, or an entry no node: a file is never written with tags on
// the wrong nodes. Not idempotent.
#pragma once

#include <functional>
#include <memory>
#include <memory_resource>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hiertag {

// One node's entries. The op type, the tag and the output names are views:
// the caller keeps what they view alive until PlanTaggedModel returns (the
// plan copies what it writes). A graph's node tags are one record per node:
// viewing their texts where they are kept (the plugin: TaggedModelEntries'
// arena) makes and frees no string per node.
struct SerializedNodeTag {
  std::string_view op_type;                               // expected NodeProto.op_type
  std::string_view tag;                                   // value of hierarchy_tag
  std::vector<std::string> shared_with;                   // empty: no hiertag.shared_with entry
  std::vector<std::pair<std::string, std::string>> more;  // further entries, key and value, in order
  // The node's identity: its output names as torch's naming pass set them,
  // which NodeProto.output holds. A node without outputs is matched by its
  // place in pre-order among such nodes (and every node so when no entry of
  // the list has outputs: a caller that knows none).
  // The list itself may be kept where its texts are (a polymorphic allocator).
  std::pmr::vector<std::string_view> outputs = {};
};

struct ModelMetadataEntry {
  std::string key;
  std::string value;
};

// A plan's memory (the written pieces, and the planner's tables and buffers)
// is one arena of mapped pages (mapped_memory.h), unmapped when the plan is
// destroyed: planning right after torch freed its graph, the planner does not
// make glibc trim the heap torch freed (what stays on the heap is small: the
// plan's handle, and a shared_with list's JSON while it is written). The
// arena keeps what the planner used until the plan goes.
class TaggedModelPlan {
 public:
  TaggedModelPlan();
  TaggedModelPlan(TaggedModelPlan&&) noexcept;
  TaggedModelPlan& operator=(TaggedModelPlan&&) noexcept;
  ~TaggedModelPlan();

  size_t size() const;
  // Calls `sink` with every chunk of the tagged model, in order.
  void ForEachChunk(const std::function<void(std::string_view)>& sink) const;
  // The tagged model as one string (one copy of everything).
  std::string ToString() const;

 private:
  friend class PlanBuilder;
  struct State;
  std::unique_ptr<State> state_;  // null: the empty plan
};

bool PlanTaggedModel(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                     const std::vector<ModelMetadataEntry>& model_entries, TaggedModelPlan* plan, std::string* error);

}  // namespace hiertag
