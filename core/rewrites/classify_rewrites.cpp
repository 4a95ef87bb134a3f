// Rewrite classification: the groups of nodes a pass removed, and the nodes it
// read past, by what their readers read now.
#include "hiertag/core/rewrites/classify_rewrites.h"

#include <algorithm>
#include <deque>
#include <iterator>
#include <memory_resource>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>

namespace hiertag {
namespace {

using Index = uint32_t;
constexpr Index kNone = UINT32_MAX;

// A read of a value before the pass: which node, at which input.
struct Read {
  ValueId value;
  Index reader;
  uint32_t slot;
  bool operator<(const Read& other) const {
    if (value != other.value) return value < other.value;
    return reader != other.reader ? reader < other.reader : slot < other.slot;
  }
};

// Adds owners to a list once each: searched while the list is short, indexed
// once it grows (a constant every layer's shape computation folds into lists
// hundreds).
class OwnerSet {
 public:
  bool Add(std::vector<Owner>& list, Owner owner) {
    if (list.size() < kSearched) {
      if (std::find(list.begin(), list.end(), owner) != list.end()) return false;
    } else {
      if (index_.size() < list.size()) index_.insert(list.begin(), list.end());
      if (!index_.insert(owner).second) return false;
    }
    list.push_back(owner);
    return true;
  }

 private:
  static constexpr size_t kSearched = 16;
  std::unordered_set<Owner> index_;
};

using Indices = std::vector<Index>;
using Owners = std::vector<Owner>;

}  // namespace

// The working arrays, kept from one pass to the next.
struct RewriteClassifier::State {
  // In mapped pages, as the pass graphs are (pass_graph.h says why).
  template <typename T>
  using Array = std::pmr::vector<T>;
  std::pmr::memory_resource* memory = MappedMemory();
  Array<Index> after_of{memory};          // per node before: its index after, kNone when removed
  Array<uint8_t> inputs_changed{memory};  // per node before: alive, reading other values
  Array<Index> reading_other_values{memory};
  Array<uint8_t> grouped{memory};  // per node before: in a group classified
  Array<uint8_t> members{memory};  // per node before: in the group being classified
  Array<uint32_t> seen{memory};    // per node before: the last walk that reached it
  uint32_t stamp = 0;
  Array<std::pair<ValueId, Index>> producers_before{memory};  // sorted by value
  Array<std::pair<ValueId, Index>> producers_after{memory};   // sorted by value
  Array<Read> reads_before{memory};                           // sorted
  Array<Read> uses{memory};                                   // the reads of each node's outputs, node by node
  Array<uint32_t> use_begin{memory};                          // node i's: uses[use_begin[i] .. use_begin[i + 1])
  Array<ValueId> inputs_before{memory};                       // the graph inputs before, sorted
  // The graph inputs after, sorted, each with its place among them.
  Array<std::pair<ValueId, uint32_t>> inputs_after{memory};
  Array<Index> made{memory};                                // the nodes the pass made (indices after)
  Array<std::pair<Owner, uint32_t>> made_by_owner{memory};  // (owner, index into made), sorted
};

namespace {

class Pass {
 public:
  Pass(const PassGraph& before, const PassGraph& after, const std::string& pass, const LoanLookup& loans,
       const RewriteDebugLog& log, RewriteClassifier::State& state)
      : before_(before), after_(after), pass_(pass), loans_(loans), log_(log), s_(state) {}

  PassRewrites Run() {
    size_t count = before_.size();
    s_.after_of.assign(count, kNone);
    s_.inputs_changed.assign(count, 0);
    s_.grouped.assign(count, 0);
    s_.members.assign(count, 0);
    s_.seen.assign(count, 0);
    s_.stamp = 0;
    s_.reading_other_values.clear();
    s_.made.clear();
    s_.made_by_owner.clear();
    for (Index j = 0; j < after_.size(); ++j) {
      Index i = after_.nodes[j].before;
      if (i == PassGraph::kMade || i >= count) {
        s_.made_by_owner.emplace_back(after_.nodes[j].owner, static_cast<uint32_t>(s_.made.size()));
        s_.made.push_back(j);
        continue;
      }
      s_.after_of[i] = j;
      std::span<const ValueId> now = after_.InputsOf(j);
      std::span<const ValueId> then = before_.InputsOf(i);
      if (!std::equal(now.begin(), now.end(), then.begin(), then.end())) {
        s_.inputs_changed[i] = 1;
        s_.reading_other_values.push_back(i);
      }
    }
    std::sort(s_.made_by_owner.begin(), s_.made_by_owner.end());
    IndexProducers(s_.producers_before, before_);
    IndexProducers(s_.producers_after, after_);
    s_.reads_before.clear();
    for (Index i = 0; i < count; ++i) {
      std::span<const ValueId> inputs = before_.InputsOf(i);
      for (uint32_t slot = 0; slot < inputs.size(); ++slot) s_.reads_before.push_back({inputs[slot], i, slot});
    }
    std::sort(s_.reads_before.begin(), s_.reads_before.end());
    IndexUses();
    s_.inputs_before.assign(before_.graph_inputs.begin(), before_.graph_inputs.end());
    std::sort(s_.inputs_before.begin(), s_.inputs_before.end());
    s_.inputs_after.clear();
    for (uint32_t k = 0; k < after_.graph_inputs.size(); ++k) s_.inputs_after.emplace_back(after_.graph_inputs[k], k);
    std::sort(s_.inputs_after.begin(), s_.inputs_after.end());
    MarkReplacedAsRemoved();

    for (Index i = 0; i < count; ++i) {
      if (!Alive(i) && !s_.grouped[i]) Classify(Group(i));
    }
    std::sort(s_.reading_other_values.begin(), s_.reading_other_values.end());
    for (Index i : s_.reading_other_values) ClassifyReadsPastKeptNodes(i);
    for (Growing& growing : growing_) {
      if (!growing.grown) continue;
      Log("lent node " + std::to_string(growing.node) + " spans of " + std::to_string(growing.loan.spans.size()) +
          " owners, folded from " + std::to_string(growing.loan.folded_from.size()));
      result_.loans.push_back({growing.node, std::move(growing.loan)});
    }
    return std::move(result_);
  }

