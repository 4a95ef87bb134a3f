// AssignHierarchyTags: recorded scopes first, then the documented rules.
#include "hiertag/passes/assign_hierarchy_tags.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "hiertag/passes/graph_walk.h"
#include "hiertag/passes/scope_resolution.h"

namespace hiertag {

using torch::jit::Block;
using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

namespace {

constexpr int kUnsettled = -1;
constexpr int kNotCollected = -2;  // SettledOf's tag for a node the serializer skips

// torch's Node::mustBeNone (what the serializer skips), without a reference
// count taken per call: it runs for every node of the graph.
bool MustBeNone(Node* node) {
  static const c10::Type* const kNone = c10::NoneType::get().get();
  if (node->kind() == c10::prim::AutogradZero) return true;
  if (node->outputs().size() != 1) return false;
  const c10::TypePtr& type = node->output()->type();
  return type.get() == kNone ||
         (node->kind() == c10::prim::Constant && !node->hasAttributes() && type->cast<c10::OptionalType>());
}

// Whether torch's serializer writes the node (export.cpp skips the others).
bool IsSerialized(Node* node) {
  static const c10::Symbol kLocalFunctionDef = c10::Symbol::onnx("LocalFunctionDef");
  return node->kind() != kLocalFunctionDef && !MustBeNone(node);
}

class Tagger {
 public:
  Tagger(Graph& graph, const ModuleTable& modules, CallTags& call_tags, const BorrowedScopes& borrowed,
         const std::unordered_set<std::string>& member_names, int user_input_count, const ModuleCalls* calls,
         const RewriteLog* rewrites, const InstanceScopeSymbols* symbols)
      : graph_(graph),
        modules_(modules),
        call_tags_(call_tags),
        borrowed_(borrowed),
        member_names_(member_names),
        user_input_count_(user_input_count),
        calls_(calls),
        rewrites_(rewrites),
        resolver_(modules, call_tags, symbols) {}

