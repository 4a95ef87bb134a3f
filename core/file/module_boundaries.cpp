// Module boundaries: members, inputs and outputs of a module call (module_boundaries.h).
#include "hiertag/core/file/module_boundaries.h"

#include <algorithm>

namespace hiertag {
namespace {

std::string QuotedList(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : "'") + names[i] + "'";
  return text;
}

// "'<name>' (<op_type>)" of the first node so named, or "'<name>'" when none is.
std::string DescribeNamedNode(const TaggedFile& file, const std::string& name) {
  for (const OnnxNode& node : file.model.nodes) {
    if (node.name == name) return DescribeNode(node);
  }
  return "'" + name + "'";
}

// A module's calls, each asked alone; a module with one call as a whole.
template <typename Visit>
void ForEachCall(const TaggedFile& file, Visit visit) {
  for (const ModuleEntry& module : file.modules) {
    int64_t count = module.call_count();
    for (int64_t call = 0; call < count; ++call) {
      if (!visit(module.tag, call, ModuleCall{module.tag, count == 1 ? std::nullopt : std::optional<int64_t>(call)})) {
        return;
      }
    }
  }
}

// `scopes`: the values each enclosing graph defines, innermost last. Each
// graph's own set is built once and not copied into its nested graphs (a copy
// per nested graph is quadratic in a wide body of Loops and Ifs).
void OuterReads(const OnnxModel& model, int graph_index, std::vector<const std::set<std::string_view>*>* scopes,
                std::vector<std::string_view>* reads) {
  const OnnxGraph& graph = model.graphs[graph_index];
  std::set<std::string_view> defined;
  for (const OnnxValue& input : graph.inputs) defined.insert(input.name);
  for (const OnnxInitializer& initializer : graph.initializers) defined.insert(initializer.name);
  for (int index : graph.nodes) {
    for (std::string_view output : model.nodes[index].outputs) defined.insert(output);
  }
  scopes->push_back(&defined);
  auto is_defined = [&](std::string_view name) {
    return std::any_of(scopes->begin(), scopes->end(), [&](const auto* scope) { return scope->count(name) > 0; });
  };
  for (int index : graph.nodes) {
    const OnnxNode& node = model.nodes[index];
    for (std::string_view input : node.inputs) {
      if (!input.empty() && !is_defined(input)) reads->push_back(input);
    }
    for (int nested : node.subgraphs) OuterReads(model, nested, scopes, reads);
  }
  for (const OnnxValue& output : graph.outputs) {  // a graph may hand out an outer value as it is
    if (!is_defined(output.name)) reads->push_back(output.name);
  }
  scopes->pop_back();
}

}  // namespace

std::vector<std::string_view> NodeReads(const OnnxModel& model, int index) {
  const OnnxNode& node = model.nodes[index];
  std::vector<std::string_view> reads;
  for (std::string_view input : node.inputs) {
    if (!input.empty()) reads.push_back(input);
  }
  std::vector<const std::set<std::string_view>*> scopes;
  for (int graph : node.subgraphs) OuterReads(model, graph, &scopes, &reads);
  return reads;
}

std::set<int> WeightNodes(const OnnxModel& model, const std::unordered_map<int, std::vector<std::string_view>>& reads) {
  const OnnxGraph& main = model.graphs.at(0);
  std::set<std::string_view> weights;
  for (const OnnxInitializer& initializer : main.initializers) weights.insert(initializer.name);
  std::set<int> nodes;
  for (int index : main.nodes) {  // in graph order: producers first
    const std::vector<std::string_view>& read = reads.at(index);
    bool weight = (model.nodes[index].op_type == "Constant" && read.empty()) ||
                  (!read.empty() && std::all_of(read.begin(), read.end(),
                                                [&](std::string_view name) { return weights.count(name) > 0; }));
    if (!weight) continue;
    nodes.insert(index);
    for (std::string_view output : model.nodes[index].outputs) weights.insert(output);
  }
  return nodes;
}

MainGraphIndex::MainGraphIndex(const TaggedFile& file) : file_(file), calls_(file) {
  for (const ModuleEntry& module : file.modules) {
    if (ParentTag(module.tag).empty()) root_ = {module.tag, 0};
  }
  const OnnxGraph& main = file.model.graphs.at(0);
  for (const OnnxInitializer& initializer : main.initializers) initializers_.insert(initializer.name);
  for (const OnnxValue& output : main.outputs) model_outputs_.insert(output.name);
  for (int index : main.nodes) {
    reads_[index] = NodeReads(file.model, index);
    const OnnxNode& node = file.model.nodes[index];
    std::string error;
    std::optional<std::vector<CallRef>> refs = calls_.NodeRefs(node, &error);
    if (!refs) {
      ref_errors_[index] = error;
      refs = std::vector<CallRef>{{std::string(*NodeTag(node)), 0}};
    }
    refs_[index] = std::move(*refs);
    for (std::string_view output : node.outputs) producer_[output] = index;
    for (std::string_view input : reads_[index]) consumers_[input].push_back(index);
  }
  weight_nodes_ = WeightNodes(file.model, reads_);
}

