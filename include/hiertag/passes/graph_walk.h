// Graph walk helpers shared by the passes that observe a torch pass.
#pragma once

#include <c10/util/ArrayRef.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/csrc/jit/jit_log.h>

#include <cstddef>
#include <vector>

namespace hiertag {
namespace detail {

// One link of a node's chain of loads each (see VisitNodesAndReturns).
inline void PrefetchLines(const void* address, int lines) {
  for (int line = 0; line < lines; ++line) __builtin_prefetch(static_cast<const char*>(address) + 64 * line);
}
inline void PrefetchNode(const torch::jit::Node* node) { PrefetchLines(node, 3); }
inline void PrefetchLists(const torch::jit::Node* node) {
  __builtin_prefetch(node->outputs().data());
  __builtin_prefetch(node->inputs().data());
}
inline void PrefetchOutputs(const torch::jit::Node* node) {
  for (const torch::jit::Value* output : node->outputs()) PrefetchLines(output, 2);
}
inline void PrefetchOutputTypesAndUses(const torch::jit::Node* node) {
  for (const torch::jit::Value* output : node->outputs()) {
    __builtin_prefetch(output->type().get());
    __builtin_prefetch(output->uses().data());
  }
}

}  // namespace detail

// The nodes a walk expects to meet, in its order: an earlier walk's of the
// same graph (the pass observers note one before every pass). They are only
// prefetched, never read: a node listed may have been freed since, and a
// prefetch of any address is harmless.
using ExpectedNodes = c10::ArrayRef<torch::jit::Node*>;

// How far ahead of its visit a walk asks for an expected node: its link to
// the next node is what the walk waits on, so the line holding it must be in
// the cache a few nodes before the walk gets there.
constexpr size_t kExpectedAhead = 8;

// Asks for the node `expected` lists kExpectedAhead after index `met` (the
// node the walk is at), the lines a walk reads first and its link to the next
// node included; nothing past the list's end. The node is only prefetched (it
// may have been freed); `live` is a node in the graph, which says where a
// node keeps its link.
inline void PrefetchExpectedAfter(torch::jit::Node* live, ExpectedNodes expected, size_t met) {
  if (met + kExpectedAhead >= expected.size()) return;
  const char* address = reinterpret_cast<const char*>(expected[met + kExpectedAhead]);
  detail::PrefetchLines(address, 3);
  __builtin_prefetch(address + (reinterpret_cast<const char*>(&live->next()) - reinterpret_cast<const char*>(live)));
}

namespace detail {

struct Expected {
  ExpectedNodes nodes;
  size_t position = 0;  // in the walk's order, the index of the node visited next
};

inline void PrefetchExpected(Expected& expected, torch::jit::Node* live) {
  PrefetchExpectedAfter(live, expected.nodes, expected.position++);
}

template <typename Visit>
bool VisitNodesAndReturns(torch::jit::Block* block, Visit& visit, Expected& expected) {
  torch::jit::Node* end = block->return_node();
  // ahead[k]: the node k + 1 steps ahead of the one visited, or `end`.
  constexpr int kAhead = 4;  // one step per link of the chain below
  torch::jit::Node* ahead[kAhead];
  torch::jit::Node* node = *block->nodes().begin();
  torch::jit::Node* next = node;
  for (torch::jit::Node*& slot : ahead) {
    next = next == end ? end : next->next();
    slot = next;
  }
  while (node != end) {
    PrefetchExpected(expected, node);
    PrefetchNode(ahead[3]);
    PrefetchLists(ahead[2]);
    PrefetchOutputs(ahead[1]);
    PrefetchOutputTypesAndUses(ahead[0]);
    if (!visit(node)) return false;
    for (torch::jit::Block* nested : node->blocks()) {
      if (!detail::VisitNodesAndReturns(nested, visit, expected)) return false;
    }
    node = ahead[0];
    for (int k = 0; k + 1 < kAhead; ++k) ahead[k] = ahead[k + 1];
    ahead[kAhead - 1] = ahead[kAhead - 2] == end ? end : ahead[kAhead - 2]->next();
  }
  PrefetchExpected(expected, end);
  return visit(end);
}

}  // namespace detail

// Calls visit(node) for every node, nested blocks included, and every block's
// return node (a use by a graph or body output is a use too), in pre-order.
// Stops, returning false, at the first node visit returns false for.
//
// The walk's cost is cache misses on torch's objects: each node is a chain of
// dependent loads (the node, its output list, each output, its type and use
// list) the CPU cannot run ahead on by itself. The walk therefore reads the
// next four nodes of the block before it visits them (their links, their
// input and output lists, their outputs) and asks for what those point to,
// one link of the chain per step, so their misses overlap with the work on
// this node. What it visits and in which order is the plain walk's; since it
// holds nodes ahead, `visit` must not add, remove or move nodes (none does).
//
// The links themselves stay a chain: a node's next is known only once the
// node is loaded, so the walk waits for one miss per node. Given `expected`
// (the order an earlier walk met the nodes in), it also asks for the node
// expected kExpectedAhead steps ahead, link included: where the graph has
// not changed since, the chain's loads are in the cache when the walk gets
// to them. What it visits does not depend on `expected`.
template <typename Visit>
bool VisitNodesAndReturns(torch::jit::Block* block, Visit&& visit, ExpectedNodes expected = {}) {
  detail::Expected walk{expected};
  return detail::VisitNodesAndReturns(block, visit, walk);
}

// Every node and block return, in VisitNodesAndReturns' order, appended to a
// vector of Node* (of any allocator).
template <typename Nodes>
void CollectNodesAndReturns(torch::jit::Block* block, Nodes* nodes) {
  VisitNodesAndReturns(block, [nodes](torch::jit::Node* node) {
    nodes->push_back(node);
    return true;
  });
}

// Whether torch's JIT logging (PYTORCH_JIT_LOG_LEVEL) is on for any file.
// GRAPH_DEBUG asks per call with a std::string of its file's path, a heap
// allocation even when logging is off; this reads the levels, empty (and so
// not allocated) when it is off. For the log lines of every observed pass
// and of each group or node it classifies: they then touch the heap only when
// logging.
inline bool JitLogging() { return !torch::jit::get_jit_logging_levels().empty(); }

// True for a scope that records no module call.
inline bool IsBlankScope(const torch::jit::ScopePtr& scope) { return !scope || scope->isRoot() || scope->isBlank(); }

}  // namespace hiertag
