// PlaceByRules: enclosing / consumers / neighbours / root, swept to a fixed point.
#include "hiertag/core/format/placement_rules.h"

#include <cstddef>
#include <stdexcept>
#include <string>

namespace hiertag {

const char* TagRuleName(TagRule rule) {
  switch (rule) {
    case TagRule::kRecorded:
      return "recorded";
    case TagRule::kParameterOwner:
      return "parameter-owner";
    case TagRule::kEnclosing:
      return "enclosing";
    case TagRule::kConsumers:
      return "consumers";
    case TagRule::kNeighbours:
      return "neighbours";
    case TagRule::kRoot:
      return "root";
  }
  return "?";
}

namespace {

constexpr int kWaiting = -1;

class Placer {
 public:
  Placer(const std::vector<UnplacedNode>& nodes, int root, const std::function<int(int, int)>& common)
      : nodes_(nodes), root_(root), common_(common), placements_(nodes.size()), tags_(nodes.size(), kWaiting) {
    for (const UnplacedNode& node : nodes_) {
      if (node.holder) Check(*node.holder);
      for (int neighbour : node.neighbours) Check(neighbour);
    }
  }

  std::vector<Placement> Run() {
    std::vector<size_t> waiting(nodes_.size());
    for (size_t i = 0; i < waiting.size(); ++i) waiting[i] = i;
    std::vector<size_t> still_waiting;
    while (!waiting.empty()) {
      still_waiting.clear();
      for (size_t i : waiting) {
        if (!TryRules(i, false)) still_waiting.push_back(i);
      }
      bool progress = still_waiting.size() < waiting.size();
      waiting.swap(still_waiting);
      if (progress || waiting.empty()) continue;
      size_t k = 0;
      while (k < waiting.size() && !TryRules(waiting[k], true)) ++k;
      if (k == waiting.size()) break;
      waiting.erase(waiting.begin() + static_cast<std::ptrdiff_t>(k));
    }
    for (size_t i : waiting) Place(i, root_, TagRule::kRoot);
    return std::move(placements_);
  }

 private:
  void Check(int ref) const {
    if (ref < 0 && static_cast<size_t>(-1 - ref) >= nodes_.size()) {
      throw std::out_of_range("PlaceByRules: a reference to unplaced node " + std::to_string(-1 - ref) + " of " +
                              std::to_string(nodes_.size()));
    }
  }

  // A holder's or neighbour's tag as it stands: kWaiting while unplaced.
  int TagOf(int ref) const { return ref >= 0 ? ref : tags_[static_cast<size_t>(-1 - ref)]; }

  void Place(size_t i, int tag, TagRule rule) {
    tags_[i] = tag;
    placements_[i] = {tag, rule};
  }

  // Applies enclosing / consumers / neighbours to node i. With `settle_partial`
  // a node whose neighbours are partly unplaced takes the placed ones.
  bool TryRules(size_t i, bool settle_partial) {
    const UnplacedNode& node = nodes_[i];
    if (node.holder) {
      int enclosing = TagOf(*node.holder);
      if (enclosing == kWaiting) return false;
      Place(i, enclosing, TagRule::kEnclosing);
      return true;
    }
    int common = kWaiting;
    bool complete = true;
    for (int neighbour : node.neighbours) {
      int tag = TagOf(neighbour);
      if (tag == kWaiting) {
        complete = false;
      } else {
        common = common == kWaiting ? tag : common_(common, tag);
      }
    }
    if (common == kWaiting || (!complete && !settle_partial)) return false;
    Place(i, common, node.has_inputs ? TagRule::kNeighbours : TagRule::kConsumers);
    return true;
  }

  const std::vector<UnplacedNode>& nodes_;
  int root_;
  const std::function<int(int, int)>& common_;
  std::vector<Placement> placements_;
  std::vector<int> tags_;
};

}  // namespace

std::vector<Placement> PlaceByRules(const std::vector<UnplacedNode>& nodes, const CallTags& call_tags) {
  return PlaceByRules(nodes, CallTags::kRoot, [&call_tags](int a, int b) { return call_tags.CommonAncestor(a, b); });
}

std::vector<Placement> PlaceByRules(const std::vector<UnplacedNode>& nodes, int root,
                                    const std::function<int(int, int)>& common) {
  return Placer(nodes, root, common).Run();
}

std::vector<int> CallsOfReaders(const std::vector<RulePlacedNode>& nodes) {
  std::vector<int> calls;
  calls.reserve(nodes.size());
  for (const RulePlacedNode& node : nodes) calls.push_back(node.call);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const ReadCall& reader : nodes[i].readers) {
      int tag = reader.tag, call = reader.call;
      if (tag < 0) {
        size_t k = static_cast<size_t>(-1 - tag);
        if (k >= nodes.size()) {
          throw std::out_of_range("CallsOfReaders: a reference to node " + std::to_string(k) + " of " +
                                  std::to_string(nodes.size()));
        }
        tag = nodes[k].tag;
        call = calls[k];
      }
      if (tag == nodes[i].tag) calls[i] = call;
    }
  }
  return calls;
}

}  // namespace hiertag