 private:
  static void IndexProducers(RewriteClassifier::State::Array<std::pair<ValueId, Index>>& producers,
                             const PassGraph& graph) {
    producers.clear();
    for (Index i = 0; i < graph.size(); ++i) {
      for (ValueId output : graph.OutputsOf(i)) producers.emplace_back(output, i);
    }
    std::sort(producers.begin(), producers.end());
  }

  // Nodes still in the graph that nothing alive reads any more, though
  // something read them before, and whose former readers now read what a node
  // the pass made makes: the pass replaced them with that node and left them
  // for a later removal of unused nodes (onnxscript's rewriter does). They
  // count as removed by this pass, so what replaced them is classified here;
  // their later removal, with nothing reading them, records nothing. Nodes a
  // pass only bypassed (their readers read a value from further up) stay:
  // those reads are classified as reads past kept nodes.
  void MarkReplacedAsRemoved() {
    // A node is unread when something read it before and no node after the
    // pass does: no node the pass made, no node whose reads it changed, and no
    // node it left as it was (those read what they read before) reads it, or
    // each that does is unread itself. Only a producer of a removed node, of a
    // node the pass rewired, or of an unread node can be one (the last unread
    // node in graph order has no reader left as it was): those are the
    // candidates, walked from the back, so a node's readers are settled first.
    // The reads of the nodes the pass made or rewired: (value, reader after).
    std::vector<std::pair<ValueId, Index>> new_reads;
    for (uint32_t made_index = 0; made_index < s_.made.size(); ++made_index) {
      Index j = s_.made[made_index];
      for (ValueId input : after_.InputsOf(j)) new_reads.emplace_back(input, j);
    }
    std::vector<uint8_t> unread(before_.size(), 0);  // 1: a candidate, 2: unread
    constexpr uint8_t kCandidate = 1, kUnread = 2;
    auto mark_producers = [&](Index i) {
      for (ValueId input : before_.InputsOf(i)) {
        Index producer = ProducerBefore(input);
        if (producer != kNone && unread[producer] == 0) unread[producer] = kCandidate;
      }
    };
    bool any_candidate = false;
    for (Index i = 0; i < before_.size(); ++i) {
      if (Alive(i) && !s_.inputs_changed[i]) continue;
      mark_producers(i);
      any_candidate = true;
      if (!Alive(i)) continue;
      for (ValueId input : after_.InputsOf(s_.after_of[i])) new_reads.emplace_back(input, s_.after_of[i]);
    }
    if (!any_candidate) return;
    std::sort(new_reads.begin(), new_reads.end());
    bool any_unread = false;
    for (Index i = before_.size(); i-- > 0;) {
      if (unread[i] != kCandidate) continue;
      unread[i] = 0;
      if (!Alive(i) || before_.nodes[i].is_return || UsesOf(i).empty()) continue;
      bool read_now = false;
      for (const Read& use : UsesOf(i)) {
        Index r = use.reader;
        if (Alive(r) && !s_.inputs_changed[r] && (before_.nodes[r].is_return || unread[r] != kUnread)) {
          read_now = true;
          break;
        }
      }
      for (ValueId output : before_.OutputsOf(i)) {
        if (read_now) break;
        auto reader = std::lower_bound(new_reads.begin(), new_reads.end(), std::make_pair(output, Index{0}));
        for (; reader != new_reads.end() && reader->first == output && !read_now; ++reader) {
          Index j = reader->second;
          read_now = Made(j) || after_.nodes[j].is_return || unread[after_.nodes[j].before] != kUnread;
        }
      }
      if (read_now) continue;
      unread[i] = kUnread;
      any_unread = true;
      mark_producers(i);
    }
    if (!any_unread) return;
    for (uint8_t& mark : unread) mark = mark == kUnread;
    // Each set of unread nodes connected through values, and whether a former
    // reader outside it now reads a made node's value in its place.
    std::vector<uint8_t> visited(before_.size(), 0);
    for (Index start = 0; start < before_.size(); ++start) {
      if (!unread[start] || visited[start]) continue;
      Indices component, work = {start};
      visited[start] = 1;
      bool replaced = false;
      while (!work.empty()) {
        Index i = work.back();
        work.pop_back();
        component.push_back(i);
        for (ValueId input : before_.InputsOf(i)) {
          Index producer = ProducerBefore(input);
          if (producer != kNone && unread[producer] && !visited[producer]) {
            visited[producer] = 1;
            work.push_back(producer);
          }
        }
        for (const Read& use : UsesOf(i)) {
          if (unread[use.reader]) {
            if (!visited[use.reader]) {
              visited[use.reader] = 1;
              work.push_back(use.reader);
            }
            continue;
          }
          if (!Alive(use.reader)) continue;
          std::span<const ValueId> reads_now = after_.InputsOf(s_.after_of[use.reader]);
          if (use.slot >= reads_now.size()) continue;
          Index producer = ProducerAfter(reads_now[use.slot]);
          replaced |= producer != kNone && Made(producer);
        }
      }
      if (!replaced) continue;
      for (Index i : component) {
        s_.after_of[i] = kNone;
        s_.inputs_changed[i] = 0;
      }
    }
    s_.reading_other_values.erase(std::remove_if(s_.reading_other_values.begin(), s_.reading_other_values.end(),
                                                 [&](Index i) { return !Alive(i); }),
                                  s_.reading_other_values.end());
  }

