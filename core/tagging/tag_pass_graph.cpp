// TagPassGraph: owners to call tags, the placement rules for the rest, and
// the records as the file keeps them.
#include "hiertag/core/tagging/tag_pass_graph.h"

#include <algorithm>
#include <limits>
#include <unordered_map>

namespace hiertag {
namespace {

constexpr int kUnsettled = -1;
constexpr uint32_t kNone = PassGraph::kMade;
// A neighbour the rules do not count (an initializer); below every Unplaced(k).
constexpr int kNotCounted = std::numeric_limits<int>::min();

class Tagger {
 public:
  Tagger(const TaggedGraph& graph, const std::vector<ModuleCallRecord>& calls, const std::vector<OwnerLoan>& loans,
         const std::vector<PassRecord>& records, const ModuleTable& modules, CallTags& call_tags)
      : graph_(graph.graph),
        described_(graph),
        calls_(calls),
        loans_(loans),
        records_(records),
        modules_(modules),
        call_tags_(call_tags) {}

  PassGraphTagging Run() {
    NumberCalls();
    for (uint32_t i = 0; i < graph_.size(); ++i) {
      if (graph_.nodes[i].is_return) continue;
      index_of_[i] = static_cast<int>(result_.graph_index.size());
      result_.graph_index.push_back(i);
      result_.tagging.nodes.push_back({nullptr, kUnsettled, -1, 0, TagRule::kRoot, nullptr});
    }
    IndexValues();
    CallRefs refs(call_tags_, result_.tagging);
    for (size_t k = 0; k < result_.graph_index.size(); ++k) TagFromRecord(k, refs);
    SettleByRules();
    InheritCalls();
    for (size_t k = 0; k < result_.graph_index.size(); ++k) {
      TaggedNode& tagged = result_.tagging.nodes[k];
      if (!tagged.shared_with().empty() && graph_.InputsOf(result_.graph_index[k]).empty()) {
        refs.KeepReadingCalls(ReaderRefs(result_.graph_index[k]), tagged);
      }
    }
    for (int tag = 0; tag < call_tags_.size(); ++tag) {
      if (!call_tags_.Ran(call_tags_.Module(tag))) result_.tagging.never_ran.insert(tag);
    }
    for (const PassRecord& record : records_) AddRecord(record, refs);
    for (TaggedNode& tagged : result_.tagging.nodes) {
      tagged.tag_module = call_tags_.Module(tagged.tag);
      ++result_.tagging.rule_counts[static_cast<int>(tagged.rule)];
    }
    return std::move(result_);
  }

 private:
  // Each call's tag, whether it is a call of a tag of its own, and its
  // number among its tag's calls.
  void NumberCalls() {
    call_tags_.MarkRan(0);
    std::vector<RecordedCall> recorded;
    for (const ModuleCallRecord& call : calls_) {
      call_tags_.MarkRan(call.module);
      int caller_tag = call.caller >= 0 ? tag_of_call_.at(call.caller) : CallTags::kRoot;
      int tag = call.module == 0 && call.caller < 0 ? CallTags::kRoot : call_tags_.Call(caller_tag, call.module);
      tag_of_call_.push_back(tag);
      recorded.push_back({tag, call.module, call.caller < 0 || tag != caller_tag, call.caller});
    }
    ordinal_ = ::hiertag::NumberCalls(recorded, result_.tagging);
    own_tag_.reserve(recorded.size());
    for (const RecordedCall& call : recorded) own_tag_.push_back(call.own_tag);
  }

  // The call an owner records: its call tag, and which of that tag's calls it was.
  TagRef RefOf(Owner owner) const {
    size_t calls = calls_.size();
    while (owner >= 0 && static_cast<size_t>(owner) >= calls) owner = loans_.at(owner - calls).recorded;
    if (owner < 0) return {kUnsettled, TagRef::kEveryCall};
    int call = owner;
    while (call >= 0 && !own_tag_[call]) call = calls_[call].caller;
    int ordinal = call >= 0 ? ordinal_[call] : -1;
    return {tag_of_call_[owner], ordinal >= 0 ? ordinal : TagRef::kEveryCall};
  }

