// AssignHierarchyTags: recorded scopes first, then the documented rules.
#include "hiertag/assign_hierarchy_tags.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_map>

#include "hiertag/scope_resolution.h"

namespace hiertag {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

const char* TagRuleName(TagRule rule) {
  switch (rule) {
    case TagRule::kRecorded: return "recorded";
    case TagRule::kParameterOwner: return "parameter-owner";
    case TagRule::kEnclosing: return "enclosing";
    case TagRule::kConsumers: return "consumers";
    case TagRule::kNeighbours: return "neighbours";
    case TagRule::kRoot: return "root";
  }
  return "?";
}

std::vector<SerializedNodeTag> HierarchyTagging::ToSerialized(const ModuleTable& modules) const {
  std::vector<SerializedNodeTag> out;
  out.reserve(nodes.size());
  for (const TaggedNode& tagged : nodes) {
    SerializedNodeTag entry;
    entry.op_type = tagged.node->kind().toUnqualString();
    entry.tag = modules.at(tagged.tag_module).tag;
    for (int shared : tagged.shared_with) entry.shared_with.push_back(modules.at(shared).tag);
    out.push_back(std::move(entry));
  }
  return out;
}

std::vector<int> HierarchyTagging::UsedTagModules() const {
  std::vector<int> used;
  for (const TaggedNode& tagged : nodes) {
    used.push_back(tagged.tag_module);
    used.insert(used.end(), tagged.shared_with.begin(), tagged.shared_with.end());
  }
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

namespace {

constexpr int kUnsettled = -1;

bool IsSerialized(Node* node) {
  return !node->mustBeNone() && node->kind() != c10::Symbol::onnx("LocalFunctionDef");
}

class Tagger {
 public:
  Tagger(Graph& graph, const ModuleTable& modules, const BorrowedScopes& borrowed,
         const std::unordered_set<std::string>& member_names,
         int user_input_count)
      : graph_(graph),
        modules_(modules),
        borrowed_(borrowed),
        member_names_(member_names),
        user_input_count_(user_input_count),
        resolver_(modules) {}

  HierarchyTagging Run() {
    CollectPreOrder(graph_.block(), nullptr);
    for (size_t i = 0; i < result_.nodes.size(); ++i) TagFromRecord(i);
    SettleByRules();
    for (TaggedNode& tagged : result_.nodes) ++result_.rule_counts[static_cast<int>(tagged.rule)];
    result_.unresolved_scope_levels = resolver_.unresolved_levels();
    return std::move(result_);
  }

 private:
  void CollectPreOrder(Block* block, Node* holder) {
    for (Node* node : block->nodes()) {
      if (!IsSerialized(node)) continue;
      index_[node] = result_.nodes.size();
      holder_.push_back(holder);
      result_.nodes.push_back({node, kUnsettled, {}, TagRule::kRoot});
      for (c10::Symbol name : node->attributeNames()) {
        if (node->kindOf(name) == torch::jit::AttributeKind::g) {
          CollectPreOrder(node->g(name)->block(), node);
        } else if (node->kindOf(name) == torch::jit::AttributeKind::gs) {
          for (const auto& graph : node->gs(name)) CollectPreOrder(graph->block(), node);
        }
      }
      for (Block* nested : node->blocks()) CollectPreOrder(nested, node);
    }
  }

  void TagFromRecord(size_t i) {
    TaggedNode& tagged = result_.nodes[i];
    const torch::jit::ScopePtr& scope = tagged.node->scope();
    const BorrowedScopes::Loan* loan = borrowed_.Find(scope);
    ResolvedScope resolved = resolver_.Resolve(loan ? loan->recorded : scope, tagged.node->callstack());
    if (resolved.tag_module >= 0) {
      Settle(i, resolved.tag_module, TagRule::kRecorded);
      if (loan) {
        for (const auto& other : loan->shared_with) {
          int shared = resolver_.Resolve(other).tag_module;
          if (shared >= 0 && shared != tagged.tag_module &&
              std::find(tagged.shared_with.begin(), tagged.shared_with.end(), shared) ==
                  tagged.shared_with.end()) {
            tagged.shared_with.push_back(shared);
          }
        }
        std::sort(tagged.shared_with.begin(), tagged.shared_with.end());
      }
      return;
    }
    int owner = DeduplicatedParameterOwner(tagged.node);
    if (owner >= 0) Settle(i, modules_.TagOwner(owner), TagRule::kParameterOwner);
  }

  int DeduplicatedParameterOwner(Node* node) const {
    if (node->kind() != c10::onnx::Identity || node->inputs().size() != 1 ||
        node->outputs().size() != 1 || node->input(0)->node()->kind() != c10::prim::Param) {
      return -1;
    }
    const std::string& name = node->output(0)->debugName();
    if (member_names_.count(name) == 0) return -1;
    return modules_.FindOwnerOfMember(name);
  }

  void Settle(size_t i, int tag_module, TagRule rule) {
    result_.nodes[i].tag_module = tag_module;
    result_.nodes[i].rule = rule;
  }

  bool IsUserInput(const Value* value) const {
    if (value->node()->kind() != c10::prim::Param || value->node()->owningBlock() != graph_.block()) {
      return false;
    }
    if (user_input_count_ >= 0) return static_cast<int>(value->offset()) < user_input_count_;
    return member_names_.count(value->debugName()) == 0;
  }

  // The tag of a value's producer: root for user inputs, the holder for body
  // parameters, kUnsettled while the producer waits; -2 when it does not count.
  int ProducerTag(const Value* value) const {
    const Node* producer = value->node();
    if (producer->kind() == c10::prim::Param) {
      if (producer->owningBlock() == graph_.block()) return IsUserInput(value) ? 0 : -2;
      return HolderTag(producer->owningBlock());
    }
    auto it = index_.find(producer);
    return it == index_.end() ? -2 : result_.nodes[it->second].tag_module;
  }

  int HolderTag(const Block* block) const {
    const Node* holder = block->owningNode();
    if (holder == nullptr) return 0;
    auto it = index_.find(holder);
    return it == index_.end() ? -2 : result_.nodes[it->second].tag_module;
  }

  int ConsumerTag(const torch::jit::Use& use) const {
    Node* user = use.user;
    if (user->kind() == c10::prim::Return) return HolderTag(user->owningBlock());
    auto it = index_.find(user);
    return it == index_.end() ? -2 : result_.nodes[it->second].tag_module;
  }

  // Folds a neighbour's tag into `common`; returns false if the neighbour waits.
  bool Fold(int neighbour, int* common) const {
    if (neighbour == -2) return true;
    if (neighbour == kUnsettled) return false;
    *common = *common < 0 ? neighbour : modules_.CommonTagAncestor(*common, neighbour);
    return true;
  }

  // Applies enclosing / consumers / neighbours to node i. With `settle_partial`
  // a node whose neighbours are partly unsettled settles on the known ones.
  bool TryRules(size_t i, bool settle_partial) {
    Node* node = result_.nodes[i].node;
    if (holder_[i] != nullptr) {
      int enclosing = result_.nodes[index_.at(holder_[i])].tag_module;
      if (enclosing == kUnsettled) return false;
      Settle(i, enclosing, TagRule::kEnclosing);
      return true;
    }
    int common = -1;
    bool complete = true;
    for (const Value* output : node->outputs()) {
      for (const torch::jit::Use& use : output->uses()) complete &= Fold(ConsumerTag(use), &common);
    }
    TagRule rule = TagRule::kConsumers;
    if (!node->inputs().empty()) {
      rule = TagRule::kNeighbours;
      for (const Value* input : node->inputs()) complete &= Fold(ProducerTag(input), &common);
    }
    for (const Value* output : node->outputs()) {
      for (const Value* graph_output : graph_.outputs()) {
        if (output == graph_output) Fold(0, &common);
      }
    }
    if (common < 0 || (!complete && !settle_partial)) return false;
    Settle(i, common, rule);
    return true;
  }

  void SettleByRules() {
    std::vector<size_t> waiting;
    for (size_t i = 0; i < result_.nodes.size(); ++i) {
      if (result_.nodes[i].tag_module == kUnsettled) waiting.push_back(i);
    }
    while (!waiting.empty()) {
      bool progress = false;
      std::vector<size_t> still_waiting;
      for (size_t i : waiting) {
        if (TryRules(i, false)) {
          progress = true;
        } else {
          still_waiting.push_back(i);
        }
      }
      waiting.swap(still_waiting);
      if (progress || waiting.empty()) continue;
      auto settled = std::find_if(waiting.begin(), waiting.end(),
                                  [&](size_t i) { return TryRules(i, true); });
      if (settled == waiting.end()) break;
      waiting.erase(settled);
    }
    for (size_t i : waiting) {
      GRAPH_DEBUG("hiertag: no rule applies to ", *result_.nodes[i].node, "; tagging it root");
      Settle(i, 0, TagRule::kRoot);
    }
  }

  Graph& graph_;
  const ModuleTable& modules_;
  const BorrowedScopes& borrowed_;
  const std::unordered_set<std::string>& member_names_;
  int user_input_count_;
  ScopeResolver resolver_;
  HierarchyTagging result_;
  std::unordered_map<const Node*, size_t> index_;
  std::vector<Node*> holder_;
};

}  // namespace

HierarchyTagging AssignHierarchyTags(Graph& graph, const ModuleTable& modules,
                                     const BorrowedScopes& borrowed,
                                     const std::unordered_set<std::string>& member_names,
                                     int user_input_count) {
  return Tagger(graph, modules, borrowed, member_names, user_input_count).Run();
}

}  // namespace hiertag