  void Log(const std::string& line) const {
    if (log_) log_(pass_ + ": " + line);
  }

  bool Alive(Index i) const { return s_.after_of[i] != kNone; }
  bool Made(Index j) const {
    return after_.nodes[j].before == PassGraph::kMade || after_.nodes[j].before >= before_.size();
  }
  // Node i (before) alive after the pass with attributes the pass changed.
  bool AttributesChanged(Index i) const {
    return Alive(i) && before_.nodes[i].attributes != after_.nodes[s_.after_of[i]].attributes;
  }

  static Index Find(const RewriteClassifier::State::Array<std::pair<ValueId, Index>>& producers, ValueId value) {
    auto found = std::lower_bound(producers.begin(), producers.end(), std::make_pair(value, Index{0}));
    return found != producers.end() && found->first == value ? found->second : kNone;
  }
  // The node that made `value` before the pass (kNone: a graph input, or a
  // value a nested graph receives).
  Index ProducerBefore(ValueId value) const { return Find(s_.producers_before, value); }
  Index ProducerAfter(ValueId value) const { return Find(s_.producers_after, value); }

  bool WasInput(ValueId value) const {
    return std::binary_search(s_.inputs_before.begin(), s_.inputs_before.end(), value);
  }
  // The place of `value` among the graph inputs after the pass, or -1.
  int InputAfter(ValueId value) const {
    auto found = std::lower_bound(s_.inputs_after.begin(), s_.inputs_after.end(), std::make_pair(value, 0u));
    return found != s_.inputs_after.end() && found->first == value ? static_cast<int>(found->second) : -1;
  }
  // A graph input after the pass that was one before.
  bool InputBefore(ValueId value) const { return WasInput(value) && InputAfter(value) >= 0; }
  // A graph input the pass added (an initializer it made).
  bool NewInput(ValueId value) const { return InputAfter(value) >= 0 && !WasInput(value); }
  // Whether `value` (read after the pass) existed before it: a graph input
  // then, or made by a node that is still there.
  bool Existed(ValueId value) const {
    if (InputBefore(value)) return true;
    Index producer = ProducerAfter(value);
    return producer != kNone && !Made(producer);
  }

  // The reads of node i's outputs before the pass (IndexUses).
  std::span<const Read> UsesOf(Index i) const {
    return {s_.uses.data() + s_.use_begin[i], s_.uses.data() + s_.use_begin[i + 1]};
  }

  // Every node's uses, node by node, in one array (UsesOf's).
  void IndexUses() {
    s_.uses.clear();
    s_.use_begin.assign(1, 0);
    for (Index i = 0; i < before_.size(); ++i) {
      for (ValueId output : before_.OutputsOf(i)) {
        auto first = std::lower_bound(s_.reads_before.begin(), s_.reads_before.end(), Read{output, 0, 0});
        for (auto it = first; it != s_.reads_before.end() && it->value == output; ++it) s_.uses.push_back(*it);
      }
      s_.use_begin.push_back(static_cast<uint32_t>(s_.uses.size()));
    }
  }

  // A fresh mark for the walks below.
  uint32_t NewWalk() { return ++s_.stamp; }
  bool Visit(Index i, uint32_t walk) {
    if (s_.seen[i] == walk) return false;
    s_.seen[i] = walk;
    return true;
  }

  // The removed nodes connected to `start` through values, in graph order.
  Indices Group(Index start) {
    Indices group;
    Indices work = {start};
    s_.grouped[start] = 1;
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      group.push_back(i);
      auto visit = [&](Index other) {
        if (other != kNone && !Alive(other) && !s_.grouped[other]) {
          s_.grouped[other] = 1;
          work.push_back(other);
        }
      };
      for (const Read& use : UsesOf(i)) visit(use.reader);
      for (ValueId input : before_.InputsOf(i)) visit(ProducerBefore(input));
    }
    std::sort(group.begin(), group.end());
    return group;
  }

  // The owners of `nodes`, each once; an owner the observer lent stands for
  // the owners its loan carries (the node it records, and those fused, folded
  // or merged into it): their computations are the node's.
  Owners OwnersOf(const Indices& nodes) const {
    Owners owners;
    OwnerSet listed;
    for (Index i : nodes) AddOwner(before_.nodes[i].owner, owners, listed, 0);
    return owners;
  }

  void AddOwner(Owner owner, Owners& owners, OwnerSet& listed, int depth) const {
    if (owner == kNoOwner) return;
    const OwnerLoan* loan = loans_ && depth < kLoanDepth ? loans_(owner) : nullptr;
    if (loan == nullptr) {
      listed.Add(owners, owner);
      return;
    }
    AddOwner(loan->recorded, owners, listed, depth + 1);
    for (Owner other : loan->spans) AddOwner(other, owners, listed, depth + 1);
    for (Owner other : loan->folded_from) AddOwner(other, owners, listed, depth + 1);
    for (Owner other : loan->shared_with) AddOwner(other, owners, listed, depth + 1);
  }
  // Loans list owners, never loans that list them back; the bound only stops a cycle a writer might make.
  static constexpr int kLoanDepth = 64;