  // A lent owner a fold read (FoldedSourceTable): its loan's owners as call
  // tags, and the lent ones among them as lent nodes.
  void ExpandLoan(uint64_t key, std::vector<int>* tags, std::vector<uint64_t>* lent) const {
    const OwnerLoan* loan = LoanOf(static_cast<Owner>(key));
    if (loan == nullptr) return;
    auto add = [&](Owner listed) {
      if (listed == kNoOwner) return;
      if (LoanOf(listed) != nullptr) {
        lent->push_back(static_cast<uint64_t>(listed));
      } else {
        tags->push_back(RefOf(listed).tag);
      }
    };
    add(loan->recorded);
    for (Owner other : loan->spans) add(other);
    for (Owner other : loan->folded_from) add(other);
    for (Owner other : loan->shared_with) add(other);
  }

  const OwnerLoan* LoanOf(Owner owner) const {
    if (owner < 0 || static_cast<size_t>(owner) < calls_.size()) return nullptr;
    return &loans_.at(owner - calls_.size());
  }

  void TagFromRecord(size_t k, const CallRefs& refs) {
    uint32_t i = result_.graph_index[k];
    Owner owner = graph_.nodes[i].owner;
    if (owner == kNoOwner) {
      unsettled_.push_back(k);
      return;
    }
    TagRef own = RefOf(owner);
    TaggedNode& tagged = result_.tagging.nodes[k];
    if (own.tag < 0) {
      unsettled_.push_back(k);
      return;
    }
    tagged.tag = own.tag;
    tagged.call = own.call == TagRef::kEveryCall ? 0 : own.call;
    tagged.rule = TagRule::kRecorded;
    const OwnerLoan* loan = LoanOf(owner);
    if (loan == nullptr) return;
    RefLoan lent;
    for (Owner other : loan->shared_with) lent.shared_with.push_back(RefOf(other));
    for (Owner fused : loan->spans) lent.spans.push_back(RefOf(fused));
    for (Owner folded : loan->folded_from) {
      if (LoanOf(folded) != nullptr) {
        lent.folded_sources.push_back(folded_sources_.SourceOf(static_cast<uint64_t>(folded)));
      } else {
        lent.folded_from.push_back(RefOf(folded).tag);
      }
    }
    lent.rewrite = loan->rewrite;
    refs.TakeLoan(lent, own, !graph_.InputsOf(i).empty(), tagged);
  }

  // Who makes and who reads each value.
  void IndexValues() {
    for (uint32_t i = 0; i < graph_.size(); ++i) {
      for (ValueId output : graph_.OutputsOf(i)) producer_[output] = i;
      for (ValueId input : graph_.InputsOf(i)) readers_[input].push_back(i);
    }
    for (size_t k = 0; k < graph_.graph_inputs.size(); ++k) {
      graph_input_[graph_.graph_inputs[k]] = k < described_.user_inputs;
    }
    for (const auto& [value, holder] : described_.nested_inputs) nested_holder_[value] = holder;
  }

  // A node's tag as it stands: its tag, or Unplaced(k) while it waits.
  int RuleRef(uint32_t i) const {
    auto k = index_of_.find(i);
    if (k == index_of_.end()) return kNotCounted;
    const TaggedNode& tagged = result_.tagging.nodes[k->second];
    if (tagged.tag != kUnsettled) return tagged.tag;
    auto waiting = waiting_of_.find(k->second);
    return waiting == waiting_of_.end() ? kNotCounted : Unplaced(waiting->second);
  }

  int HolderRef(uint32_t holder) const { return holder == kNone ? CallTags::kRoot : RuleRef(holder); }

