// Proto tagging: adds the tags to a serialized ModelProto without decoding it.
//
// Precondition: `model` is the byte string torch's serializer produced
// (`Graph._export_onnx`), and `nodes` lists one entry per NodeProto in
// serialization pre-order: a node, then the nodes of each of its graph-valued
// attributes (If/Loop/Scan bodies) in attribute order, then the next node.
//
// What changes: each NodeProto gains metadata_props (field 9) entries
// `hierarchy_tag` (and `hiertag.shared_with` where listed); the ModelProto gains
// metadata_props (field 14) entries `hiertag.modules` and `hiertag.format_version`.
// Every other byte is copied through unchanged: initializers are skipped by
// length, never parsed. Not idempotent (a second run adds the entries again).
//
// Before:  node { input: "x" output: "y" name: "/layer.0/Relu" op_type: "Relu" }
// After:   node { ... op_type: "Relu"
//                 metadata_props { key: "hierarchy_tag" value: "/Net/Layer.0" } }
//
// Fails (returns false with a one-line reason, output untouched) when the bytes
// are not a well-formed ModelProto or the nodes do not match `nodes` one to one
// by op_type: a file is never written with tags on the wrong nodes.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hiertag {

struct SerializedNodeTag {
  std::string op_type;                  // expected NodeProto.op_type
  std::string tag;                      // value of hierarchy_tag
  std::vector<std::string> shared_with;  // empty: no hiertag.shared_with entry
};

struct ModelMetadataEntry {
  std::string key;
  std::string value;
};

bool AddTagsToSerializedModel(std::string_view model,
                              const std::vector<SerializedNodeTag>& nodes,
                              const std::vector<ModelMetadataEntry>& model_entries,
                              std::string* tagged_model, std::string* error);

}  // namespace hiertag