  // The owner a lent owner records, through loans of loans: the call that made the node.
  Owner RecordedOwner(Owner owner) const {
    for (int depth = 0; depth < kLoanDepth && owner != kNoOwner; ++depth) {
      const OwnerLoan* loan = loans_ ? loans_(owner) : nullptr;
      if (loan == nullptr) break;
      owner = loan->recorded;
    }
    return owner;
  }

  // The owners every node of `nodes` is shared with (CSE, or a pass merging
  // equal nodes, kept one node for them too), following each node's loan to
  // the owner it records: the nodes are computations those owners made too.
  // Sorted, so that intersecting and looking up stay n log n on long lists.
  Owners SharedByAll(const Indices& nodes) const {
    Owners common;
    bool first = true;
    for (Index i : nodes) {
      Owners shared;
      OwnerSet listed;
      Owner owner = before_.nodes[i].owner;
      for (int depth = 0; owner != kNoOwner && depth < kLoanDepth; ++depth) {
        const OwnerLoan* loan = loans_ ? loans_(owner) : nullptr;
        if (loan == nullptr) break;
        for (Owner other : loan->shared_with) AddOwner(other, shared, listed, depth + 1);
        owner = loan->recorded;
      }
      std::sort(shared.begin(), shared.end());
      if (first) {
        common = std::move(shared);
        first = false;
      } else {
        Owners kept;
        std::set_intersection(common.begin(), common.end(), shared.begin(), shared.end(), std::back_inserter(kept));
        common = std::move(kept);
      }
      if (common.empty()) break;
    }
    return common;
  }

  // The owners whose computations node i carries as one: its record and what
  // a pass fused into it (not the calls it is merely shared with or folded
  // from: those computed it, or a constant, each on their own).
  Owners FusedOwnersOf(Index i) const {
    Owners owners;
    OwnerSet listed;
    std::vector<std::pair<Owner, int>> work = {{before_.nodes[i].owner, 0}};
    while (!work.empty()) {
      auto [owner, depth] = work.back();
      work.pop_back();
      if (owner == kNoOwner) continue;
      const OwnerLoan* loan = loans_ && depth < kLoanDepth ? loans_(owner) : nullptr;
      if (loan == nullptr) {
        listed.Add(owners, owner);
        continue;
      }
      work.emplace_back(loan->recorded, depth + 1);
      for (Owner other : loan->spans) work.emplace_back(other, depth + 1);
    }
    return owners;
  }

  // How the nodes outside a removed group read what it made, now (Follow).
  struct GroupReaders {
    Indices absorbers;                              // nodes after that took the group's work over
    Indices mergers;                                // older equal nodes after the readers read instead
    std::vector<std::pair<Read, ValueId>> rewired;  // a read before, and the value before the group it reads now
    bool bypassed = false;                          // some reader reads past the group
  };

  // A removed group of nodes: what took its place, by what its readers read
  // now (Follow) and what the pass made under its owners (AnchorMadeNodes);
  // recorded as absorbed, shared, removed across owners, or rewired (Record).
  void Classify(const Indices& group) {
    for (Index i : group) s_.members[i] = 1;
    struct ClearMembers {
      RewriteClassifier::State::Array<uint8_t>& members;
      const Indices& group;
      ~ClearMembers() {
        for (Index i : group) members[i] = 0;
      }
    } clear{s_.members, group};
    Owners owners = OwnersOf(group);
    if (owners.empty()) return;
    std::vector<ValueId> upstream;  // what the group read, sorted
    for (Index i : group) upstream.insert(upstream.end(), before_.InputsOf(i).begin(), before_.InputsOf(i).end());
    std::sort(upstream.begin(), upstream.end());
    GroupReaders readers = Follow(group, upstream);
    std::vector<std::pair<Index, Indices>> anchors = AnchorMadeNodes(group, upstream, readers.absorbers);
    Record(group, owners, readers, anchors);
  }

  // Every read of the group's outputs from outside it: what the reader reads now.
  GroupReaders Follow(const Indices& group, const std::vector<ValueId>& upstream) {
    GroupReaders readers;
    std::unordered_map<Index, Owners> computed_by;
    auto folded_owners = [&](Index i) -> const Owners& {
      auto found = computed_by.find(i);
      if (found == computed_by.end()) found = computed_by.emplace(i, ComputedBy(i)).first;
      return found->second;
    };
    for (Index i : group) {
      for (const Read& use : UsesOf(i)) {
        if (s_.members[use.reader] || !Alive(use.reader)) continue;
        if (AttributesChanged(use.reader)) {
          readers.absorbers.push_back(s_.after_of[use.reader]);
          continue;
        }
        std::span<const ValueId> reads_now = after_.InputsOf(s_.after_of[use.reader]);
        if (use.slot >= reads_now.size()) continue;
        ValueId now = reads_now[use.slot];
        Index producer = ProducerAfter(now);
        if (NewInput(now)) {
          const Owners& folded = folded_owners(i);
          if (!folded.empty()) {
            OwnerRewrite record;
            record.kind = OwnerRewrite::Kind::kFolded;
            record.owners = folded;
            record.initializer = now;
            result_.records.push_back(std::move(record));
          }
        } else if (producer != kNone && Absorbing(producer)) {
          if (after_.InputsOf(producer).empty()) {
            FoldInto(producer, folded_owners(i));
          } else {
            readers.absorbers.push_back(producer);
          }
        } else if (producer != kNone && IsConstant(producer)) {
          // An older constant holds what the group computed (torch 2.8's shape
          // inference makes constants for static shapes before constant folding
          // reuses them): folded into it, as into a new one. A constant is
          // nobody's data, so no boundary is cut.
          FoldInto(producer, folded_owners(i));
        } else if (std::binary_search(upstream.begin(), upstream.end(), now) || ComputedFrom(group, now)) {
          Log("node " + std::to_string(use.reader) + " reads a value from before the group");
          readers.bypassed = true;
          readers.rewired.emplace_back(use, now);
        } else if (producer != kNone && !Made(producer)) {
          readers.mergers.push_back(producer);
          ShareMergedAncestors(i, after_.nodes[producer].before);
        }
      }
    }
    return readers;
  }

