// Module calls in a tagged file: references, call ancestry, placement.
#include "hiertag/core/file/module_calls_in_file.h"

#include "hiertag/core/format/json.h"

namespace hiertag {

std::optional<std::vector<CallRef>> CallsInFile::NodeRefs(const OnnxNode& node, std::string* error) const {
  std::vector<CallRef> refs;
  const std::string_view* tag = NodeTag(node);
  if (tag == nullptr) return refs;
  int64_t call = 0;
  auto recorded = node.metadata.find(std::string(kCallKey));
  if (recorded != node.metadata.end()) {
    std::optional<int64_t> ordinal = ParseOrdinal(recorded->second);
    if (!ordinal) {
      *error = "node " + DescribeNode(node) + ": " + std::string(kCallKey) + " '" + std::string(recorded->second) +
               "' is not a decimal call ordinal";
      return std::nullopt;
    }
    call = *ordinal;
  }
  refs.push_back({std::string(*tag), call});
  for (const std::string& text : NodeTagList(node, kSharedWithKey).value_or(std::vector<std::string>{})) {
    std::optional<CallRef> ref = ParseCallRef(text);
    if (!ref) {
      *error = "node " + DescribeNode(node) + ": " + std::string(kSharedWithKey) + " names '" + text +
               "', whose call is not a decimal ordinal";
      return std::nullopt;
    }
    refs.push_back(std::move(*ref));
  }
  return refs;
}

namespace {

// Adds the call of `ancestor` that call `call` of `tag` ran in, if the table leads there.
void AddCallAt(const TaggedFile& file, const std::string& tag, int64_t call, const std::string& ancestor,
               std::set<int64_t>* out) {
  std::string current = tag;
  while (true) {
    const ModuleEntry* entry = file.FindModule(current);
    if (entry == nullptr || call < 0 || call >= entry->call_count()) return;
    if (current == ancestor) {
      out->insert(call);
      return;
    }
    call = entry->parent_calls.empty() ? 0 : entry->parent_calls[call];
    std::string_view parent = ParentTag(current);
    if (parent.empty()) return;
    current = std::string(parent);
  }
}

}  // namespace

std::set<int64_t> CallsInFile::CallsAt(const CallRef& ref, const std::string& ancestor) const {
  std::set<int64_t> calls;
  if (!IsTagAncestorOrSelf(ancestor, ref.tag)) return calls;
  const ModuleEntry* entry = file_.FindModule(ref.tag);
  if (entry == nullptr) return calls;
  if (ref.call) {
    AddCallAt(file_, ref.tag, *ref.call, ancestor, &calls);
  } else {
    for (int64_t call = 0; call < entry->call_count(); ++call) AddCallAt(file_, ref.tag, call, ancestor, &calls);
  }
  return calls;
}

CallsInFile::Placement CallsInFile::Place(const CallRef& ref, const ModuleCall& target) const {
  if (!IsTagAncestorOrSelf(target.tag, ref.tag)) return Placement::kOutside;
  if (!target.call) return Placement::kInside;
  std::set<int64_t> calls = CallsAt(ref, target.tag);
  if (!calls.count(*target.call)) return Placement::kOutside;
  return calls.size() == 1 ? Placement::kInside : Placement::kPartly;
}

bool CallsInFile::Belongs(const CallRef& user, const CallRef& ref) const {
  if (!IsTagAncestorOrSelf(ref.tag, user.tag)) return false;
  if (!ref.call) return true;
  return CallsAt(user, ref.tag).count(*ref.call) > 0;
}

}  // namespace hiertag
