// MarkInlinedCalls: lend call-site scopes to nodes inlined from script functions.
#include "hiertag/passes/mark_inlined_calls.h"

#include <torch/csrc/jit/jit_log.h>
#include <torch/library.h>

#include <cstdio>
#include <vector>

namespace hiertag {
namespace {

using torch::jit::Block;
using torch::jit::Node;

const c10::Symbol kCallBegin = c10::Symbol::fromQualString("hiertag::call_begin");
const c10::Symbol kCallEnd = c10::Symbol::fromQualString("hiertag::call_end");

// Schemas for the markers, so alias analysis (run by the tracer) knows them;
// conservative aliasing keeps dead-code elimination from dropping them.
// Registered once per process even when a second copy of the library loads
// (TORCH_LIBRARY would throw from a static initializer there), and never lets an
// exception escape a static initializer.
struct RegisterCallMarkerSchemas {
  RegisterCallMarkerSchemas() {
    try {
      if (c10::Dispatcher::singleton().findSchema({"hiertag::call_begin", ""}).has_value()) return;
      static auto* library = new torch::Library(torch::Library::FRAGMENT, "hiertag", std::nullopt, __FILE__, __LINE__);
      library->def(torch::schema("hiertag::call_begin() -> ()", c10::AliasAnalysisKind::CONSERVATIVE));
      library->def(torch::schema("hiertag::call_end() -> ()", c10::AliasAnalysisKind::CONSERVATIVE));
    } catch (const std::exception& error) {
      std::fprintf(stderr, "hiertag: cannot register the call markers: %s\n", error.what());
    }
  }
} register_call_marker_schemas;

bool HasBlankScope(Node* node) { return !node->scope() || node->scope()->isRoot() || node->scope()->isBlank(); }

// Lends the call site's scope to `node` and its nested nodes where blank. The
// loan is taken at the first blank node, whose scope is the one Restore gives back.
int LendToBlankNodes(Node* node, Node* call_begin, BorrowedScopes& borrowed, torch::jit::ScopePtr* lent) {
  int count = 0;
  if (HasBlankScope(node)) {
    if (!*lent) *lent = borrowed.Lend(borrowed.NewLoan(call_begin->scope(), node->scope()));
    node->setScope(*lent);
    ++count;
  }
  for (Block* nested : node->blocks()) {
    for (Node* inner : nested->nodes()) count += LendToBlankNodes(inner, call_begin, borrowed, lent);
  }
  return count;
}

int MarkBlock(Block* block, BorrowedScopes& borrowed) {
  int count = 0;
  std::vector<Node*> markers;
  Node* open = nullptr;
  torch::jit::ScopePtr lent;
  for (Node* node : block->nodes()) {
    if (node->kind() == kCallBegin) {
      markers.push_back(node);
      open = node;
      lent = nullptr;
      continue;
    }
    if (node->kind() == kCallEnd) {
      markers.push_back(node);
      open = nullptr;
      continue;
    }
    if (open != nullptr && !HasBlankScope(open)) {
      count += LendToBlankNodes(node, open, borrowed, &lent);
    } else {
      for (Block* nested : node->blocks()) count += MarkBlock(nested, borrowed);
    }
  }
  for (Node* marker : markers) marker->destroy();
  GRAPH_DEBUG("hiertag: lent call-site scopes to ", count, " inlined nodes");
  return count;
}

}  // namespace

void InsertCallMarker(torch::jit::Graph& graph, CallMarker marker) {
  graph.insertNode(graph.create(marker == CallMarker::kBegin ? kCallBegin : kCallEnd, 0));
}

int MarkInlinedCalls(torch::jit::Graph& graph, BorrowedScopes& borrowed) { return MarkBlock(graph.block(), borrowed); }

}  // namespace hiertag