  // Every node the pass made from the group's nodes took them over too, also
  // one only another made node reads (conv1+bn1 fused before conv2+bn2): each
  // with the group's nodes it was made from, and added to `absorbers`.
  std::vector<std::pair<Index, Indices>> AnchorMadeNodes(const Indices& group, const std::vector<ValueId>& upstream,
                                                         Indices& absorbers) {
    std::vector<std::pair<Index, Indices>> anchors;
    std::unordered_set<Index> linked;  // made nodes computing from what the group read
    for (uint32_t made_index : MadeUnderOwnersOf(group)) {
      Index made = s_.made[made_index];
      std::span<const ValueId> inputs = after_.InputsOf(made);
      if (inputs.empty()) continue;
      // An owner holds much besides the group (the caller's Concat of shape
      // values made from a removed list): only a node computing from what the
      // group read, or from another such made node, was made from it.
      bool from_group = std::any_of(inputs.begin(), inputs.end(), [&](ValueId input) {
        Index producer = ProducerAfter(input);
        return (producer != kNone && linked.count(producer)) ||
               (std::binary_search(upstream.begin(), upstream.end(), input) && Existed(input));
      });
      if (!from_group) continue;
      linked.insert(made);
      // What it was made from: a pass copies the replaced node's record, and
      // the replacement is mostly of the same kind (a Conv for a Conv).
      Indices made_from, same_owner;
      for (Index i : group) {
        if (before_.nodes[i].owner != after_.nodes[made].owner) continue;
        same_owner.push_back(i);
        if (before_.nodes[i].kind == after_.nodes[made].kind) made_from.push_back(i);
      }
      if (made_from.empty()) made_from = std::move(same_owner);
      if (made_from.empty()) continue;
      anchors.emplace_back(made, std::move(made_from));
      if (std::find(absorbers.begin(), absorbers.end(), made) == absorbers.end()) absorbers.push_back(made);
    }
    return anchors;
  }

  // The group's records: absorbed by each absorber, shared with each merger,
  // and either removed across its owners (a reader reads past a group of
  // several owners that handed a tensor between them) or its readers rewired.
  void Record(const Indices& group, const Owners& owners, const GroupReaders& readers,
              const std::vector<std::pair<Index, Indices>>& anchors) {
    for (Index absorber : readers.absorbers) Absorb(absorber, Absorbed(absorber, group, anchors));
    for (Index merger : readers.mergers) {
      for (Owner owner : owners) result_.shares.push_back({merger, owner});
    }
    if (readers.bypassed && owners.size() > 1 && CrossesWithTensor(group)) {
      Log("removed " + std::to_string(group.size()) + " nodes of " + std::to_string(owners.size()) + " owners");
      OwnerRewrite record;
      record.kind = OwnerRewrite::Kind::kRemoved;
      record.owners = owners;
      result_.records.push_back(std::move(record));
    } else {
      for (const auto& [use, now] : readers.rewired) RecordRewired(use, now);
    }
  }

  // A removed node whose reader now reads an older equal node (`kept`, an
  // index before): the nodes each computed from pair up input by input, as
  // far as they are removed on one side and kept, of the same kind and
  // attributes, on the other (common subexpression elimination merged the
  // whole computation). Each kept node of a pair is shared with the removed
  // node's owners: the calls that read the merged result computed it too.
  void ShareMergedAncestors(Index removed, Index kept) {
    std::vector<std::pair<Index, Index>> work = {{removed, kept}};
    std::unordered_set<Index> paired;
    while (!work.empty()) {
      auto [gone, stays] = work.back();
      work.pop_back();
      std::span<const ValueId> gone_reads = before_.InputsOf(gone);
      std::span<const ValueId> stays_reads = before_.InputsOf(stays);
      if (gone_reads.size() != stays_reads.size()) continue;
      for (size_t slot = 0; slot < gone_reads.size(); ++slot) {
        if (gone_reads[slot] == stays_reads[slot]) continue;
        Index from_gone = ProducerBefore(gone_reads[slot]);
        Index from_stays = ProducerBefore(stays_reads[slot]);
        if (from_gone == kNone || from_stays == kNone || !s_.members[from_gone] || !Alive(from_stays) ||
            before_.nodes[from_gone].kind != before_.nodes[from_stays].kind ||
            before_.nodes[from_gone].attributes != before_.nodes[from_stays].attributes ||
            !paired.insert(from_gone).second) {
          continue;
        }
        for (Owner owner : OwnersOf({from_gone})) result_.shares.push_back({s_.after_of[from_stays], owner});
        work.emplace_back(from_gone, from_stays);
      }
    }
  }