int MainGraphIndex::Producer(std::string_view value) const {
  auto found = producer_.find(value);
  return found == producer_.end() ? -1 : found->second;
}

const std::vector<int>& MainGraphIndex::Consumers(std::string_view value) const {
  static const std::vector<int> kNone;
  auto found = consumers_.find(value);
  return found == consumers_.end() ? kNone : found->second;
}

bool MainGraphIndex::IsOtherSharersRead(int producer, const CallRef& reader, const ModuleCall& target) const {
  const std::vector<CallRef>& refs = refs_.at(producer);
  if (refs.size() < 2) return false;
  return std::any_of(refs.begin(), refs.end(), [&](const CallRef& sharer) {
    return calls_.Place(sharer, target) == CallsInFile::Placement::kOutside && calls_.Belongs(reader, sharer);
  });
}

// A use of a shared node by another module it was kept for is that module's own
// copy of the computation. This holds for an ancestor that computed the same
// value itself too (measured on SAM: a two-way attention block's Add merged with
// an identical Add of the transformer holding it, which the block never returned).
bool MainGraphIndex::Leaves(int producer, int user, const std::set<int>& selection, const ModuleCall& target) const {
  if (selection.count(user)) return false;
  if (!selection.count(producer)) return true;
  const std::vector<CallRef>& user_refs = refs_.at(user);
  return user_refs.empty() || !IsOtherSharersRead(producer, user_refs.front(), target);
}

std::optional<ModuleBoundary> MainGraphIndex::BoundaryOf(const ModuleCall& target, std::string* error) const {
  const std::vector<int>& graph = file_.model.graphs.at(0).nodes;
  for (int index : graph) {
    auto malformed = ref_errors_.find(index);
    if (malformed != ref_errors_.end() && IsTagAncestorOrSelf(target.tag, *NodeTag(file_.model.nodes[index]))) {
      *error = malformed->second;
      return std::nullopt;
    }
  }
  std::vector<int> nodes, weights_under;
  for (int index : graph) {
    const std::vector<CallRef>& refs = refs_.at(index);
    if (std::any_of(refs.begin(), refs.end(), [&](const CallRef& ref) {
          return calls_.Place(ref, target) != CallsInFile::Placement::kOutside;
        })) {
      nodes.push_back(index);
    }
    if (weight_nodes_.count(index) && !refs.empty() && IsTagAncestorOrSelf(target.tag, refs.front().tag)) {
      weights_under.push_back(index);
    }
  }
  return BoundaryOfNodes(target, nodes, weights_under);
}

namespace {

// Calls visit(A) for each A with IsTagAncestorOrSelf(A, tag), innermost first.
template <typename Visit>
void ForEachAncestorOrSelf(std::string_view tag, Visit visit) {
  while (true) {
    visit(tag);
    size_t slash = tag.rfind('/');
    if (slash == std::string_view::npos) return;
    tag = tag.substr(0, slash);
  }
}

void AddOnce(std::vector<int>& nodes, int index) {
  if (nodes.empty() || nodes.back() != index) nodes.push_back(index);
}

}  // namespace

MainGraphIndex::EveryCallsNodes MainGraphIndex::NodesOfEveryCall() const {
  EveryCallsNodes every;
  for (int index : file_.model.graphs.at(0).nodes) {
    const std::vector<CallRef>& refs = refs_.at(index);
    for (const CallRef& ref : refs) {
      ForEachAncestorOrSelf(ref.tag, [&](std::string_view ancestor) {
        std::string tag(ancestor);
        AddOnce(every.nodes[{tag, std::nullopt}], index);
        for (int64_t call : calls_.CallsAt(ref, tag)) AddOnce(every.nodes[{tag, call}], index);
      });
    }
    if (weight_nodes_.count(index) && !refs.empty()) {
      ForEachAncestorOrSelf(refs.front().tag, [&](std::string_view ancestor) {
        every.weights_under[std::string(ancestor)].push_back(index);
      });
    }
  }
  return every;
}

