// RecordRewrites: classifies the nodes a pass removed by what replaced them.
#include "hiertag/passes/record_rewrites.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <memory_resource>
#include <unordered_map>
#include <unordered_set>

#include "hiertag/passes/graph_walk.h"
#include "hiertag/passes/mapped_arrays.h"

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;
using torch::jit::ScopePtr;
using torch::jit::Value;

// A node of the graph before the pass: its index in GraphBefore.
using Index = uint32_t;
constexpr Index kNotBefore = UINT32_MAX;
constexpr size_t kNoOutput = SIZE_MAX;

struct Use {
  Node* user;
  size_t index;
};

// A number, or a tensor of rank 0: every layout op is the identity on it.
bool IsScalarLike(const Value* value) {
  const auto* tensor = value->type()->castRaw<c10::TensorType>();
  return !tensor || tensor->symbolic_sizes().rank() == 0;  // dim() would copy the sizes
}

// A hash of the node's attribute values. Names are hashed as interned symbols:
// both sides of a comparison come from one process.
size_t HashAttributes(Node* node) {
  if (!node->hasAttributes()) return 0;
  size_t hash = 0;
  auto mix = [&hash](size_t value) { hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2); };
  for (c10::Symbol name : node->attributeNames()) {
    mix(static_cast<size_t>(static_cast<c10::unique_t>(name)));
    switch (node->kindOf(name)) {
      case torch::jit::AttributeKind::i:
        mix(std::hash<int64_t>()(node->i(name)));
        break;
      case torch::jit::AttributeKind::f:
        mix(std::hash<double>()(node->f(name)));
        break;
      case torch::jit::AttributeKind::s:
        mix(std::hash<std::string>()(node->s(name)));
        break;
      case torch::jit::AttributeKind::is:
        for (int64_t v : node->is(name)) mix(std::hash<int64_t>()(v));
        break;
      case torch::jit::AttributeKind::fs:
        for (double v : node->fs(name)) mix(std::hash<double>()(v));
        break;
      case torch::jit::AttributeKind::t:
        mix(std::hash<const void*>()(node->t(name).unsafeGetTensorImpl()));
        break;
      case torch::jit::AttributeKind::g:
        mix(std::hash<const void*>()(node->g(name).get()));
        break;
      default:
        mix(static_cast<size_t>(node->kindOf(name)));
    }
  }
  return hash;
}

// The graph before the pass, in flat arrays (none per node): node i's inputs
// are inputs[input_begin[i] .. input_begin[i + 1]), the uses of its outputs
// uses[use_begin[i] .. use_begin[i + 1]). Taken before every observed pass, so
// it holds only what telling the graph after from it needs; everything else is
// derived after the pass, and only when it changed the graph. The arrays are
// refilled in place: once they have grown to the graph, taking it allocates
// nothing.
//
// The attributes of a node that reads nothing and holds no block are not
// hashed: such a node is a constant, and the classification folds a group
// into it whether or not the pass changed its attributes (Absorbing, then
// IsConstant), so nothing compares them.
struct GraphBefore {
  MappedArray<Node*> nodes = MakeMappedArray<Node*>();  // every node and block return, pre-order
  // The order the graph is expected in at the next Take, only prefetched:
  // what the walk after a pass that changed the graph met; else `nodes`
  // themselves (then swapped in by Take).
  MappedArray<Node*> expected = MakeMappedArray<Node*>();
  bool expect_nodes = true;
  MappedArray<c10::Symbol> kinds = MakeMappedArray<c10::Symbol>();
  MappedArray<ScopePtr> scopes = MakeMappedArray<ScopePtr>();
  MappedArray<size_t> attributes = MakeMappedArray<size_t>();        // HashAttributes
  MappedArray<size_t> first_output = MakeMappedArray<size_t>();      // the unique() of its first output; kNoOutput
  MappedArray<uint8_t> scalar_outputs = MakeMappedArray<uint8_t>();  // every output a number or a 0-d tensor
  MappedArray<uint32_t> input_begin = MakeMappedArray<uint32_t>();
  MappedArray<Value*> inputs = MakeMappedArray<Value*>();
  MappedArray<uint32_t> use_begin = MakeMappedArray<uint32_t>();
  MappedArray<Use> uses = MakeMappedArray<Use>();
  // The graph inputs' unique() numbers, and one past the highest: values are
  // numbered once per graph, in the order they are made, so a graph input
  // after the pass numbered at least this is one the pass added. (A pointer
  // noted before could be a freed input's address, reused.)
  MappedArray<size_t> graph_inputs = MakeMappedArray<size_t>();
  size_t inputs_unique_end = 0;

  void Take(torch::jit::Graph& graph) {
    if (expect_nodes) std::swap(nodes, expected);
    expect_nodes = true;  // unless the walk after the pass meets another order
    nodes.clear();
    kinds.clear();
    scopes.clear();
    attributes.clear();
    first_output.clear();
    scalar_outputs.clear();
    input_begin.clear();
    inputs.clear();
    use_begin.clear();
    uses.clear();
    // Each node is noted as the walk reaches it: its loads overlap with the
    // load of the next node, where collecting the nodes first and reading
    // them in a second loop paid every node's cache misses twice.
    VisitNodesAndReturns(
        graph.block(),
        [this](Node* node) {
          TakeNode(node);
          return true;
        },
        expected);
    input_begin.push_back(static_cast<uint32_t>(inputs.size()));
    use_begin.push_back(static_cast<uint32_t>(uses.size()));
    graph_inputs.clear();
    inputs_unique_end = 0;
    for (const Value* input : graph.inputs()) {
      graph_inputs.push_back(input->unique());
      inputs_unique_end = std::max(inputs_unique_end, input->unique() + 1);
    }
  }