  // The nodes the pass made under the owner of one of the group's nodes
  // (indices into made), in graph order: only they can have been made from
  // the group (a made node has the record of what it replaces).
  std::vector<uint32_t> MadeUnderOwnersOf(const Indices& group) const {
    std::vector<uint32_t> indices;
    std::unordered_set<Owner> owners;
    for (Index i : group) {
      Owner owner = before_.nodes[i].owner;
      if (!owners.insert(owner).second) continue;
      auto made = std::lower_bound(s_.made_by_owner.begin(), s_.made_by_owner.end(), std::make_pair(owner, 0u));
      for (; made != s_.made_by_owner.end() && made->first == owner; ++made) indices.push_back(made->second);
    }
    std::sort(indices.begin(), indices.end());
    return indices;
  }

  // The owners of the group's nodes that node i (a member) was computed from,
  // its own among them: what a constant or initializer read in place of i's
  // output holds. A lent owner stays one entry, standing for its loan's
  // owners, which the tagger expands once per loan: every layer's shape
  // constant folded from one computation shared by all layers would otherwise
  // copy every layer's owner, a work and a size growing with the square of
  // the depth.
  Owners ComputedBy(Index i) {
    Indices nodes;
    uint32_t walk = NewWalk();
    Indices work = {i};
    while (!work.empty()) {
      Index k = work.back();
      work.pop_back();
      if (!Visit(k, walk)) continue;
      nodes.push_back(k);
      for (ValueId input : before_.InputsOf(k)) {
        Index producer = ProducerBefore(input);
        if (producer != kNone && s_.members[producer]) work.push_back(producer);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    Owners owners;
    OwnerSet listed;
    for (Index k : nodes) {
      if (before_.nodes[k].owner != kNoOwner) listed.Add(owners, before_.nodes[k].owner);
    }
    return owners;
  }

  // Whether the group's nodes were computed from `value` (through nodes that
  // are gone or alive alike). Nodes before `value`'s producer in graph order
  // cannot have read it: the walk stops there.
  bool ComputedFrom(const Indices& group, ValueId value) {
    Index maker = ProducerBefore(value);
    Index earliest = maker == kNone ? 0 : maker;
    uint32_t walk = NewWalk();
    Indices work(group.begin(), group.end());
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      if (i < earliest || !Visit(i, walk)) continue;
      for (ValueId input : before_.InputsOf(i)) {
        if (input == value) return true;
        Index producer = ProducerBefore(input);
        if (producer != kNone) work.push_back(producer);
      }
    }
    return false;
  }

  // A node the pass rewired to read, in place of a value that still exists, a
  // value that one was computed from: the nodes in between are bypassed, not
  // removed. With attributes of its own changed, the node took their
  // computation over: it spans their owners. Else it reads the same value from
  // further up: rewired.
  void ClassifyReadsPastKeptNodes(Index i) {
    Index j = s_.after_of[i];
    std::span<const ValueId> then = before_.InputsOf(i);
    std::span<const ValueId> now = after_.InputsOf(j);
    if (then.size() != now.size()) {
      Log("node " + std::to_string(i) + " gained or lost inputs: no index pairs them, not classified");
      return;
    }
    bool own_changed = AttributesChanged(i);
    for (uint32_t slot = 0; slot < then.size(); ++slot) {
      if (then[slot] == now[slot] || !Existed(now[slot])) continue;
      Index maker = ProducerBefore(then[slot]);
      if (maker == kNone || !Alive(maker)) continue;  // a removed maker: its group says what happened
      Indices bypassed = Between(now[slot], maker);
      if (bypassed.empty()) continue;
      if (own_changed) {
        Absorb(j, bypassed);
      } else if (CarriesSeveralOwners(bypassed)) {
        // A node carrying several calls' computations (fused before) read
        // past: the values between those calls are gone, as for a removed group.
        Log("node " + std::to_string(i) + " reads past a node fused across owners");
        OwnerRewrite record;
        record.kind = OwnerRewrite::Kind::kRemoved;
        record.owners = OwnersOf(bypassed);
        result_.records.push_back(std::move(record));
      } else {
        RecordRewired({then[slot], i, slot}, now[slot]);
      }
    }
  }

  // The nodes, before the pass, on a path from `from` to `to` (`to` included),
  // in graph order; empty when `to` was not computed from `from`.
  Indices Between(ValueId from, Index to) {
    Index earliest = 0;
    if (!InputBefore(from)) earliest = after_.nodes[ProducerAfter(from)].before;
    Indices ancestors;
    bool reached = false;
    uint32_t walk = NewWalk();
    Indices work = {to};
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      if (i < earliest || !Visit(i, walk)) continue;
      ancestors.push_back(i);
      for (ValueId input : before_.InputsOf(i)) {
        if (input == from) {
          reached = true;
          continue;
        }
        Index producer = ProducerBefore(input);
        if (producer != kNone) work.push_back(producer);
      }
    }
    if (!reached) return {};
    std::sort(ancestors.begin(), ancestors.end());
    uint32_t on_path = NewWalk();
    Indices path;
    for (Index i : ancestors) {
      std::span<const ValueId> inputs = before_.InputsOf(i);
      bool reads_path = std::any_of(inputs.begin(), inputs.end(), [&](ValueId input) {
        if (input == from) return true;
        Index producer = ProducerBefore(input);
        return producer != kNone && s_.seen[producer] == on_path;
      });
      if (!reads_path) continue;
      s_.seen[i] = on_path;
      path.push_back(i);
    }
    return path;
  }