  HierarchyTagging Run() {
    NumberCalls();
    ResolveRewrites();
    CollectPreOrder(graph_.block(), nullptr);
    // After every record, so the owners' call tags are all known.
    IndexOnlyTags();
    for (size_t i : unsettled_) {
      int owner = DeduplicatedParameterOwner(JitNode(result_.nodes[i]));
      if (owner >= 0) Settle(i, owner, TagRule::kParameterOwner);
    }
    SettleByRules();
    InheritCalls();
    KeepReadingCallsOnly();
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
  // Numbers each call tag's calls in the order they ran (NumberCalls). A
  // call of a filtered module is no call of a tag (its nodes belong to its
  // caller's).
  void NumberCalls() {
    if (calls_ == nullptr) return;
    for (const ModuleCall& call : calls_->calls()) call_tags_.MarkRan(call.module);
    call_tags_.MarkRan(0);
    std::vector<RecordedCall> recorded;
    ska::flat_hash_map<const torch::jit::Scope*, int> index_of_scope;
    for (const ModuleCall& call : calls_->calls()) {
      ResolvedScope resolved = resolver_.Resolve(call.scope);
      auto caller = call.scope->parent() ? index_of_scope.find(call.scope->parent().get()) : index_of_scope.end();
      recorded.push_back({resolved.tag, call.module, resolved.call_scope == call.scope.get(),
                          caller == index_of_scope.end() ? -1 : caller->second});
      index_of_scope[call.scope.get()] = static_cast<int>(recorded.size()) - 1;
    }
    std::vector<int> ordinals = ::hiertag::NumberCalls(recorded, result_);
    for (size_t k = 0; k < ordinals.size(); ++k) {
      if (ordinals[k] >= 0) call_ordinal_[calls_->calls()[k].scope.get()] = ordinals[k];
    }
  }

  void ResolveRewrites() {
    if (rewrites_ == nullptr) return;
    CallRefs refs(call_tags_, result_);
    for (const RewriteRecord& record : rewrites_->records) {
      std::vector<TagRef> calls;
      std::vector<int> sources;
      if (record.kind == RewriteKind::kRewired) {
        calls = RewiredCalls(record, refs);
      } else {
        for (const auto& scope : record.scopes) {
          if (record.kind == RewriteKind::kFolded && borrowed_.Find(scope) != nullptr) {
            sources.push_back(folded_sources_.SourceOf(KeyOf(scope)));
          } else {
            calls.push_back(RefOf(scope));
          }
        }
      }
      AddRewrite(record.kind, record.pass, std::move(calls), record.initializer, refs, result_, std::move(sources));
    }
  }

  // A node a rule tagged belongs to the call of a reader with the same tag
  // (CallsOfReaders). Only rules tag the nodes of unsettled_.
  void InheritCalls() {
    std::vector<size_t> listed;
    ska::flat_hash_map<const Node*, int> place;
    for (size_t i : unsettled_) {
      const TaggedNode& tagged = result_.nodes[i];
      if (tagged.rule == TagRule::kRecorded || result_.CallCount(tagged.tag) < 2) continue;
      place[JitNode(tagged)] = static_cast<int>(listed.size());
      listed.push_back(i);
    }
    if (listed.empty()) return;
    std::vector<RulePlacedNode> nodes(listed.size());
    for (size_t k = 0; k < listed.size(); ++k) {
      const TaggedNode& tagged = result_.nodes[listed[k]];
      nodes[k].tag = tagged.tag;
      nodes[k].call = tagged.call;
      for (const Value* output : JitNode(tagged)->outputs()) {
        for (const torch::jit::Use& use : output->uses()) {
          if (use.user->kind() == c10::prim::Return) continue;
          auto listed_reader = place.find(use.user);
          if (listed_reader != place.end()) {
            nodes[k].readers.push_back({Unplaced(listed_reader->second), 0});
            continue;
          }
          Settled reader = SettledOf(use.user);
          if (reader.tag >= 0) nodes[k].readers.push_back({reader.tag, reader.call});
        }
      }
    }
    std::vector<int> calls = CallsOfReaders(nodes);
    for (size_t k = 0; k < listed.size(); ++k) result_.nodes[listed[k]].call = calls[k];
  }

  // A constant (a node without inputs) is weights, nobody's data: each module
  // call reading it copies it. CSE keeps one constant for equal ones of many
  // calls, and the conversion to ONNX gives each reader a copy of it, each
  // copy listing every call CSE merged (in a deep decoder each layer's
  // constants listed every layer: a file growing with the square of the
  // depth). So a constant stays shared only with the calls whose nodes read
  // it (a weights-only module reading another call's constant, BEiT's
  // relative position bias, keeps it).
  void KeepReadingCallsOnly() {
    CallRefs refs(call_tags_, result_);
    for (TaggedNode& tagged : result_.nodes) {
      if (tagged.shared_with().empty() || !JitNode(tagged)->inputs().empty()) continue;
      std::vector<TagRef> reading;  // the calls its readers ran as, and those they are shared with
      for (const Value* output : JitNode(tagged)->outputs()) {
        for (const torch::jit::Use& use : output->uses()) {
          Node* reader = use.user;
          if (reader->kind() == c10::prim::Return) reader = reader->owningBlock()->owningNode();
          if (reader == nullptr) {
            reading.push_back({CallTags::kRoot, 0});  // a model output: read by the root's call 0
            continue;
          }
          Settled settled = SettledOf(reader);
          if (settled.tag < 0) continue;
          reading.push_back({settled.tag, settled.call});
          auto shared = with_shared_with_.find(reader);
          if (shared == with_shared_with_.end()) continue;
          for (const TagRef& ref : result_.nodes[shared->second].shared_with()) reading.push_back(ref);
        }
      }
      refs.KeepReadingCalls(reading, tagged);
    }
  }

  // Collects the serialized nodes in pre-order and settles each one its
  // record tags, in one visit (a node's memory is read once). `holder`: the
  // node whose subgraph `block` is (nullptr for the graph's). The walk
  // (graph_walk.h) reads the nodes ahead of the one it visits, so their
  // cache misses overlap with the work on it.
  void CollectPreOrder(Block* block, Node* holder) {
    VisitNodesAndReturns(block, [&](Node* node) {
      if (node->kind() == c10::prim::Return) return true;
      Block* owner = node->owningBlock();
      Node* node_holder = owner == block ? holder : owner->owningNode();
      // In a nested block of a node the serializer skips: skipped with it.
      if (owner != block && !Collected(node_holder)) return true;
      if (!IsSerialized(node)) return true;
      size_t i = result_.nodes.size();
      holder_.push_back(node_holder);
      result_.nodes.push_back({node, kUnsettled, -1, 0, TagRule::kRoot, nullptr});
      TagFromRecord(i);
      // Looked up by node only when a later rule or a loan may still change it.
      if (result_.nodes[i].tag == kUnsettled) unsettled_.push_back(i);
      if (result_.nodes[i].tag == kUnsettled || !result_.nodes[i].spans().empty()) later_[node] = i;
      if (!result_.nodes[i].shared_with().empty()) with_shared_with_[node] = i;
      if (node->hasAttributes()) {
        for (c10::Symbol name : node->attributeNames()) {
          if (node->kindOf(name) == torch::jit::AttributeKind::g) {
            CollectPreOrder(node->g(name)->block(), node);
          } else if (node->kindOf(name) == torch::jit::AttributeKind::gs) {
            for (const auto& graph : node->gs(name)) CollectPreOrder(graph->block(), node);
          }
        }
      }
      return true;  // the walk goes on into the node's blocks
    });
  }

  // What a node's record says: its call tag (kUnsettled: none) and call.
  struct Record {
    int tag = kUnsettled;
    int call = 0;
    TagRef own;
    const BorrowedScopes::Loan* loan = nullptr;
  };

  // Nodes without a call stack: one record per scope, made once (most nodes
  // follow one of their scope) and kept by the scope's number in the
  // resolver. Scopes outlive the pass (nodes hold them).
  Record RecordOf(Node* node) {
    torch::jit::ScopePtr scope = node->scope();
    std::optional<torch::jit::InlinedCallStackPtr> callstack = node->callstack();
    if (callstack && *callstack) return ResolveRecord(scope, callstack);
    if (scope.get() == last_scope_) return last_record_;
    int number = -1;
    ResolvedScope resolved = resolver_.Resolve(scope, &number);
    if (number < 0) return RecordFrom(resolved);  // blank or root: no record, nothing lent
    if (number >= static_cast<int>(record_of_scope_.size())) {
      record_of_scope_.resize(resolver_.scope_count(), Record{kNotMade, 0, {}, nullptr});
    }
    Record& record = record_of_scope_[number];
    if (record.tag == kNotMade) {
      const BorrowedScopes::Loan* loan = borrowed_.empty() ? nullptr : borrowed_.Find(scope);
      record = RecordFrom(loan ? resolver_.Resolve(loan->recorded) : resolved);
      record.loan = loan;
    }
    last_scope_ = scope.get();
    last_record_ = record;
    return record;
  }

  Record ResolveRecord(const torch::jit::ScopePtr& scope,
                       const std::optional<torch::jit::InlinedCallStackPtr>& callstack) {
    const BorrowedScopes::Loan* loan = borrowed_.empty() ? nullptr : borrowed_.Find(scope);
    Record record = RecordFrom(resolver_.Resolve(loan ? loan->recorded : scope, callstack));
    record.loan = loan;
    return record;
  }

  // The record of a node resolved to `resolved`, lent nothing.
  Record RecordFrom(const ResolvedScope& resolved) const {
    Record record;
    if (resolved.tag >= 0) {
      record.tag = resolved.tag;
      auto ordinal = resolved.call_scope ? call_ordinal_.find(resolved.call_scope) : call_ordinal_.end();
      if (ordinal != call_ordinal_.end()) record.call = ordinal->second;
      record.own = {resolved.tag, ordinal == call_ordinal_.end() ? TagRef::kEveryCall : ordinal->second};
    }
    return record;
  }

  void TagFromRecord(size_t i) {
    TaggedNode& tagged = result_.nodes[i];
    Record record = RecordOf(JitNode(tagged));
    if (record.tag == kUnsettled) return;
    Settle(i, record.tag, TagRule::kRecorded);
    tagged.call = record.call;
    if (record.loan) TakeLoan(*record.loan, tagged, record.own);
  }

  // A collected node's tag and call as they stand: nodes a rule or a loan
  // settles are looked up, the others (most) are their record, resolved again
  // from the resolver's cache. {kNotCollected, 0} for a node that is not collected.
  struct Settled {
    int tag;
    int call;
  };
  Settled SettledOf(Node* node) {
    auto later = later_.find(node);
    if (later != later_.end()) return {result_.nodes[later->second].tag, result_.nodes[later->second].call};
    if (!Collected(node)) return {kNotCollected, 0};
    Record record = RecordOf(node);
    return {record.tag, record.call};
  }

  // Whether CollectPreOrder reaches a node: neither it nor a node holding it is skipped.
  static bool Collected(Node* node) {
    for (; node != nullptr; node = node->owningBlock()->owningNode()) {
      if (!IsSerialized(node) || node->kind() == c10::prim::Param || node->kind() == c10::prim::Return) {
        return false;
      }
    }
    return true;
  }

  // A loan's scopes as calls (CallRefs::TakeLoan says what becomes of them).
  void TakeLoan(const BorrowedScopes::Loan& loan, TaggedNode& tagged, const TagRef& own) {
    RefLoan refs;
    for (const auto& other : loan.shared_with) refs.shared_with.push_back(RefOf(other));
    for (const auto& folded : loan.folded_from) {
      if (borrowed_.Find(folded) != nullptr) {
        refs.folded_sources.push_back(folded_sources_.SourceOf(KeyOf(folded)));
      } else {
        refs.folded_from.push_back(resolver_.Resolve(folded).tag);
      }
    }
    for (const auto& fused : loan.spans) refs.spans.push_back(RefOf(fused));
    refs.rewrite = loan.rewrite;
    CallRefs(call_tags_, result_).TakeLoan(refs, own, !JitNode(tagged)->inputs().empty(), tagged);
  }

  // The calls a rewired record cuts (CallRefs::RewiredCalls). A graph input
  // is the root call's; a parameter is nobody's data.
  std::vector<TagRef> RewiredCalls(const RewriteRecord& record, const CallRefs& refs) {
    bool user_input = record.graph_input >= 0 && (user_input_count_ < 0 || record.graph_input < user_input_count_);
    if (record.graph_input >= 0 && !user_input) return {};
    std::vector<TagRef> value_refs;
    for (const auto& scope : record.value_scopes) value_refs.push_back(RefOf(scope));
    return refs.RewiredCalls(RefOf(record.reader), RefOf(record.replaced), value_refs, user_input);
  }

  // A lent node a fold read, by its borrowed scope (FoldedSourceTable): its
  // loan's scopes as call tags, and the borrowed ones among them as lent nodes.
  static uint64_t KeyOf(const torch::jit::ScopePtr& scope) { return reinterpret_cast<uintptr_t>(scope.get()); }
  void ExpandLoan(uint64_t key, std::vector<int>* tags, std::vector<uint64_t>* lent) {
    auto scope = c10::intrusive_ptr<torch::jit::Scope>::unsafe_reclaim_from_nonowning(
        reinterpret_cast<torch::jit::Scope*>(static_cast<uintptr_t>(key)));
    const BorrowedScopes::Loan* loan = borrowed_.Find(scope);
    if (loan == nullptr) return;
    auto add = [&](const torch::jit::ScopePtr& listed) {
      if (IsBlankScope(listed)) return;
      if (borrowed_.Find(listed) != nullptr) {
        lent->push_back(KeyOf(listed));
      } else {
        tags->push_back(resolver_.Resolve(listed).tag);
      }
    };
    add(loan->recorded);
    for (const auto& other : loan->spans) add(other);
    for (const auto& other : loan->folded_from) add(other);
    for (const auto& other : loan->shared_with) add(other);
  }

  // The call a scope records: its call tag, and which of that tag's calls it was.
  TagRef RefOf(const torch::jit::ScopePtr& scope) {
    ResolvedScope resolved = resolver_.Resolve(scope);
    auto ordinal = resolved.call_scope ? call_ordinal_.find(resolved.call_scope) : call_ordinal_.end();
    return {resolved.tag, ordinal == call_ordinal_.end() ? TagRef::kEveryCall : ordinal->second};
  }

  // The call tag of the tagged module owning the parameter: its only call tag;
  // the tag of its place in the module tree when it has none; else -1.
  int DeduplicatedParameterOwner(Node* node) const {
    if (node->kind() != c10::onnx::Identity || node->inputs().size() != 1 || node->outputs().size() != 1 ||
        node->input(0)->node()->kind() != c10::prim::Param) {
      return -1;
    }
    const std::string& name = node->output(0)->debugName();
    if (member_names_.count(name) == 0) return -1;
    int owner = modules_.FindOwnerOfMember(name);
    if (owner < 0) return -1;
    owner = modules_.TagOwner(owner);
    if (owner == 0) return CallTags::kRoot;
    int only = only_tag_[owner];
    if (only == kSeveralTags) return -1;
    if (only >= 0) return only;
    std::vector<int> chain;
    for (int module = owner; module >= 0; module = modules_.at(module).parent) chain.push_back(module);
    std::reverse(chain.begin(), chain.end());
    return call_tags_.FromChain(chain);
  }

  // Each module's only call tag (kNoTag, or kSeveralTags), as the records left them.
  void IndexOnlyTags() {
    only_tag_.assign(modules_.size(), kNoTag);
    for (int tag = 1; tag < call_tags_.size(); ++tag) {
      int& only = only_tag_[call_tags_.Module(tag)];
      only = only == kNoTag ? tag : kSeveralTags;
    }
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

  // What the rules read of a node (placement_rules.h): its tag, Unplaced(k)
  // while it waits (k its place in `waiting_of_`), kNotCounted when it is not
  // serialized. kNotCounted lies below every Unplaced(k) a graph can have.
  static constexpr int kNotCounted = std::numeric_limits<int>::min();
  int RuleRef(Node* node) {
    int tag = SettledOf(node).tag;
    if (tag == kNotCollected) return kNotCounted;
    if (tag != kUnsettled) return tag;
    return Unplaced(waiting_of_.at(later_.at(node)));
  }

  // A value's producer: the root for user inputs, the holder for body
  // parameters; an initializer does not count.
  int ProducerRef(const Value* value) {
    const Node* producer = value->node();
    if (producer->kind() == c10::prim::Param) {
      if (producer->owningBlock() == graph_.block()) return IsUserInput(value) ? CallTags::kRoot : kNotCounted;
      return HolderRef(producer->owningBlock());
    }
    return RuleRef(const_cast<Node*>(producer));
  }

  int HolderRef(const Block* block) {
    const Node* holder = block->owningNode();
    if (holder == nullptr) return CallTags::kRoot;
    return RuleRef(const_cast<Node*>(holder));
  }

  int ConsumerRef(const torch::jit::Use& use) {
    Node* user = use.user;
    if (user->kind() == c10::prim::Return) return HolderRef(user->owningBlock());
    return RuleRef(user);
  }

  // The nodes no record placed, described for PlaceByRules and placed by it.
  void SettleByRules() {
    std::vector<size_t> waiting;
    for (size_t i : unsettled_) {
      if (result_.nodes[i].tag != kUnsettled) continue;
      waiting_of_[i] = static_cast<int>(waiting.size());
      waiting.push_back(i);
    }
    if (waiting.empty()) return;
    std::vector<UnplacedNode> unplaced(waiting.size());
    auto add = [](int ref, UnplacedNode& node) {
      if (ref != kNotCounted) node.neighbours.push_back(ref);
    };
    for (size_t k = 0; k < waiting.size(); ++k) {
      size_t i = waiting[k];
      UnplacedNode& node = unplaced[k];
      if (holder_[i] != nullptr) {
        node.holder = RuleRef(holder_[i]);
        continue;
      }
      Node* jit_node = JitNode(result_.nodes[i]);
      for (const Value* output : jit_node->outputs()) {
        for (const torch::jit::Use& use : output->uses()) add(ConsumerRef(use), node);
      }
      node.has_inputs = !jit_node->inputs().empty();
      for (const Value* input : jit_node->inputs()) add(ProducerRef(input), node);
      for (const Value* output : jit_node->outputs()) {
        for (const Value* graph_output : graph_.outputs()) {
          if (output == graph_output) add(CallTags::kRoot, node);
        }
      }
    }
    std::vector<Placement> placements = PlaceByRules(unplaced, call_tags_);
    for (size_t k = 0; k < waiting.size(); ++k) {
      Settle(waiting[k], placements[k].tag, placements[k].rule);
      if (placements[k].rule == TagRule::kRoot) {
        GRAPH_DEBUG("hiertag: no rule applies to ", *JitNode(result_.nodes[waiting[k]]), "; tagging it root");
      }
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
  ska::flat_hash_map<const torch::jit::Scope*, int> call_ordinal_;  // call scope -> its tag's call
  HierarchyTagging result_;
  FoldedSourceTable folded_sources_{result_, [this](uint64_t key, std::vector<int>* tags, std::vector<uint64_t>* lent) {
                                      ExpandLoan(key, tags, lent);
                                    }};
  ska::flat_hash_map<const Node*, size_t> later_;             // nodes no record settles for good -> index
  ska::flat_hash_map<const Node*, size_t> with_shared_with_;  // nodes shared with other calls -> index
  std::vector<size_t> unsettled_;                             // nodes no record tags, in pre-order
  ska::flat_hash_map<size_t, int> waiting_of_;                // node index -> its place among the rules' nodes
  static constexpr int kNotMade = -3;                         // a Record's tag before RecordOf made it
  std::vector<Record> record_of_scope_;                       // by the scope's number in resolver_
  const torch::jit::Scope* last_scope_ = nullptr;
  Record last_record_;
  std::vector<Node*> holder_;  // per node, the node whose block or subgraph holds it
  static constexpr int kNoTag = -1, kSeveralTags = -2;
  std::vector<int> only_tag_;  // module -> its only call tag
};

}  // namespace

HierarchyTagging AssignHierarchyTags(Graph& graph, const ModuleTable& modules, CallTags& call_tags,
                                     const BorrowedScopes& borrowed,
                                     const std::unordered_set<std::string>& member_names, int user_input_count,
                                     const ModuleCalls* calls, const RewriteLog* rewrites,
                                     const InstanceScopeSymbols* symbols) {
  return Tagger(graph, modules, call_tags, borrowed, member_names, user_input_count, calls, rewrites, symbols).Run();
}

}  // namespace hiertag