  void TakeNode(Node* node) {
    nodes.push_back(node);
    kinds.push_back(node->kind());
    scopes.push_back(node->scope());
    bool constant = node->inputs().empty() && node->blocks().empty();
    attributes.push_back(constant ? 0 : HashAttributes(node));
    first_output.push_back(node->outputs().empty() ? kNoOutput : node->output(0)->unique());
    input_begin.push_back(static_cast<uint32_t>(inputs.size()));
    inputs.insert(inputs.end(), node->inputs().begin(), node->inputs().end());
    use_begin.push_back(static_cast<uint32_t>(uses.size()));
    bool scalar = true;
    for (Value* output : node->outputs()) {
      scalar &= IsScalarLike(output);
      for (const torch::jit::Use& use : output->uses()) uses.push_back({use.user, use.offset});
    }
    scalar_outputs.push_back(scalar);
  }

  // Lets go of the scopes: the recorder keeps the arrays between passes, and a
  // scope held here would look shared to BorrowedScopes::ShareWith (which
  // grows a loan in place only when its node alone holds it).
  void ReleaseScopes() { scopes.clear(); }

  c10::ArrayRef<Value*> InputsOf(Index i) const {
    return c10::ArrayRef<Value*>(inputs.data() + input_begin[i], input_begin[i + 1] - input_begin[i]);
  }
  c10::ArrayRef<Use> UsesOf(Index i) const {
    return c10::ArrayRef<Use>(uses.data() + use_begin[i], use_begin[i + 1] - use_begin[i]);
  }
};

}  // namespace

// What observing a pass needs per node of the graph, in mapped pages
// (mapped_arrays.h says why), kept from one pass to the next so that only the
// first passes allocate it (a fresh large allocation
// right after a pass freed many small nodes also makes glibc's malloc
// consolidate them, which costs as much again).
struct RewriteRecorder::Arrays {
  GraphBefore before;
  MappedMap<Node*, Index> index = MakeMappedMap<Node*, Index>();     // a node before the pass -> its index
  MappedArray<uint8_t> alive = MakeMappedArray<uint8_t>();           // per node before: still in the graph
  MappedArray<uint8_t> inputs_changed = MakeMappedArray<uint8_t>();  // per node before: alive, reading other values
  // Those nodes' indices (a pass can rewire most of the graph).
  MappedArray<Index> reading_other_values = MakeMappedArray<Index>();
  MappedArray<uint8_t> grouped = MakeMappedArray<uint8_t>();  // per node before: in a group classified
  // Per node before: in the group being classified; all 0 between groups.
  MappedArray<uint8_t> members = MakeMappedArray<uint8_t>();
  MappedArray<uint32_t> seen = MakeMappedArray<uint32_t>();  // per node before: the last walk that reached it
  MappedMap<const Value*, Index> producers = MakeMappedMap<const Value*, Index>();
  // (input, reader) before the pass, sorted.
  MappedArray<std::pair<const Value*, Index>> readers = MakeMappedArray<std::pair<const Value*, Index>>();
  // The nodes the pass made, in graph order: filled only when the pass changed
  // the graph.
  MappedMap<Node*, uint32_t> created = MakeMappedMap<Node*, uint32_t>();  // a made node -> its index in created_order
  MappedArray<Node*> created_order = MakeMappedArray<Node*>();
  MappedArray<ScopePtr> created_scope = MakeMappedArray<ScopePtr>();  // a made node's scope before any loan
  // (scope, index into created_order) of every made node, sorted: a made
  // node's scope is the one of what it replaced (MadeInScopesOf).
  MappedArray<std::pair<const torch::jit::Scope*, uint32_t>> made_in_scope =
      MakeMappedArray<std::pair<const torch::jit::Scope*, uint32_t>>();
  // The classification's temporaries (a group's nodes, the scopes it lists,
  // the walks' work lists): made and let go of per group, so pooled, over
  // mapped pages like the rest; a list larger than the largest pooled block
  // is mapped by itself.
  std::pmr::unsynchronized_pool_resource pool{std::pmr::pool_options{0, size_t{1} << 16}, MappedMemory()};

  // Lets go of the scopes held (see GraphBefore::ReleaseScopes).
  void ReleaseScopes() {
    before.ReleaseScopes();
    created_scope.clear();
  }
};

namespace {

// Adds scopes to a list once each: the list is searched while it is short,
// and indexed once it grows (a constant that a group of every layer's
// scopes folds into lists hundreds). The index is made only then: a c10
// flat_hash_set allocates when constructed, and a pass makes a ScopeSet for
// every loan it grows and every list of scopes it gathers (on the 825-layer
// decoder about a tenth of the classification went to allocating sets
// never used).
class ScopeSet {
 public:
  explicit ScopeSet(std::pmr::memory_resource* memory) : memory_(memory) {}

  // Appends `scope` to `list` (the list this set stands for) unless listed.
  template <typename Scopes>
  bool Add(Scopes& list, const ScopePtr& scope) {
    if (list.size() < kSearched) {
      if (std::find(list.begin(), list.end(), scope) != list.end()) return false;
    } else {
      if (!index_) index_ = std::make_unique<Index>(Index::allocator_type(memory_));
      if (index_->size() < list.size()) {
        for (const ScopePtr& listed : list) index_->insert(listed.get());
      }
      if (!index_->insert(scope.get()).second) return false;
    }
    list.push_back(scope);
    return true;
  }