  // Whether `value` (read after the pass) is a number or a 0-d tensor.
  bool ScalarAfter(ValueId value) const {
    Index producer = ProducerAfter(value);
    if (producer != kNone) {
      std::span<const ValueId> outputs = after_.OutputsOf(producer);
      for (size_t k = 0; k < outputs.size(); ++k) {
        if (outputs[k] == value) return after_.output_scalar[after_.output_begin[producer] + k] != 0;
      }
    }
    int input = InputAfter(value);
    return input >= 0 && static_cast<size_t>(input) < after_.graph_input_scalar.size() &&
           after_.graph_input_scalar[input];
  }

  // The reader `use` reads `now` in place of what it read before: a value of
  // rank > 0 that is data (not a constant) is recorded with who made and read
  // it before.
  void RecordRewired(const Read& use, ValueId now) {
    Index producer = ProducerAfter(now);
    if (ScalarAfter(now) || (producer != kNone && after_.nodes[producer].constant_op)) return;
    Index replaced = ProducerBefore(before_.InputsOf(use.reader)[use.slot]);
    if (replaced == kNone) return;
    OwnerRewrite record;
    record.kind = OwnerRewrite::Kind::kRewired;
    record.reader = before_.nodes[use.reader].owner;
    record.replaced = before_.nodes[replaced].owner;
    if (int input = InputAfter(now); input >= 0) {
      record.graph_input = input;
    } else if (producer != kNone && !Made(producer)) {
      record.value_owners.push_back(before_.nodes[after_.nodes[producer].before].owner);
    }
    auto first = std::lower_bound(s_.reads_before.begin(), s_.reads_before.end(), Read{now, 0, 0});
    for (auto it = first; it != s_.reads_before.end() && it->value == now; ++it) {
      record.value_owners.push_back(before_.nodes[it->reader].owner);
    }
    if (record.reader == kNoOwner || record.replaced == kNoOwner) return;
    Log("node " + std::to_string(use.reader) + " rewired to read a value from further up");
    result_.records.push_back(std::move(record));
  }

  // Whether a value of rank > 0 passed between two owners inside the group. A
  // removed group as a whole computes its input again; a number handed from
  // one call to the next is still the same number, while a tensor between them
  // (a permute and its inverse) had another layout than what is read now.
  // Whether one of `nodes` makes a tensor and carries several owners'
  // computations (a node a pass fused across calls).
  bool CarriesSeveralOwners(const Indices& nodes) const {
    return std::any_of(nodes.begin(), nodes.end(),
                       [&](Index i) { return !before_.ScalarOutputs(i) && FusedOwnersOf(i).size() > 1; });
  }

  // A node carrying several owners' computations (a fused node's loan) is a
  // crossing of its own.
  bool CrossesWithTensor(const Indices& group) const {
    for (Index i : group) {
      if (before_.ScalarOutputs(i)) continue;
      if (FusedOwnersOf(i).size() > 1) return true;
      for (const Read& use : UsesOf(i)) {
        if (s_.members[use.reader] && before_.nodes[use.reader].owner != before_.nodes[i].owner) return true;
      }
    }
    return false;
  }

  // The removed nodes of `group` that `absorber` (an index after) took over.
  // A node the pass made was made from the removed nodes whose owner (and
  // kind) it copied and took over those downstream of them; a node the pass
  // changed took over its removed neighbours, upstream and downstream. Either
  // walk stops at the nodes another made node was made from, so two fusions
  // side by side stay apart. The whole group when nothing anchors the walk.
  Indices Absorbed(Index absorber, const Indices& group, const std::vector<std::pair<Index, Indices>>& anchors) {
    auto is_member = [&](Index i) { return i != kNone && s_.members[i]; };
    std::unordered_set<Index> others;
    for (const auto& [made, from] : anchors) {
      if (made != absorber) others.insert(from.begin(), from.end());
    }
    std::vector<std::pair<Index, bool>> work;  // node, walking downstream
    if (Made(absorber)) {
      auto made_from =
          std::find_if(anchors.begin(), anchors.end(), [&](const auto& anchor) { return anchor.first == absorber; });
      if (made_from == anchors.end()) return group;
      for (Index i : made_from->second) work.emplace_back(i, true);
    } else {
      Index i = after_.nodes[absorber].before;
      for (ValueId input : before_.InputsOf(i)) {
        Index producer = ProducerBefore(input);
        if (is_member(producer)) work.emplace_back(producer, false);
      }
      for (const Read& use : UsesOf(i)) {
        if (is_member(use.reader)) work.emplace_back(use.reader, true);
      }
    }
    if (work.empty()) return group;
    Indices absorbed;
    uint32_t walk = NewWalk();
    while (!work.empty()) {
      auto [i, downstream] = work.back();
      work.pop_back();
      if (others.count(i) || !Visit(i, walk)) continue;
      absorbed.push_back(i);
      if (downstream) {
        for (const Read& use : UsesOf(i)) {
          if (is_member(use.reader)) work.emplace_back(use.reader, true);
        }
      } else {
        for (ValueId input : before_.InputsOf(i)) {
          Index producer = ProducerBefore(input);
          if (is_member(producer)) work.emplace_back(producer, false);
        }
      }
    }
    if (Made(absorber)) AddComputedFromInputs(absorber, others, absorbed);
    std::sort(absorbed.begin(), absorbed.end());
    return absorbed;
  }

