// AssignHierarchyTags: recorded scopes first, then the documented rules.
#include "hiertag/passes/assign_hierarchy_tags.h"

#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <unordered_map>

#include "hiertag/passes/scope_resolution.h"

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

std::vector<int> HierarchyTagging::UsedTags() const {
  std::vector<int> used;
  for (const TaggedNode& tagged : nodes) {
    used.push_back(tagged.tag);
    for (const TagRef& ref : tagged.shared_with) used.push_back(ref.tag);
    for (const TagRef& ref : tagged.spans) used.push_back(ref.tag);
    used.insert(used.end(), tagged.folded_from.begin(), tagged.folded_from.end());
  }
  for (const auto& [tag, _] : calls) used.push_back(tag);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  return used;
}

int HierarchyTagging::CallCount(int tag) const {
  auto found = calls.find(tag);
  return found == calls.end() || found->second.instance_calls.empty()
             ? 1
             : static_cast<int>(found->second.instance_calls.size());
}

namespace {

constexpr int kUnsettled = -1;

bool IsSerialized(Node* node) {
  return !node->mustBeNone() && node->kind() != c10::Symbol::onnx("LocalFunctionDef");
}

class Tagger {
 public:
  Tagger(Graph& graph, const ModuleTable& modules, CallTags& call_tags, const BorrowedScopes& borrowed,
         const std::unordered_set<std::string>& member_names, int user_input_count,
         const ModuleCalls* calls, const RewriteLog* rewrites)
      : graph_(graph),
        modules_(modules),
        call_tags_(call_tags),
        borrowed_(borrowed),
        member_names_(member_names),
        user_input_count_(user_input_count),
        calls_(calls),
        rewrites_(rewrites),
        resolver_(modules, call_tags) {}

  HierarchyTagging Run() {
    NumberCalls();
    ResolveRewrites();
    CollectPreOrder(graph_.block(), nullptr);
    for (size_t i = 0; i < result_.nodes.size(); ++i) TagFromRecord(i);
    // After every record, so the owners' call tags are all known.
    for (size_t i = 0; i < result_.nodes.size(); ++i) {
      if (result_.nodes[i].tag != kUnsettled) continue;
      int owner = DeduplicatedParameterOwner(result_.nodes[i].node);
      if (owner >= 0) Settle(i, owner, TagRule::kParameterOwner);
    }
    SettleByRules();
    InheritCalls();
    if (calls_ != nullptr) {
      for (int tag = 0; tag < call_tags_.size(); ++tag) {
        if (!call_tags_.Ran(call_tags_.Module(tag))) result_.never_ran.insert(tag);
      }
    }
    for (TaggedNode& tagged : result_.nodes) {
      tagged.tag_module = call_tags_.Module(tagged.tag);
      ++result_.rule_counts[static_cast<int>(tagged.rule)];
    }
    result_.unresolved_scope_levels = resolver_.unresolved_levels();
    return std::move(result_);
  }

 private:
  // Numbers each call tag's calls in the order they ran. A call of a filtered
  // module is no call of a tag (its nodes belong to its caller's).
  void NumberCalls() {
    if (calls_ == nullptr) return;
    for (const ModuleCall& call : calls_->calls()) call_tags_.MarkRan(call.module);
    call_tags_.MarkRan(0);
    std::unordered_map<int, int> instance_calls;
    for (const ModuleCall& call : calls_->calls()) {
      int instance_call = instance_calls[call.module]++;
      ResolvedScope resolved = resolver_.Resolve(call.scope);
      if (resolved.tag <= CallTags::kRoot || resolved.call_scope != call.scope.get()) continue;
      TagCalls& tag_calls = result_.calls[resolved.tag];
      call_ordinal_[call.scope.get()] = static_cast<int>(tag_calls.instance_calls.size());
      tag_calls.instance_calls.push_back(instance_call);
      ResolvedScope caller = resolver_.Resolve(call.scope->parent());
      auto parent_call = caller.call_scope ? call_ordinal_.find(caller.call_scope) : call_ordinal_.end();
      tag_calls.parent_calls.push_back(parent_call == call_ordinal_.end() ? 0 : parent_call->second);
    }
  }

  void ResolveRewrites() {
    if (rewrites_ == nullptr) return;
    for (const RewriteRecord& record : rewrites_->records) {
      TagRewrite rewrite{record.kind, record.pass, {}, record.initializer};
      if (record.kind == RewriteRecord::Kind::kRewired) {
        rewrite.refs = RewiredCalls(record);
        if (!rewrite.refs.empty()) result_.rewrites.push_back(std::move(rewrite));
        continue;
      }
      for (const auto& scope : record.scopes) AddRef(RefOf(scope), &rewrite.refs);
      std::sort(rewrite.refs.begin(), rewrite.refs.end());
      if (rewrite.kind == RewriteRecord::Kind::kRemoved && rewrite.refs.size() < 2) continue;
      if (rewrite.kind == RewriteRecord::Kind::kFolded && rewrite.refs.empty()) continue;
      result_.rewrites.push_back(std::move(rewrite));
    }
  }