ModuleBoundary MainGraphIndex::BoundaryOfNodes(const ModuleCall& target, const std::vector<int>& nodes,
                                               const std::vector<int>& weights_under) const {
  ModuleBoundary boundary;
  for (int index : nodes) {
    boundary.nodes.insert(index);
    if (!weight_nodes_.count(index)) boundary.members.insert(index);  // weights: copied in where needed
  }
  bool constant_module = boundary.members.empty();
  if (constant_module) {
    // A constant module: its weight nodes are its results, those of the call asked
    // (each call of a rotary table computes its own copy from the same buffers).
    for (int index : weights_under) {
      if (calls_.Place(refs_.at(index).front(), target) != CallsInFile::Placement::kOutside) {
        boundary.members.insert(index);
      }
    }
  }
  std::set<std::string_view> made;
  for (int index : boundary.members) {
    for (std::string_view output : file_.model.nodes[index].outputs) made.insert(output);
  }
  std::set<std::string_view> seen;
  for (int index : boundary.members) {
    for (std::string_view input : reads_.at(index)) {
      if (made.count(input) || initializers_.count(input) || !seen.insert(input).second) continue;
      int producer = Producer(input);
      if (producer >= 0 && weight_nodes_.count(producer)) continue;
      boundary.inputs.emplace_back(input);
    }
  }
  // Another call of a constant module reading a member's value reads the module's
  // buffer, which the tracer records once, as a Constant of the first call: weight data
  // that call copies in where needed (as every extraction does), not a result this call
  // hands out, whether that call computes from weights alone or, as torch 2.4 exports a
  // second call, also from its argument's shape.
  auto another_calls_read = [&](int user) {
    return constant_module && target.call && !refs_.at(user).empty() &&
           calls_.Place(refs_.at(user).front(), ModuleCall{target.tag, std::nullopt}) !=
               CallsInFile::Placement::kOutside;
  };
  for (int index : boundary.members) {
    for (std::string_view output : file_.model.nodes[index].outputs) {
      const std::vector<int>& users = Consumers(output);
      bool used_outside = std::any_of(users.begin(), users.end(), [&](int user) {
        return Leaves(index, user, boundary.members, target) && !another_calls_read(user);
      });
      // A model output is read by the root's call 0.
      bool model_output = model_outputs_.count(output) && !IsOtherSharersRead(index, root_, target);
      if (used_outside || model_output) boundary.outputs.emplace_back(output);
    }
  }
  return boundary;
}

std::optional<std::string> CutBy(const TaggedFile& file, const CallsInFile& calls, const ModuleCall& target) {
  for (const Rewrite& rewrite : file.rewrites) {
    std::vector<std::string> outside;
    bool lists_inside = false;
    bool lists_target = false;
    for (const std::string& text : rewrite.modules) {
      std::optional<CallRef> ref = ParseCallRef(text);
      if (!ref) continue;  // validate reports it
      CallsInFile::Placement placement = calls.Place(*ref, target);
      lists_target |= ref->tag == target.tag && (!target.call || !ref->call || *ref->call == *target.call);
      if (placement != CallsInFile::Placement::kOutside) lists_inside = true;
      if (placement != CallsInFile::Placement::kInside &&
          std::find(outside.begin(), outside.end(), text) == outside.end()) {
        outside.push_back(text);
      }
    }
    if (rewrite.kind == "rewired") {
      if (!lists_target) continue;
      if (!rewrite.reason.empty()) return rewrite.pass + ": " + rewrite.reason;
      return rewrite.pass + " rewired it" +
             (rewrite.node.empty() ? std::string() : ": node " + DescribeNamedNode(file, rewrite.node)) +
             " now reads a value it never received";
    }
    if (!lists_inside || outside.empty()) continue;
    if (rewrite.kind == "removed") {
      return rewrite.pass + " removed its boundary with " + QuotedList(outside) + " (nodes of both removed together)";
    }
    if (rewrite.kind == "folded") {
      return rewrite.pass + " folded its computation with " + QuotedList(outside) + " into initializers";
    }
    return rewrite.pass + " fused its computation with " + QuotedList(outside) +
           (rewrite.node.empty() ? std::string() : " into node " + DescribeNamedNode(file, rewrite.node));
  }
  return std::nullopt;
}

bool ForEachModuleBoundary(const TaggedFile& file, const std::function<void(CallBoundary&&)>& visit,
                           std::string* error) {
  MainGraphIndex index(file);
  bool failed = false;
  if (index.HasMalformedRefs()) {  // each call asked alone: the first it concerns says why
    ForEachCall(file, [&](const std::string& tag, int64_t call, const ModuleCall& target) {
      std::optional<ModuleBoundary> boundary = index.BoundaryOf(target, error);
      if (!boundary) return !(failed = true);
      visit({tag, call, std::move(*boundary)});
      return true;
    });
    return !failed;
  }
  MainGraphIndex::EveryCallsNodes every = index.NodesOfEveryCall();
  static const std::vector<int> kNone;
  ForEachCall(file, [&](const std::string& tag, int64_t call, const ModuleCall& target) {
    auto nodes = every.nodes.find({target.tag, target.call});
    auto weights = every.weights_under.find(target.tag);
    visit({tag, call,
           index.BoundaryOfNodes(target, nodes == every.nodes.end() ? kNone : nodes->second,
                                 weights == every.weights_under.end() ? kNone : weights->second)});
    if (nodes != every.nodes.end()) every.nodes.erase(nodes);  // each call is asked once
    return true;
  });
  return true;
}

std::vector<CutCall> AllCutCalls(const TaggedFile& file) {
  CallsInFile calls(file);
  std::vector<CutCall> cut;
  ForEachCall(file, [&](const std::string& tag, int64_t call, const ModuleCall& target) {
    if (std::optional<std::string> why = CutBy(file, calls, target)) cut.push_back({tag, call, std::move(*why)});
    return true;
  });
  return cut;
}

}  // namespace hiertag