  // Adds to `absorbed` the removed nodes upstream of them that compute from
  // what `made` reads: a made node that reads a value from before the group
  // took over every removed node between that value and the nodes it was made
  // from (two Reshapes of two calls collapsed into one that took the later's
  // record reads what the earlier read).
  void AddComputedFromInputs(Index made, const std::unordered_set<Index>& others, Indices& absorbed) {
    Indices candidates;
    uint32_t walk = NewWalk();
    Indices work(absorbed.begin(), absorbed.end());
    for (Index i : absorbed) s_.seen[i] = walk;
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      for (ValueId input : before_.InputsOf(i)) {
        Index producer = ProducerBefore(input);
        if (producer == kNone || !s_.members[producer] || others.count(producer) || !Visit(producer, walk)) continue;
        candidates.push_back(producer);
        work.push_back(producer);
      }
    }
    if (candidates.empty()) return;
    std::sort(candidates.begin(), candidates.end());  // graph order: a node after what it reads
    std::span<const ValueId> reads = after_.InputsOf(made);
    std::unordered_set<Index> taken;
    for (Index i : candidates) {
      std::span<const ValueId> inputs = before_.InputsOf(i);
      bool computes_from_reads = std::any_of(inputs.begin(), inputs.end(), [&](ValueId input) {
        if (std::find(reads.begin(), reads.end(), input) != reads.end()) return true;
        Index producer = ProducerBefore(input);
        return producer != kNone && taken.count(producer) > 0;
      });
      if (computes_from_reads) taken.insert(i);
    }
    absorbed.insert(absorbed.end(), taken.begin(), taken.end());
  }

  // A node after the pass computing from nothing: a constant.
  bool IsConstant(Index j) const { return after_.InputsOf(j).empty() && !after_.nodes[j].holds_graphs; }

  // Whether the pass made node j (after), or changed it beyond rewiring it to
  // older values: other attributes, or a value the pass made among its inputs.
  bool Absorbing(Index j) const {
    if (Made(j)) return true;
    Index i = after_.nodes[j].before;
    if (AttributesChanged(i)) return true;
    if (!s_.inputs_changed[i]) return false;
    std::span<const ValueId> inputs = after_.InputsOf(j);
    return std::any_of(inputs.begin(), inputs.end(), [&](ValueId input) {
      Index producer = ProducerAfter(input);
      return NewInput(input) || (producer != kNone && Made(producer));
    });
  }

  // A node's loan as this pass grows it: its loan so far (or a fresh one of
  // its owner), each owner listed once; lent when the whole pass is
  // classified. Nothing reads it before: the nodes grown are those Absorbing()
  // or IsConstant() holds for, and a merger is neither.
  struct Growing {
    Index node;
    OwnerLoan loan;
    OwnerSet folded;
    OwnerSet spans;
    OwnerSet shared;
    bool grown = false;
  };

  Growing& GrowingOf(Index j) {
    auto [found, fresh] = growing_index_.emplace(j, growing_.size());
    if (!fresh) return growing_[found->second];
    Owner owner = after_.nodes[j].owner;
    const OwnerLoan* existing = loans_ ? loans_(owner) : nullptr;
    OwnerLoan loan = existing ? *existing : OwnerLoan{owner, {}, {}, {}, {}};
    growing_.push_back(Growing{j, std::move(loan), {}, {}, {}, false});
    return growing_.back();
  }

  void FoldInto(Index constant, const Owners& owners) {
    if (owners.empty()) return;
    Growing& growing = GrowingOf(constant);
    if (growing.loan.recorded == kNoOwner) growing.loan.recorded = RecordedOwner(owners.front());
    for (Owner owner : owners) {
      if (growing.folded.Add(growing.loan.folded_from, owner)) growing.grown = true;
    }
  }

  // Node `absorber` (after) took over `nodes` (before): it spans their owners,
  // but for an owner every one of them was shared with, which it is shared
  // with too (the fused computation is one that owner made as well: a split
  // CSE kept for two calls, fused with its unpacks, is still both calls').
  void Absorb(Index absorber, const Indices& nodes) {
    Owners owners = OwnersOf(nodes);
    if (owners.empty()) return;
    Owners shared = SharedByAll(nodes);
    Growing& growing = GrowingOf(absorber);
    OwnerLoan& loan = growing.loan;
    if (loan.recorded == kNoOwner) loan.recorded = owners.front();
    for (Owner owner : owners) {
      if (owner == loan.recorded) continue;
      if (std::binary_search(shared.begin(), shared.end(), owner)) {
        if (growing.shared.Add(loan.shared_with, owner)) growing.grown = true;
      } else if (growing.spans.Add(loan.spans, owner)) {
        growing.grown = true;
      }
    }
    if (loan.spans.empty()) return;
    if (absorbed_.insert(absorber).second) ++result_.fused;
    if (loan.rewrite.empty()) loan.rewrite = pass_;
  }

  const PassGraph& before_;
  const PassGraph& after_;
  const std::string& pass_;
  const LoanLookup& loans_;
  const RewriteDebugLog& log_;
  RewriteClassifier::State& s_;
  PassRewrites result_;
  std::deque<Growing> growing_;  // in the order first grown; no moves as it grows
  std::unordered_map<Index, size_t> growing_index_;
  std::unordered_set<Index> absorbed_;
};

}  // namespace

RewriteClassifier::RewriteClassifier() : state_(std::make_unique<State>()) {}
RewriteClassifier::~RewriteClassifier() = default;

PassRewrites RewriteClassifier::Classify(const PassGraph& before, const PassGraph& after, const std::string& pass,
                                         const LoanLookup& loans, const RewriteDebugLog& log) {
  if (!state_) state_ = std::make_unique<State>();
  return Pass(before, after, pass, loans, log, *state_).Run();
}

void RewriteClassifier::Release() { state_.reset(); }

}  // namespace hiertag