 private:
  using Index = ska::flat_hash_set<const torch::jit::Scope*, std::hash<const torch::jit::Scope*>,
                                   std::equal_to<const torch::jit::Scope*>,
                                   std::pmr::polymorphic_allocator<const torch::jit::Scope*>>;
  static constexpr size_t kSearched = 16;
  std::pmr::memory_resource* memory_;
  std::unique_ptr<Index> index_;
};

// The classification's lists, in RewriteRecorder::Arrays' pool.
using Indices = std::pmr::vector<Index>;
using Scopes = std::pmr::vector<ScopePtr>;

class Observer {
 public:
  Observer(torch::jit::Graph& graph, std::string pass, BorrowedScopes& borrowed, RewriteLog& log,
           RewriteRecorder::Arrays& arrays)
      : graph_(graph),
        pass_(std::move(pass)),
        borrowed_(borrowed),
        log_(log),
        before_(arrays.before),
        index_(arrays.index),
        alive_(arrays.alive),
        inputs_changed_(arrays.inputs_changed),
        reading_other_values_(arrays.reading_other_values),
        grouped_(arrays.grouped),
        members_(arrays.members),
        seen_(arrays.seen),
        producers_(arrays.producers),
        readers_(arrays.readers),
        created_(arrays.created),
        created_order_(arrays.created_order),
        created_scope_(arrays.created_scope),
        made_in_scope_(arrays.made_in_scope),
        pool_(&arrays.pool) {
    before_.Take(graph);
  }

  // Classifies what the pass did, adding the time of each part to `times`.
  void After(RewriteTimes& times) {
    using Clock = std::chrono::steady_clock;
    Clock::time_point start = Clock::now();
    bool unchanged = Unchanged();
    Clock::time_point checked = Clock::now();
    times.check += checked - start;
    if (unchanged) {
      if (JitLogging()) GRAPH_DEBUG("hiertag: ", pass_, " left the graph as it was");
      return;
    }
    size_t count = before_.nodes.size();
    index_.clear();
    index_.reserve(count);
    for (Index i = 0; i < count; ++i) index_.emplace(before_.nodes[i], i);
    producers_.clear();
    readers_.clear();
    alive_.assign(count, 0);
    inputs_changed_.assign(count, 0);
    grouped_.assign(count, 0);
    seen_.assign(count, 0);
    created_.clear();
    created_order_.clear();
    created_scope_.clear();
    made_in_scope_.clear();
    reading_other_values_.clear();
    before_.expected.clear();
    before_.expect_nodes = false;
    VisitNodesAndReturns(graph_.block(), [&](Node* node) {
      before_.expected.push_back(node);
      Index i = IndexOf(node);
      // Ahead of the node met, not of its position: the pass removed
      // and made nodes, so positions drift.
      if (i != kNotBefore) PrefetchExpectedAfter(node, before_.nodes, i);
      if (i != kNotBefore && SameNode(i, node)) {
        alive_[i] = 1;
        if (!std::equal(node->inputs().begin(), node->inputs().end(), before_.InputsOf(i).begin(),
                        before_.InputsOf(i).end())) {
          inputs_changed_[i] = 1;
          reading_other_values_.push_back(i);
        }
      } else {
        created_.emplace(node, static_cast<uint32_t>(created_order_.size()));
        created_order_.push_back(node);
        created_scope_.push_back(node->scope());
        made_in_scope_.emplace_back(created_scope_.back().get(), created_order_.size() - 1);
      }
      return true;
    });
    std::sort(made_in_scope_.begin(), made_in_scope_.end());
    Clock::time_point matched = Clock::now();
    times.matching += matched - checked;
    for (Index i = 0; i < count; ++i) {
      if (!alive_[i] && !grouped_[i]) Classify(Group(i));
    }
    std::sort(reading_other_values_.begin(), reading_other_values_.end());
    for (Index i : reading_other_values_) ClassifyReadsPastKeptNodes(i);
    LendGrownLoans();
    times.classify += Clock::now() - matched;
  }

 private:
  // Whether the pass left every node where it was, with the same kind, scope
  // and inputs, and the graph's inputs as they were: then it removed, made and
  // rewired nothing, and there is nothing to classify (an attribute changed in
  // place is looked at only for nodes that also read something else).
  bool Unchanged() const {
    if (graph_.inputs().size() != before_.graph_inputs.size() ||
        !std::equal(before_.graph_inputs.begin(), before_.graph_inputs.end(), graph_.inputs().begin(),
                    [](size_t unique, const Value* input) { return unique == input->unique(); })) {
      return false;
    }
    Index next = 0;  // in Take's order, the index the next node must have
    return VisitNodesAndReturns(
               graph_.block(), [&](Node* node) { return UnchangedNode(node, next++); }, before_.nodes) &&
           next == before_.nodes.size();
  }

  bool UnchangedNode(Node* node, Index i) const {
    return i < before_.nodes.size() && node == before_.nodes[i] && SameNode(i, node) &&
           std::equal(node->inputs().begin(), node->inputs().end(), before_.InputsOf(i).begin(),
                      before_.InputsOf(i).end());
  }