  // A node a rule tagged belongs to the call of a neighbour with the same tag.
  void InheritCalls() {
    for (TaggedNode& tagged : result_.nodes) {
      if (tagged.rule == TagRule::kRecorded || result_.CallCount(tagged.tag) < 2) continue;
      for (const Value* output : tagged.node->outputs()) {
        for (const torch::jit::Use& use : output->uses()) {
          auto it = index_.find(use.user);
          if (it != index_.end() && result_.nodes[it->second].tag == tagged.tag) {
            tagged.call = result_.nodes[it->second].call;
          }
        }
      }
    }
  }

  void CollectPreOrder(Block* block, Node* holder) {
    for (Node* node : block->nodes()) {
      if (!IsSerialized(node)) continue;
      index_[node] = result_.nodes.size();
      holder_.push_back(holder);
      result_.nodes.push_back({node, kUnsettled, -1, 0, {}, {}, {}, {}, TagRule::kRoot});
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
    if (resolved.tag >= 0) {
      Settle(i, resolved.tag, TagRule::kRecorded);
      auto ordinal = resolved.call_scope ? call_ordinal_.find(resolved.call_scope) : call_ordinal_.end();
      if (ordinal != call_ordinal_.end()) tagged.call = ordinal->second;
      TagRef own{resolved.tag, ordinal == call_ordinal_.end() ? TagRef::kEveryCall : ordinal->second};
      if (loan) TakeLoan(*loan, tagged, own);
    }
  }

  // shared_with and spans from a loan; a fused node moves to the common
  // ancestor of every module it carries.
  void TakeLoan(const BorrowedScopes::Loan& loan, TaggedNode& tagged, const TagRef& own) {
    for (const auto& other : loan.shared_with) AddRef(RefOf(other), &tagged.shared_with);
    for (const auto& folded : loan.folded_from) AddTag(resolver_.Resolve(folded).tag, &tagged.folded_from);
    std::vector<TagRef> spans = {own};
    for (const auto& fused : loan.spans) AddRef(RefOf(fused), &spans);
    if (spans.size() > 1 && tagged.node->inputs().empty()) {
      // A fused node a later pass folded into a constant: no value crosses a
      // boundary through it any more (constants are weights), so it only says
      // what the modules' nodes became.
      for (size_t k = 1; k < spans.size(); ++k) AddTag(spans[k].tag, &tagged.folded_from);
    } else if (spans.size() > 1) {
      int common = spans.front().tag;
      for (const TagRef& span : spans) common = call_tags_.CommonAncestor(common, span.tag);
      tagged.tag = common;
      tagged.spans = std::move(spans);
      tagged.rewrite = loan.rewrite;
      std::sort(tagged.spans.begin(), tagged.spans.end());
    }
    // Not shared with itself: its own call, or its own tag when the calls are unknown.
    tagged.shared_with.erase(std::remove_if(tagged.shared_with.begin(), tagged.shared_with.end(),
                                            [&](const TagRef& ref) {
                                              return ref.tag == tagged.tag &&
                                                     (ref.call == own.call || ref.call == TagRef::kEveryCall ||
                                                      own.call == TagRef::kEveryCall);
                                            }),
                             tagged.shared_with.end());
    std::sort(tagged.shared_with.begin(), tagged.shared_with.end());
  }

  // The calls holding a rewired reader and the node it read before, but
  // neither the maker nor a reader of the value it reads now: where they read a
  // value of their own, they now read one they never received. A graph input
  // is the root call's; a parameter is nobody's data.
  std::vector<TagRef> RewiredCalls(const RewriteRecord& record) {
    bool user_input = record.graph_input >= 0 &&
                      (user_input_count_ < 0 || record.graph_input < user_input_count_);
    if (record.graph_input >= 0 && !user_input) return {};
    std::vector<TagRef> held_before;
    if (user_input) held_before.push_back({CallTags::kRoot, 0});
    for (const auto& scope : record.value_scopes) {
      for (const TagRef& ref : Chain(RefOf(scope))) held_before.push_back(ref);
    }
    auto same_call = [](const TagRef& a, const TagRef& b) {
      return a.tag == b.tag && (a.call == b.call || a.call == TagRef::kEveryCall || b.call == TagRef::kEveryCall);
    };
    std::vector<TagRef> replaced = Chain(RefOf(record.replaced));
    std::vector<TagRef> rewired;
    for (const TagRef& ref : Chain(RefOf(record.reader))) {
      auto in = [&](const std::vector<TagRef>& refs) {
        return std::any_of(refs.begin(), refs.end(), [&](const TagRef& other) { return same_call(ref, other); });
      };
      if (in(replaced) && !in(held_before)) rewired.push_back(ref);
    }
    std::sort(rewired.begin(), rewired.end());
    return rewired;
  }

  // A call and the calls it ran in, up to the root (calls unknown above a call
  // whose own is unknown).
  std::vector<TagRef> Chain(TagRef ref) const {
    std::vector<TagRef> chain;
    if (ref.tag < 0) ref = {CallTags::kRoot, 0};  // a blank scope: the root's own work
    while (ref.tag >= 0) {
      if (ref.call == TagRef::kEveryCall && result_.CallCount(ref.tag) == 1) ref.call = 0;
      chain.push_back(ref);
      int parent = call_tags_.Parent(ref.tag);
      int call = TagRef::kEveryCall;
      auto calls = result_.calls.find(ref.tag);
      if (ref.call != TagRef::kEveryCall && calls != result_.calls.end() &&
          ref.call < static_cast<int>(calls->second.parent_calls.size())) {
        call = calls->second.parent_calls[ref.call];
      } else if (parent >= 0 && result_.CallCount(parent) == 1) {
        call = 0;
      }
      ref = {parent, call};
    }
    return chain;
  }

  // The call a scope records: its call tag, and which of that tag's calls it was.
  TagRef RefOf(const torch::jit::ScopePtr& scope) {
    ResolvedScope resolved = resolver_.Resolve(scope);
    auto ordinal = resolved.call_scope ? call_ordinal_.find(resolved.call_scope) : call_ordinal_.end();
    return {resolved.tag, ordinal == call_ordinal_.end() ? TagRef::kEveryCall : ordinal->second};
  }

  static void AddRef(const TagRef& ref, std::vector<TagRef>* refs) {
    if (ref.tag >= 0 && std::find(refs->begin(), refs->end(), ref) == refs->end()) refs->push_back(ref);
  }

  static void AddTag(int tag, std::vector<int>* tags) {
    if (tag >= 0 && std::find(tags->begin(), tags->end(), tag) == tags->end()) tags->push_back(tag);
  }

  // The call tag of the tagged module owning the parameter: its only call tag;
  // the tag of its place in the module tree when it has none; else -1.
  int DeduplicatedParameterOwner(Node* node) const {
    if (node->kind() != c10::onnx::Identity || node->inputs().size() != 1 ||
        node->outputs().size() != 1 || node->input(0)->node()->kind() != c10::prim::Param) {
      return -1;
    }
    const std::string& name = node->output(0)->debugName();
    if (member_names_.count(name) == 0) return -1;
    int owner = modules_.FindOwnerOfMember(name);
    if (owner < 0) return -1;
    owner = modules_.TagOwner(owner);
    if (owner == 0) return CallTags::kRoot;
    int found = -1;
    for (int tag = 1; tag < call_tags_.size(); ++tag) {
      if (call_tags_.Module(tag) != owner) continue;
      if (found >= 0) return -1;
      found = tag;
    }
    if (found >= 0) return found;
    std::vector<int> chain;
    for (int module = owner; module >= 0; module = modules_.at(module).parent) chain.push_back(module);
    std::reverse(chain.begin(), chain.end());
    return call_tags_.FromChain(chain);
  }

  void Settle(size_t i, int tag, TagRule rule) {
    result_.nodes[i].tag = tag;
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
    return it == index_.end() ? -2 : result_.nodes[it->second].tag;
  }

  int HolderTag(const Block* block) const {
    const Node* holder = block->owningNode();
    if (holder == nullptr) return 0;
    auto it = index_.find(holder);
    return it == index_.end() ? -2 : result_.nodes[it->second].tag;
  }

  int ConsumerTag(const torch::jit::Use& use) const {
    Node* user = use.user;
    if (user->kind() == c10::prim::Return) return HolderTag(user->owningBlock());
    auto it = index_.find(user);
    return it == index_.end() ? -2 : result_.nodes[it->second].tag;
  }

  // Folds a neighbour's tag into `common`; returns false if the neighbour waits.
  bool Fold(int neighbour, int* common) const {
    if (neighbour == -2) return true;
    if (neighbour == kUnsettled) return false;
    *common = *common < 0 ? neighbour : call_tags_.CommonAncestor(*common, neighbour);
    return true;
  }

  // Applies enclosing / consumers / neighbours to node i. With `settle_partial`
  // a node whose neighbours are partly unsettled settles on the known ones.
  bool TryRules(size_t i, bool settle_partial) {
    Node* node = result_.nodes[i].node;
    if (holder_[i] != nullptr) {
      int enclosing = result_.nodes[index_.at(holder_[i])].tag;
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
      if (result_.nodes[i].tag == kUnsettled) waiting.push_back(i);
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
  CallTags& call_tags_;
  const BorrowedScopes& borrowed_;
  const std::unordered_set<std::string>& member_names_;
  int user_input_count_;
  const ModuleCalls* calls_;
  const RewriteLog* rewrites_;
  ScopeResolver resolver_;
  std::unordered_map<const torch::jit::Scope*, int> call_ordinal_;  // call scope -> its tag's call
  HierarchyTagging result_;
  std::unordered_map<const Node*, size_t> index_;
  std::vector<Node*> holder_;
};

}  // namespace

HierarchyTagging AssignHierarchyTags(Graph& graph, const ModuleTable& modules, CallTags& call_tags,
                                     const BorrowedScopes& borrowed,
                                     const std::unordered_set<std::string>& member_names,
                                     int user_input_count, const ModuleCalls* calls,
                                     const RewriteLog* rewrites) {
  return Tagger(graph, modules, call_tags, borrowed, member_names, user_input_count, calls, rewrites).Run();
}

}  // namespace hiertag
