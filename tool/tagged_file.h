// A tagged file as the commands see it: the model and its module table.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "hiertag/json.h"
#include "hiertag/onnx_model.h"

namespace hiertag {

struct ModuleEntry {
  std::string tag;
  std::string path;
  std::string class_name;
};

struct TaggedFile {
  OnnxModel model;
  Json table;                         // the parsed hiertag.modules object
  std::vector<ModuleEntry> modules;   // the table's well-formed entries, in table order
};

// Loads `path`. On failure writes one line `<path>: <reason>` to *error.
std::optional<TaggedFile> LoadTaggedFile(const std::string& path, std::string* error);

// The node's hierarchy_tag, or nullptr.
const std::string* NodeTag(const OnnxNode& node);

// "'<name>' (<op_type>)", the way messages name a node.
std::string DescribeNode(const OnnxNode& node);

}  // namespace hiertag