  // Whether `node`, at the address node i had, is node i: the same address
  // with another kind, scope or first output (values are numbered once per
  // graph) is a new node in a freed slot.
  bool SameNode(Index i, Node* node) const {
    size_t first_output = node->outputs().empty() ? kNoOutput : node->output(0)->unique();
    return before_.kinds[i] == node->kind() && before_.scopes[i] == node->scope() &&
           before_.first_output[i] == first_output;
  }

  Index IndexOf(const Node* node) const {
    auto found = index_.find(const_cast<Node*>(node));
    return found == index_.end() ? kNotBefore : found->second;
  }
  bool Alive(const Node* node) const {
    Index i = IndexOf(node);
    return i != kNotBefore && alive_[i];
  }
  bool Created(Node* node) const { return created_.count(node) > 0; }
  // A node alive after the pass whose attributes the pass changed.
  bool AttributesChanged(Index i) const {
    return alive_[i] && before_.attributes[i] != HashAttributes(before_.nodes[i]);
  }

  // A fresh mark for the walks below (seen_[i] == stamp_: visited in this walk).
  uint32_t NewWalk() { return ++stamp_; }
  bool Visit(Index i, uint32_t walk) {
    if (seen_[i] == walk) return false;
    seen_[i] = walk;
    return true;
  }

  // The removed nodes connected to `start` through values, in graph order.
  Indices Group(Index start) {
    Indices group(pool_);
    Indices work({start}, pool_);
    grouped_[start] = 1;
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      group.push_back(i);
      auto visit = [&](Index other) {
        if (other != kNotBefore && !alive_[other] && !grouped_[other]) {
          grouped_[other] = 1;
          work.push_back(other);
        }
      };
      for (const Use& use : before_.UsesOf(i)) visit(IndexOf(use.user));
      for (Value* input : before_.InputsOf(i)) visit(ProducerOf(input));
    }
    std::sort(group.begin(), group.end());
    return group;
  }

  // The producer of a value as it was before the pass, found through the uses
  // noted then (a removed producer's pointer is never dereferenced); kNotBefore
  // for a graph or block input.
  Index ProducerOf(const Value* value) {
    if (!producers_built_) {
      producers_built_ = true;
      producers_.reserve(before_.nodes.size());
      for (Index i = 0; i < before_.nodes.size(); ++i) {
        for (const Use& use : before_.UsesOf(i)) {
          Index user = IndexOf(use.user);
          if (user != kNotBefore && use.index < before_.InputsOf(user).size()) {
            producers_[before_.InputsOf(user)[use.index]] = i;
          }
        }
      }
    }
    auto found = producers_.find(value);
    return found == producers_.end() ? kNotBefore : found->second;
  }