  // A value's maker as the rules count it: its node; the root for a user
  // input; the holder for a value a nested graph receives; an initializer
  // does not count.
  int ProducerRef(ValueId value) const {
    auto producer = producer_.find(value);
    if (producer != producer_.end()) return RuleRef(producer->second);
    auto input = graph_input_.find(value);
    if (input != graph_input_.end()) return input->second ? CallTags::kRoot : kNotCounted;
    auto nested = nested_holder_.find(value);
    return nested == nested_holder_.end() ? kNotCounted : HolderRef(nested->second);
  }

  // A reader as the rules count it: a graph's return is its holder's (the root's).
  int ConsumerRef(uint32_t reader) const {
    if (graph_.nodes[reader].is_return) return HolderRef(described_.holders[reader]);
    return RuleRef(reader);
  }

  void SettleByRules() {
    std::vector<size_t> waiting;
    for (size_t k : unsettled_) {
      waiting_of_[k] = static_cast<int>(waiting.size());
      waiting.push_back(k);
    }
    if (waiting.empty()) return;
    std::vector<UnplacedNode> unplaced(waiting.size());
    auto add = [](int ref, UnplacedNode& node) {
      if (ref != kNotCounted) node.neighbours.push_back(ref);
    };
    for (size_t w = 0; w < waiting.size(); ++w) {
      uint32_t i = result_.graph_index[waiting[w]];
      UnplacedNode& node = unplaced[w];
      if (described_.holders[i] != kNone) {
        node.holder = RuleRef(described_.holders[i]);
        continue;
      }
      for (ValueId output : graph_.OutputsOf(i)) {
        auto readers = readers_.find(output);
        if (readers == readers_.end()) continue;
        for (uint32_t reader : readers->second) add(ConsumerRef(reader), node);
      }
      node.has_inputs = !graph_.InputsOf(i).empty();
      for (ValueId input : graph_.InputsOf(i)) add(ProducerRef(input), node);
    }
    std::vector<Placement> placements = PlaceByRules(unplaced, call_tags_);
    for (size_t w = 0; w < waiting.size(); ++w) {
      TaggedNode& tagged = result_.tagging.nodes[waiting[w]];
      tagged.tag = placements[w].tag;
      tagged.rule = placements[w].rule;
    }
  }

  // A node a rule tagged belongs to the call of a reader with the same tag (CallsOfReaders).
  void InheritCalls() {
    std::vector<size_t> listed;
    std::unordered_map<size_t, int> place;
    for (size_t k : unsettled_) {
      const TaggedNode& tagged = result_.tagging.nodes[k];
      if (tagged.rule == TagRule::kRecorded || result_.tagging.CallCount(tagged.tag) < 2) continue;
      place[k] = static_cast<int>(listed.size());
      listed.push_back(k);
    }
    if (listed.empty()) return;
    std::vector<RulePlacedNode> nodes(listed.size());
    for (size_t l = 0; l < listed.size(); ++l) {
      const TaggedNode& tagged = result_.tagging.nodes[listed[l]];
      nodes[l].tag = tagged.tag;
      nodes[l].call = tagged.call;
      for (ValueId output : graph_.OutputsOf(result_.graph_index[listed[l]])) {
        auto readers = readers_.find(output);
        if (readers == readers_.end()) continue;
        for (uint32_t reader : readers->second) {
          if (graph_.nodes[reader].is_return) continue;
          size_t r = static_cast<size_t>(index_of_.at(reader));
          auto listed_reader = place.find(r);
          if (listed_reader != place.end()) {
            nodes[l].readers.push_back({Unplaced(listed_reader->second), 0});
          } else {
            nodes[l].readers.push_back({result_.tagging.nodes[r].tag, result_.tagging.nodes[r].call});
          }
        }
      }
    }
    std::vector<int> calls = CallsOfReaders(nodes);
    for (size_t l = 0; l < listed.size(); ++l) result_.tagging.nodes[listed[l]].call = calls[l];
  }

