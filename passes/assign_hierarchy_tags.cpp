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

std::vector<int> HierarchyTagging::UsedTags() const {
  std::vector<int> used;
  for (const TaggedNode& tagged : nodes) {
    used.push_back(tagged.tag);
    if (!tagged.records) continue;
    for (const TagRef& ref : tagged.records->shared_with) used.push_back(ref.tag);
    for (const TagRef& ref : tagged.records->spans) used.push_back(ref.tag);
    used.insert(used.end(), tagged.records->folded_from.begin(), tagged.records->folded_from.end());
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
      int owner = DeduplicatedParameterOwner(result_.nodes[i].node);
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
      if (rewrite.kind == RewriteRecord::Kind::kRemoved && rewrite.refs.size() < 2) continue;
      if (rewrite.kind == RewriteRecord::Kind::kFolded && rewrite.refs.empty()) continue;
      if (rewrite.kind == RewriteRecord::Kind::kRemoved) rewrite.refs = CallsBetween(rewrite.refs);
      std::sort(rewrite.refs.begin(), rewrite.refs.end());
      result_.rewrites.push_back(std::move(rewrite));
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
      place[tagged.node] = static_cast<int>(listed.size());
      listed.push_back(i);
    }
    if (listed.empty()) return;
    std::vector<RulePlacedNode> nodes(listed.size());
    for (size_t k = 0; k < listed.size(); ++k) {
      const TaggedNode& tagged = result_.nodes[listed[k]];
      nodes[k].tag = tagged.tag;
      nodes[k].call = tagged.call;
      for (const Value* output : tagged.node->outputs()) {
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
    for (TaggedNode& tagged : result_.nodes) {
      if (tagged.shared_with().empty() || !tagged.node->inputs().empty()) continue;
      std::unordered_set<int64_t> reading;  // a call some reader ran in (Key), or every call of a tag
      std::unordered_set<int> reading_tags;
      auto add = [&](const TagRef& ref) {
        for (const TagRef& call : Chain(ref)) {
          reading.insert(Key(call));
          reading_tags.insert(call.tag);
        }
      };
      for (const Value* output : tagged.node->outputs()) {
        for (const torch::jit::Use& use : output->uses()) {
          Node* reader = use.user;
          if (reader->kind() == c10::prim::Return) reader = reader->owningBlock()->owningNode();
          if (reader == nullptr) {
            add({CallTags::kRoot, 0});  // a model output: read by the root's call 0
            continue;
          }
          Settled settled = SettledOf(reader);
          if (settled.tag < 0) continue;
          add({settled.tag, settled.call});
          auto shared = with_shared_with_.find(reader);
          if (shared == with_shared_with_.end()) continue;
          for (const TagRef& ref : result_.nodes[shared->second].shared_with()) add(ref);
        }
      }
      std::vector<TagRef>& shared = tagged.records->shared_with;
      shared.erase(std::remove_if(shared.begin(), shared.end(),
                                  [&](const TagRef& ref) {
                                    if (ref.call == TagRef::kEveryCall) return reading_tags.count(ref.tag) == 0;
                                    return reading.count(Key(ref)) == 0 &&
                                           reading.count(Key({ref.tag, TagRef::kEveryCall})) == 0;
                                  }),
                   shared.end());
      if (tagged.records->empty()) tagged.records.reset();
    }
  }

  static int64_t Key(const TagRef& ref) { return (static_cast<int64_t>(ref.tag) << 32) | (ref.call + 1); }

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
    Record record = RecordOf(tagged.node);
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

  // shared_with and spans from a loan; a fused node moves to the common
  // ancestor of every module it carries.
  void TakeLoan(const BorrowedScopes::Loan& loan, TaggedNode& tagged, const TagRef& own) {
    auto records = std::make_unique<NodeRecords>();
    for (const auto& other : loan.shared_with) AddRef(RefOf(other), &records->shared_with);
    for (const auto& folded : loan.folded_from) AddTag(resolver_.Resolve(folded).tag, &records->folded_from);
    std::vector<TagRef> spans = {own};
    for (const auto& fused : loan.spans) AddRef(RefOf(fused), &spans);
    if (spans.size() > 1 && tagged.node->inputs().empty()) {
      // A fused node a later pass folded into a constant: no value crosses a
      // boundary through it any more (constants are weights), so it only says
      // what the modules' nodes became.
      for (size_t k = 1; k < spans.size(); ++k) AddTag(spans[k].tag, &records->folded_from);
    } else if (spans.size() > 1) {
      int common = spans.front().tag;
      for (const TagRef& span : spans) common = call_tags_.CommonAncestor(common, span.tag);
      tagged.tag = common;
      records->spans = CallsBetween(spans);
      records->rewrite = loan.rewrite;
      std::sort(records->spans.begin(), records->spans.end());
    }
    // Not shared with itself: its own call, or its own tag when the calls are unknown.
    std::vector<TagRef>& shared = records->shared_with;
    shared.erase(std::remove_if(shared.begin(), shared.end(),
                                [&](const TagRef& ref) {
                                  return ref.tag == tagged.tag &&
                                         (ref.call == own.call || ref.call == TagRef::kEveryCall ||
                                          own.call == TagRef::kEveryCall);
                                }),
                 shared.end());
    std::sort(shared.begin(), shared.end());
    if (!records->empty()) tagged.records = std::move(records);
  }

  // The calls holding a rewired reader and the node it read before, but
  // neither the maker nor a reader of the value it reads now: where they read a
  // value of their own, they now read one they never received. A graph input
  // is the root call's; a parameter is nobody's data.
  std::vector<TagRef> RewiredCalls(const RewriteRecord& record) {
    bool user_input = record.graph_input >= 0 && (user_input_count_ < 0 || record.graph_input < user_input_count_);
    if (record.graph_input >= 0 && !user_input) return {};
    std::vector<TagRef> held_before;
    if (user_input) held_before.push_back({CallTags::kRoot, 0});
    for (const auto& scope : record.value_scopes) {
      for (const TagRef& ref : Chain(RefOf(scope))) held_before.push_back(ref);
    }
    std::vector<TagRef> replaced = Chain(RefOf(record.replaced));
    std::vector<TagRef> rewired;
    for (const TagRef& ref : Chain(RefOf(record.reader))) {
      if (Holds(replaced, ref) && !Holds(held_before, ref)) rewired.push_back(ref);
    }
    std::sort(rewired.begin(), rewired.end());
    return rewired;
  }

  // The calls a rewrite joining the calls `ends` cuts through: the ends, and
  // every call on the way from one end to another, i.e. each call some end
  // ran in but not every end did (a cancelled permute pair between a norm deep
  // in the last layer and the encoder's final permute leaves the norm, its
  // output block and the layer all handing out the value from before the
  // norm's permute). The calls every end ran in hold the whole rewrite.
  std::vector<TagRef> CallsBetween(const std::vector<TagRef>& ends) const {
    std::vector<std::vector<TagRef>> chains;
    for (const TagRef& end : ends) chains.push_back(Chain(end));
    std::vector<TagRef> crossed = ends;
    for (const std::vector<TagRef>& chain : chains) {
      for (const TagRef& ref : chain) {
        bool in_every = std::all_of(chains.begin(), chains.end(),
                                    [&](const std::vector<TagRef>& other) { return Holds(other, ref); });
        if (!in_every && !Holds(crossed, ref)) crossed.push_back(ref);
      }
    }
    std::sort(crossed.begin(), crossed.end());
    return crossed;
  }

  // Whether `refs` names the call `ref` names (an unknown call matches every call).
  static bool Holds(const std::vector<TagRef>& refs, const TagRef& ref) {
    return std::any_of(refs.begin(), refs.end(), [&](const TagRef& other) {
      return other.tag == ref.tag &&
             (other.call == ref.call || other.call == TagRef::kEveryCall || ref.call == TagRef::kEveryCall);
    });
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
      Node* jit_node = result_.nodes[i].node;
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
        GRAPH_DEBUG("hiertag: no rule applies to ", *result_.nodes[waiting[k]].node, "; tagging it root");
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