  void Classify(const Indices& group) {
    MappedArray<uint8_t>& members = members_;
    members.resize(before_.nodes.size());
    for (Index i : group) members[i] = 1;
    struct ClearMembers {
      MappedArray<uint8_t>& members;
      const Indices& group;
      ~ClearMembers() {
        for (Index i : group) members[i] = 0;
      }
    } clear{members, group};
    auto is_member = [&](const Node* node) {
      Index i = IndexOf(node);
      return i != kNotBefore && members[i];
    };
    // The values the group's nodes read, sorted: one allocation per group,
    // where a hash set allocates per value (or, c10's, when made).
    std::pmr::vector<const Value*> upstream_values(pool_);
    for (Index i : group) {
      upstream_values.insert(upstream_values.end(), before_.InputsOf(i).begin(), before_.InputsOf(i).end());
    }
    std::sort(upstream_values.begin(), upstream_values.end());
    auto upstream = [&upstream_values](const Value* value) {
      return std::binary_search(upstream_values.begin(), upstream_values.end(), value);
    };
    Scopes scopes = ScopesOf(group);
    if (scopes.empty()) return;
    std::pmr::vector<Node*> absorbers(pool_);
    std::pmr::vector<Node*> mergers(pool_);
    std::pmr::vector<std::pair<Use, Value*>> rewired(pool_);  // a use and what it reads now
    bool bypassed = false;
    // ComputedBy, once per node (std's map: made without allocating).
    std::pmr::unordered_map<Index, Scopes> computed_by(pool_);
    auto folded_scopes = [&](Index i) -> const Scopes& {
      auto found = computed_by.find(i);
      if (found == computed_by.end()) found = computed_by.emplace(i, ComputedBy(i)).first;
      return found->second;
    };
    for (Index i : group) {
      for (const Use& use : before_.UsesOf(i)) {
        Index user = IndexOf(use.user);
        if (is_member(use.user) || !((user != kNotBefore && alive_[user]) || Created(use.user))) continue;
        if (user != kNotBefore && AttributesChanged(user)) {
          absorbers.push_back(use.user);
          continue;
        }
        if (use.index >= use.user->inputs().size()) continue;
        Value* now = use.user->input(use.index);
        Node* producer = now->node();
        if (NewInput(now)) {
          if (!folded_scopes(i).empty()) {
            const Scopes& folded = folded_scopes(i);
            log_.records.push_back({RewriteRecord::Kind::kFolded,
                                    pass_,
                                    {folded.begin(), folded.end()},
                                    now->unique(),
                                    nullptr,
                                    nullptr,
                                    {},
                                    -1});
          }
        } else if (Absorbing(producer)) {
          if (producer->inputs().empty()) {
            FoldInto(producer, folded_scopes(i));
          } else {
            absorbers.push_back(producer);
          }
        } else if (IsConstant(producer)) {
          // An older constant holds what the group computed (torch 2.8's shape
          // inference makes constants for static shapes before constant folding
          // reuses them): folded into it, as into a new one. A constant is
          // nobody's data, so no boundary is cut.
          FoldInto(producer, folded_scopes(i));
        } else if (upstream(now) || ComputedFrom(group, now)) {
          if (JitLogging()) {
            GRAPH_DEBUG("hiertag: ", pass_, ": ", *use.user, " reads %", now->debugName(), " from before the group");
          }
          bypassed = true;
          rewired.emplace_back(use, now);
        } else if (Alive(producer)) {
          mergers.push_back(producer);
        }
      }
    }
    // Every node the pass made from the group's nodes took them over too, also
    // one only another made node reads (conv1+bn1 fused before conv2+bn2).
    std::pmr::vector<std::pair<Node*, Indices>> anchors(pool_);
    std::pmr::unordered_set<Node*> linked(pool_);  // made nodes computing from what the group read
    for (uint32_t made_index : MadeInScopesOf(group)) {
      Node* made = created_order_[made_index];
      if (made->inputs().empty()) continue;
      // A scope holds much besides the group (the caller's Concat of shape
      // values made from a removed ListConstruct): only a node computing from
      // what the group read, or from another such made node, was made from it.
      bool from_group = std::any_of(made->inputs().begin(), made->inputs().end(), [&](Value* input) {
        return linked.count(input->node()) || (upstream(input) && Existed(input));
      });
      if (!from_group) continue;
      linked.insert(made);
      // What it was made from: torch copies the replaced node's metadata, and
      // the replacement is mostly of the same kind (a Conv for a Conv).
      Indices made_from(pool_), same_scope(pool_);
      for (Index i : group) {
        if (before_.scopes[i] != created_scope_[made_index]) continue;
        same_scope.push_back(i);
        if (before_.kinds[i] == made->kind()) made_from.push_back(i);
      }
      if (made_from.empty()) made_from = std::move(same_scope);
      if (made_from.empty()) continue;
      anchors.emplace_back(made, std::move(made_from));
      if (std::find(absorbers.begin(), absorbers.end(), made) == absorbers.end()) absorbers.push_back(made);
    }
    for (Node* absorber : absorbers) Absorb(absorber, ScopesOf(Absorbed(absorber, group, anchors)));
    for (Node* merger : mergers) {
      bool lent = false;
      for (const ScopePtr& scope : scopes) lent |= borrowed_.ShareWith(merger, scope);
      log_.merged += lent;
    }
    if (bypassed && scopes.size() > 1 && CrossesWithTensor(group)) {
      if (JitLogging()) {
        GRAPH_UPDATE("hiertag: ", pass_, " removed ", group.size(), " nodes of ", scopes.size(), " module calls");
      }
      log_.records.push_back(
          {RewriteRecord::Kind::kRemoved, pass_, {scopes.begin(), scopes.end()}, 0, nullptr, nullptr, {}, -1});
    } else {
      for (const auto& [use, now] : rewired) RecordRewired(use, now);
    }
  }

  // The nodes the pass made in the scope of one of the group's nodes (indices
  // into created_order_), in graph order: only they can have been made from
  // the group (a made node has the scope of what it replaces). Looked up by
  // scope, so a pass that folds N groups into N constants does not compare
  // every pair.
  std::pmr::vector<uint32_t> MadeInScopesOf(const Indices& group) const {
    std::pmr::vector<uint32_t> indices(pool_);
    std::pmr::unordered_set<const torch::jit::Scope*> scopes(pool_);
    for (Index i : group) {
      const torch::jit::Scope* scope = before_.scopes[i].get();
      if (!scopes.insert(scope).second) continue;
      auto made = std::lower_bound(made_in_scope_.begin(), made_in_scope_.end(), std::make_pair(scope, uint32_t{0}));
      for (; made != made_in_scope_.end() && made->first == scope; ++made) indices.push_back(made->second);
    }
    std::sort(indices.begin(), indices.end());
    return indices;
  }

  // The scopes of the group's nodes that node i (a member) was computed from,
  // its own among them: what a constant or initializer read in place of i's
  // output holds. Not the whole group's: a group joins every computation that
  // shares a removed node (each layer's shape arithmetic from one sequence
  // length), and each constant the pass makes holds one of them.
  Scopes ComputedBy(Index i) {
    Indices nodes(pool_);
    uint32_t walk = NewWalk();
    Indices work({i}, pool_);
    while (!work.empty()) {
      Index k = work.back();
      work.pop_back();
      if (!Visit(k, walk)) continue;
      nodes.push_back(k);
      for (Value* input : before_.InputsOf(k)) {
        Index producer = ProducerOf(input);
        if (producer != kNotBefore && members_[producer]) work.push_back(producer);
      }
    }
    std::sort(nodes.begin(), nodes.end());
    return ScopesOf(nodes);
  }

