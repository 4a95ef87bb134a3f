// The rules that place a node no record tags: enclosing, consumers,
// neighbours, root (README "Tagging rules"). One implementation for every
// writer of tags: AssignHierarchyTags (passes/) runs it on torch's graph,
// `hiertag import-dynamo` (through the _core extension) on a dynamo file, and
// `hiertag carry` (consumers, neighbours, root) on the nodes of a transformed
// file that stand for no original node, over its own ids (a call each).
//
// The caller describes each unplaced node by what the rules read, in the
// order the nodes are swept (the serialization pre-order):
//   holder      the node holding it (an If/Loop body, a graph attribute), if any
//   neighbours  the nodes reading its outputs, and, when it has inputs, the
//               nodes producing them. What counts as the root (a user input, a
//               graph output, a body output of a root-level holder) is the
//               root's tag; what does not count (an initializer, a parameter,
//               a node the serializer skips) is left out.
// Each holder and neighbour is a placed tag (>= 0) or another unplaced node
// (Unplaced(k)), whose tag the sweep fills in.
//
// Sweeps in order until nothing changes: a node with a holder takes its
// holder's tag (enclosing); any other takes the common ancestor of its
// neighbours' tags (consumers when it has no inputs, else neighbours) once
// all of them are placed. When a sweep places nothing, the first waiting node
// that has some placed neighbour takes their common ancestor, and the sweeps
// go on. A node nothing places is the root's (root). In a tag with several
// calls, a node so placed joins the call of a reader with its tag
// (CallsOfReaders).
//
//   node 0: Constant read by node 1 and by a node tagged 5
//   node 1: Cast reading node 0, read by a node tagged 7
//   PlaceByRules({{{}, false, {Unplaced(1), 5}}, {{}, true, {7, Unplaced(0)}}}, tags)
//     -> node 0 waits for node 1, node 1 waits for node 0; neither sweep places
//        anything, so node 0 takes 5 (its known neighbour), then node 1 takes
//        CommonAncestor(7, 5), node 0's tag.
// No torch dependency.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "hiertag/core/format/call_tags.h"

namespace hiertag {

// Every rule that tags a node, in the order they apply: recorded and
// parameter-owner are the plugin's (a scope torch recorded), the others this
// file's.
enum class TagRule { kRecorded, kParameterOwner, kEnclosing, kConsumers, kNeighbours, kRoot };
inline constexpr int kTagRuleCount = 6;
const char* TagRuleName(TagRule rule);

// A holder or neighbour that is unplaced node `index` of the list.
constexpr int Unplaced(int index) { return -1 - index; }

struct UnplacedNode {
  std::optional<int> holder;  // a placed tag or Unplaced(k); none outside nested graphs
  bool has_inputs = false;    // neighbours rule (else consumers)
  std::vector<int> neighbours;
};

struct Placement {
  int tag = CallTags::kRoot;
  TagRule rule = TagRule::kRoot;
};

// One placement per node, in order. Throws std::out_of_range for a reference
// to a node not in the list.
std::vector<Placement> PlaceByRules(const std::vector<UnplacedNode>& nodes, const CallTags& call_tags);

// The same rules over any placement ids (>= 0): `common(a, b)` is the id of
// the innermost place holding both (CallTags::CommonAncestor above; `hiertag
// carry` holds a call within a tag, so that two calls of one tag meet in its
// parent), and `root` the id a node nothing places takes. Exceptions `common`
// throws pass through.
std::vector<Placement> PlaceByRules(const std::vector<UnplacedNode>& nodes, int root,
                                    const std::function<int(int, int)>& common);

// Which call of its tag a node a rule placed belongs to, when the tag has
// several: the call of a node reading it with the same tag (the last such
// reader, in the order given), else the one it has (the call its record, or
// the sweep, left it in).
struct ReadCall {
  int tag = -1;  // a placed node's tag, or Unplaced(k): the k-th node of the list
  int call = 0;  // the placed node's call (ignored for Unplaced(k))
};
struct RulePlacedNode {
  int tag = CallTags::kRoot;
  int call = 0;
  std::vector<ReadCall> readers;
};

// Each node's call, in order; a listed reader counts with the call this gave
// it if it comes earlier in the list, else with its own. Throws
// std::out_of_range for a reference to a node not in the list.
std::vector<int> CallsOfReaders(const std::vector<RulePlacedNode>& nodes);

}  // namespace hiertag