  // The calls reading a node's outputs, and those they are shared with; a
  // graph output is read by the root's call 0, a nested graph's output by its holder.
  std::vector<TagRef> ReaderRefs(uint32_t i) const {
    std::vector<TagRef> refs;
    for (ValueId output : graph_.OutputsOf(i)) {
      auto readers = readers_.find(output);
      if (readers == readers_.end()) continue;
      for (uint32_t reader : readers->second) {
        if (graph_.nodes[reader].is_return) {
          reader = described_.holders[reader];
          if (reader == kNone) {
            refs.push_back({CallTags::kRoot, 0});
            continue;
          }
        }
        const TaggedNode& tagged = result_.tagging.nodes[index_of_.at(reader)];
        if (tagged.tag < 0) continue;
        refs.push_back({tagged.tag, tagged.call});
        refs.insert(refs.end(), tagged.shared_with().begin(), tagged.shared_with().end());
      }
    }
    return refs;
  }

  void AddRecord(const PassRecord& record, const CallRefs& refs) {
    const OwnerRewrite& rewrite = record.record;
    RewriteKind kind = rewrite.kind == OwnerRewrite::Kind::kRemoved  ? RewriteKind::kRemoved
                       : rewrite.kind == OwnerRewrite::Kind::kFolded ? RewriteKind::kFolded
                                                                     : RewriteKind::kRewired;
    std::vector<TagRef> calls;
    std::vector<int> sources;
    if (kind == RewriteKind::kRewired) {
      bool user_input = rewrite.graph_input >= 0 && static_cast<size_t>(rewrite.graph_input) < described_.user_inputs;
      if (rewrite.graph_input >= 0 && !user_input) return;  // a parameter is nobody's data
      std::vector<TagRef> value_refs;
      for (Owner owner : rewrite.value_owners) value_refs.push_back(RefOf(owner));
      calls = refs.RewiredCalls(RefOf(rewrite.reader), RefOf(rewrite.replaced), value_refs, user_input);
    } else {
      for (Owner owner : rewrite.owners) {
        if (kind == RewriteKind::kFolded && LoanOf(owner) != nullptr) {
          sources.push_back(folded_sources_.SourceOf(static_cast<uint64_t>(owner)));
        } else {
          calls.push_back(RefOf(owner));
        }
      }
    }
    AddRewrite(kind, record.pass, std::move(calls), rewrite.initializer, refs, result_.tagging, std::move(sources));
  }

  const PassGraph& graph_;
  const TaggedGraph& described_;
  const std::vector<ModuleCallRecord>& calls_;
  const std::vector<OwnerLoan>& loans_;
  const std::vector<PassRecord>& records_;
  const ModuleTable& modules_;
  CallTags& call_tags_;
  std::vector<int> tag_of_call_;
  std::vector<bool> own_tag_;
  std::vector<int> ordinal_;
  PassGraphTagging result_;
  FoldedSourceTable folded_sources_{
      result_.tagging,
      [this](uint64_t key, std::vector<int>* tags, std::vector<uint64_t>* lent) { ExpandLoan(key, tags, lent); }};
  std::unordered_map<uint32_t, int> index_of_;  // graph index -> index in result_.tagging.nodes
  std::vector<size_t> unsettled_;
  std::unordered_map<size_t, int> waiting_of_;
  std::unordered_map<ValueId, uint32_t> producer_;
  std::unordered_map<ValueId, std::vector<uint32_t>> readers_;
  std::unordered_map<ValueId, bool> graph_input_;  // -> a user input
  std::unordered_map<ValueId, uint32_t> nested_holder_;
};

}  // namespace

PassGraphTagging TagPassGraph(const TaggedGraph& graph, const std::vector<ModuleCallRecord>& calls,
                              const std::vector<OwnerLoan>& loans, const std::vector<PassRecord>& records,
                              const ModuleTable& modules, CallTags& call_tags) {
  return Tagger(graph, calls, loans, records, modules, call_tags).Run();
}

}  // namespace hiertag