  // Whether the group's nodes were computed from `value` (through nodes that
  // are gone or alive alike). Nodes before `value`'s producer in graph order
  // cannot have read it: the walk stops there.
  bool ComputedFrom(const Indices& group, const Value* value) {
    Index maker = ProducerOf(value);
    Index earliest = maker == kNotBefore ? 0 : maker;
    uint32_t walk = NewWalk();
    Indices work(group.begin(), group.end(), pool_);
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      if (i < earliest || !Visit(i, walk)) continue;
      for (Value* input : before_.InputsOf(i)) {
        if (input == value) return true;
        Index producer = ProducerOf(input);
        if (producer != kNotBefore) work.push_back(producer);
      }
    }
    return false;
  }

  // A node the pass rewired to read, in place of a value that still exists
  // (kept for other readers, or left for dead code elimination), a value that
  // one was computed from: the nodes in between are bypassed, not removed, so
  // no group shows it. With attributes of its own changed, the node took their
  // computation over (the attention's Transpose composed with the caller's
  // Transpose, which stays for the keys the caller hands out): it spans their
  // scopes, as if they were removed. Else it reads the same value from further
  // up: rewired.
  void ClassifyReadsPastKeptNodes(Index i) {
    Node* node = before_.nodes[i];
    c10::ArrayRef<Value*> inputs_before = before_.InputsOf(i);
    if (inputs_before.size() != node->inputs().size()) {
      if (JitLogging()) {
        GRAPH_DEBUG("hiertag: ", pass_, " added or dropped inputs of ", *node, ": no index pairs them, not classified");
      }
      return;
    }
    bool own_changed = AttributesChanged(i);
    for (size_t index = 0; index < inputs_before.size(); ++index) {
      Value* now = node->input(index);
      if (inputs_before[index] == now || !Existed(now)) continue;
      Index maker = ProducerOf(inputs_before[index]);
      if (maker == kNotBefore || !alive_[maker]) continue;  // a removed maker: its group says what happened
      Indices bypassed = Between(now, maker);
      if (bypassed.empty()) continue;
      if (own_changed) {
        Absorb(node, ScopesOf(bypassed));
      } else {
        RecordRewired({node, index}, now);
      }
    }
  }

  // Whether `value` existed before the pass (a node made it that is still
  // there, or it was a graph input then): only then can a pointer noted before the
  // pass be compared with it (a freed value's address can be reused).
  bool Existed(Value* value) const { return InputBefore(value) || Alive(value->node()); }

  // Whether `value`, in the graph after the pass, is a graph input that was
  // one before the pass.
  bool InputBefore(const Value* value) const {
    return value->node() == graph_.param_node() && value->unique() < before_.inputs_unique_end;
  }
  // Whether `value`, in the graph after the pass, is a graph input the pass added.
  bool NewInput(const Value* value) const {
    return value->node() == graph_.param_node() && value->unique() >= before_.inputs_unique_end;
  }

  // The nodes, before the pass, on a path from `from` to `to` (`to` included),
  // in graph order; empty when `to` was not computed from `from`. Nodes before
  // `from`'s producer cannot have read it: the walk stops there.
  Indices Between(Value* from, Index to) {
    Index earliest = InputBefore(from) ? 0 : IndexOf(from->node());
    Indices ancestors(pool_);
    bool reached = false;
    uint32_t walk = NewWalk();
    Indices work({to}, pool_);
    while (!work.empty()) {
      Index i = work.back();
      work.pop_back();
      if (i < earliest || !Visit(i, walk)) continue;
      ancestors.push_back(i);
      for (Value* input : before_.InputsOf(i)) {
        if (input == from) {
          reached = true;
          continue;
        }
        Index producer = ProducerOf(input);
        if (producer != kNotBefore) work.push_back(producer);
      }
    }
    if (!reached) return Indices(pool_);
    std::sort(ancestors.begin(), ancestors.end());
    uint32_t on_path = NewWalk();
    Indices path(pool_);
    for (Index i : ancestors) {
      c10::ArrayRef<Value*> inputs = before_.InputsOf(i);
      bool reads_path = std::any_of(inputs.begin(), inputs.end(), [&](Value* input) {
        if (input == from) return true;
        Index producer = ProducerOf(input);
        return producer != kNotBefore && seen_[producer] == on_path;
      });
      if (!reads_path) continue;
      seen_[i] = on_path;
      path.push_back(i);
    }
    return path;
  }

  // `user` reads `now` instead of what it read before: a value of rank > 0
  // that is data (not a constant) is recorded with who made and read it before.
  void RecordRewired(const Use& use, Value* now) {
    Node* user = use.user;
    if (IsScalarLike(now) || now->node()->kind() == c10::onnx::Constant || now->node()->kind() == c10::prim::Constant) {
      return;
    }
    Index reader = IndexOf(user);
    Index replaced = ProducerOf(before_.InputsOf(reader).at(use.index));
    if (replaced == kNotBefore) return;
    RewriteRecord record{RewriteRecord::Kind::kRewired, pass_, {}, 0, before_.scopes[reader],
                         before_.scopes[replaced],      {},    -1};
    if (now->node()->kind() == c10::prim::Param && now->node()->owningBlock() == graph_.block()) {
      record.graph_input = static_cast<int>(now->offset());
    } else if (Index made = IndexOf(now->node()); made != kNotBefore) {
      record.value_scopes.push_back(before_.scopes[made]);
    }
    for (Index i : ReadersOf(now)) record.value_scopes.push_back(before_.scopes[i]);
    if (IsBlankScope(record.reader) || IsBlankScope(record.replaced)) return;
    if (JitLogging()) GRAPH_UPDATE("hiertag: ", pass_, " rewired ", *user, " to read %", now->debugName());
    log_.records.push_back(std::move(record));
  }

  // The nodes that read `value` before the pass, in graph order, once per
  // input slot (an index of every input, sorted by value, built when first asked).
  Indices ReadersOf(const Value* value) {
    if (!readers_built_) {
      readers_built_ = true;
      readers_.reserve(before_.inputs.size());
      for (Index i = 0; i < before_.nodes.size(); ++i) {
        for (const Value* input : before_.InputsOf(i)) readers_.emplace_back(input, i);
      }
      std::sort(readers_.begin(), readers_.end());
    }
    auto first = std::lower_bound(readers_.begin(), readers_.end(), std::make_pair(value, Index{0}));
    Indices readers(pool_);
    for (auto it = first; it != readers_.end() && it->first == value; ++it) readers.push_back(it->second);
    return readers;
  }

  // Whether a value of rank > 0 passed between two module calls inside the
  // group. A removed group as a whole computes its input again; a number
  // handed from one call to the next (NumToTensor in one, Int in the other, a
  // pair the peephole drops) is still the same number, while a tensor between
  // them (a permute and its inverse) had another layout than what is read now.
  bool CrossesWithTensor(const Indices& group) const {
    for (Index i : group) {
      if (before_.scalar_outputs[i]) continue;
      for (const Use& use : before_.UsesOf(i)) {
        Index user = IndexOf(use.user);
        if (user != kNotBefore && members_[user] && before_.scopes[user] != before_.scopes[i]) return true;
      }
    }
    return false;
  }

  Scopes ScopesOf(const Indices& nodes) const {
    Scopes scopes(pool_);
    ScopeSet listed(pool_);
    for (Index i : nodes) {
      if (!IsBlankScope(before_.scopes[i])) listed.Add(scopes, before_.scopes[i]);
    }
    return scopes;
  }

  // The removed nodes of `group` that `absorber` took over. A node the pass
  // made was made from the removed nodes whose scope (and kind) it copied and
  // took over those downstream of them; a node
  // the pass changed took over its removed neighbours, upstream and downstream.
  // Either walk stops at the nodes another made node was made from, so two
  // fusions side by side (Conv+BN, then the next layer's Conv+BN) stay apart.
  // The whole group when nothing anchors the walk.
  Indices Absorbed(Node* absorber, const Indices& group, const std::pmr::vector<std::pair<Node*, Indices>>& anchors) {
    auto is_member = [&](Index i) { return i != kNotBefore && members_[i]; };
    std::pmr::unordered_set<Index> others(pool_);
    for (const auto& [made, from] : anchors) {
      if (made != absorber) others.insert(from.begin(), from.end());
    }
    std::pmr::vector<std::pair<Index, bool>> work(pool_);  // node, walking downstream
    if (Created(absorber)) {
      auto made_from =
          std::find_if(anchors.begin(), anchors.end(), [&](const auto& anchor) { return anchor.first == absorber; });
      if (made_from == anchors.end()) return Indices(group, pool_);
      for (Index i : made_from->second) work.emplace_back(i, true);
    } else {
      Index i = IndexOf(absorber);
      for (Value* input : before_.InputsOf(i)) {
        Index producer = ProducerOf(input);
        if (is_member(producer)) work.emplace_back(producer, false);
      }
      for (const Use& use : before_.UsesOf(i)) {
        Index user = IndexOf(use.user);
        if (is_member(user)) work.emplace_back(user, true);
      }
    }
    if (work.empty()) return Indices(group, pool_);
    Indices absorbed(pool_);
    uint32_t walk = NewWalk();
    while (!work.empty()) {
      auto [i, downstream] = work.back();
      work.pop_back();
      if (others.count(i) || !Visit(i, walk)) continue;
      absorbed.push_back(i);
      if (downstream) {
        for (const Use& use : before_.UsesOf(i)) {
          Index user = IndexOf(use.user);
          if (is_member(user)) work.emplace_back(user, true);
        }
      } else {
        for (Value* input : before_.InputsOf(i)) {
          Index producer = ProducerOf(input);
          if (is_member(producer)) work.emplace_back(producer, false);
        }
      }
    }
    std::sort(absorbed.begin(), absorbed.end());
    return absorbed;
  }

  // A node that computes from nothing: a constant (not a graph input).
  static bool IsConstant(const Node* node) {
    return node->inputs().empty() && node->blocks().empty() && node->kind() != torch::jit::prim::Param;
  }

  // Whether the pass made `node`, or changed it beyond rewiring it to older
  // values: other attributes, or a value the pass made among its inputs.
  bool Absorbing(Node* node) const {
    if (Created(node)) return true;
    Index i = IndexOf(node);
    if (i == kNotBefore || !alive_[i]) return false;
    if (AttributesChanged(i)) return true;
    return inputs_changed_[i] && std::any_of(node->inputs().begin(), node->inputs().end(),
                                             [&](Value* input) { return NewInput(input) || Created(input->node()); });
  }

  // A node's loan as this pass grows it: copied from the node's loan once, and
  // each scope listed once (a constant that every layer's shape computation
  // folds into would otherwise copy a loan of 1, 2, ... N scopes N times). The
  // loans are lent when the whole pass is classified (LendGrownLoans). Nothing
  // reads them before: the nodes grown are those Absorbing() or IsConstant()
  // holds for, and the one other loan classification writes, ShareWith on a
  // merger, is for a node neither holds for.
  struct GrowingLoan {
    Node* node;
    BorrowedScopes::Loan loan;
    ScopeSet folded;  // loan.folded_from
    ScopeSet spans;   // loan.spans
    bool grown = false;
  };

  GrowingLoan& GrowingLoanOf(Node* node) {
    auto [found, fresh] = growing_index_.emplace(node, growing_.size());
    if (!fresh) return growing_[found->second];
    BorrowedScopes::Loan loan = borrowed_.NewLoan(node->scope(), node->scope());
    if (const BorrowedScopes::Loan* existing = borrowed_.Find(node->scope())) loan = *existing;
    return growing_.emplace_back(GrowingLoan{node, std::move(loan), ScopeSet(pool_), ScopeSet(pool_), false});
  }

  void FoldInto(Node* constant, const Scopes& scopes) {
    if (scopes.empty()) return;
    GrowingLoan& growing = GrowingLoanOf(constant);
    BorrowedScopes::Loan& loan = growing.loan;
    if (IsBlankScope(loan.recorded)) loan.recorded = scopes.front();
    for (const ScopePtr& scope : scopes) {
      if (growing.folded.Add(loan.folded_from, scope)) growing.grown = true;
    }
  }

  void Absorb(Node* absorber, const Scopes& scopes) {
    if (scopes.empty()) return;
    GrowingLoan& growing = GrowingLoanOf(absorber);
    BorrowedScopes::Loan& loan = growing.loan;
    if (IsBlankScope(loan.recorded)) loan.recorded = scopes.front();
    for (const ScopePtr& scope : scopes) {
      if (scope != loan.recorded && growing.spans.Add(loan.spans, scope)) growing.grown = true;
    }
    if (loan.spans.empty()) return;
    if (absorbed_.insert(absorber).second) ++log_.fused;
    if (loan.rewrite.empty()) loan.rewrite = pass_;
  }

  void LendGrownLoans() {
    for (GrowingLoan& growing : growing_) {
      if (!growing.grown) continue;
      if (JitLogging()) {
        GRAPH_UPDATE("hiertag: ", pass_, " lent ", *growing.node, " spans of ", growing.loan.spans.size(),
                     " scopes, folded from ", growing.loan.folded_from.size());
      }
      growing.node->setScope(borrowed_.Lend(std::move(growing.loan)));
    }
  }

  torch::jit::Graph& graph_;
  std::string pass_;
  BorrowedScopes& borrowed_;
  RewriteLog& log_;
  // The recorder's arrays (RewriteRecorder::Arrays says what each holds); all
  // but before_ are filled only when the pass changed the graph.
  GraphBefore& before_;
  MappedMap<Node*, Index>& index_;
  MappedArray<uint8_t>& alive_;
  MappedArray<uint8_t>& inputs_changed_;
  MappedArray<Index>& reading_other_values_;
  MappedArray<uint8_t>& grouped_;
  MappedArray<uint8_t>& members_;
  MappedArray<uint32_t>& seen_;
  MappedMap<const Value*, Index>& producers_;
  MappedArray<std::pair<const Value*, Index>>& readers_;
  bool producers_built_ = false;
  bool readers_built_ = false;
  uint32_t stamp_ = 0;
  MappedMap<Node*, uint32_t>& created_;
  MappedArray<Node*>& created_order_;
  MappedArray<ScopePtr>& created_scope_;
  MappedArray<std::pair<const torch::jit::Scope*, uint32_t>>& made_in_scope_;
  std::pmr::memory_resource* pool_;  // the recorder's pool, for the classification's lists
  // What classifying this pass grows, in mapped pages as the arrays are.
  std::pmr::monotonic_buffer_resource scratch_{MappedMemory()};
  std::pmr::unordered_set<Node*> absorbed_{&scratch_};
  std::pmr::deque<GrowingLoan> growing_{&scratch_};  // in the order the pass first grew them; no moves as it grows
  MappedMap<Node*, size_t> growing_index_ = MakeMappedMap<Node*, size_t>(&scratch_);  // -> growing_
};

}  // namespace

RewriteRecorder::RewriteRecorder(BorrowedScopes& borrowed, RewriteLog& log)
    : borrowed_(borrowed), log_(log), arrays_(std::make_unique<Arrays>()) {}

RewriteRecorder::~RewriteRecorder() = default;

void RewriteRecorder::Release() { arrays_.reset(); }

void RewriteRecorder::Observe(torch::jit::Graph& graph, const std::string& pass,
                              const std::function<void()>& run_pass) {
  using Clock = std::chrono::steady_clock;
  if (!arrays_) arrays_ = std::make_unique<Arrays>();
  // Lets go of the scopes the arrays hold however the pass ends: torch goes on
  // exporting after some of its passes throw (shape inference), and a scope
  // still held here would look shared to BorrowedScopes::ShareWith.
  struct Release {
    Arrays& arrays;
    RewriteTimes& times;
    ~Release() {
      Clock::time_point start = Clock::now();
      arrays.ReleaseScopes();
      times.snapshot += Clock::now() - start;
    }
  } release{*arrays_, times_};
  Clock::time_point start = Clock::now();
  Observer observer(graph, pass, borrowed_, log_, *arrays_);  // notes the graph
  times_.snapshot += Clock::now() - start;
  run_pass();
  observer.After(times_);
}

void RecordRewrites(torch::jit::Graph& graph, const std::string& pass, BorrowedScopes& borrowed, RewriteLog& log,
                    const std::function<void()>& run_pass) {
  RewriteRecorder(borrowed, log).Observe(graph, pass, run_pass);
}

}  // namespace hiertag
