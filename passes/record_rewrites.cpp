// RecordRewrites: torch's JIT graph as PassGraphs before and after a pass, the
// core's classification of what the pass did, and its result applied as
// borrowed scopes and rewrite records.
#include "hiertag/passes/record_rewrites.h"

#include <c10/util/flat_hash_map.h>
#include <torch/csrc/jit/jit_log.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <unordered_map>

#include "hiertag/core/rewrites/classify_rewrites.h"
#include "hiertag/core/rewrites/pass_graph.h"
#include "hiertag/passes/graph_walk.h"
#include "hiertag/passes/mapped_arrays.h"

namespace hiertag {
namespace {

using torch::jit::Node;
using torch::jit::ScopePtr;
using torch::jit::Value;

constexpr uint32_t kNotBefore = UINT32_MAX;
constexpr size_t kNoOutput = SIZE_MAX;

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

}  // namespace

// What observing a pass keeps per node of torch's graph, kept from one pass
// to the next so that only the first passes allocate it. The owners are the
// nodes' scopes, numbered in the order met (a loan's too): `scopes` holds
// them while a pass is observed, and lets go of them after (a scope still
// held would look shared to BorrowedScopes::ShareWith).
struct RewriteRecorder::Arrays {
  PassGraph before;
  PassGraph after;
  // Per node before: the node, its scope and its first output's unique() (a
  // node at a freed node's address is told apart by them). `expected` is the
  // order the next walk is expected in: what the walk after a pass that
  // changed the graph met; else `nodes` themselves (swapped in by Take).
  MappedArray<Node*> nodes = MakeMappedArray<Node*>();
  MappedArray<Node*> expected = MakeMappedArray<Node*>();
  bool expect_nodes = true;
  MappedArray<size_t> first_output = MakeMappedArray<size_t>();
  // Per input of a node before: the value, compared as torch's graph holds it
  // by the check after the pass (reading each value's number would load every
  // value again) and numbered only after a pass that changed the graph
  // (InputNumbers, from `numbers`: every value made or received before it).
  MappedArray<const Value*> input_values = MakeMappedArray<const Value*>();
  MappedArray<std::pair<const Value*, ValueId>> numbers = MakeMappedArray<std::pair<const Value*, ValueId>>();
  MappedArray<Node*> after_nodes = MakeMappedArray<Node*>();
  MappedMap<Node*, uint32_t> index = MakeMappedMap<Node*, uint32_t>();  // a node before -> its index
  // The owners: each scope met, by number.
  std::vector<ScopePtr> scopes;
  MappedMap<const torch::jit::Scope*, Owner> owner_of = MakeMappedMap<const torch::jit::Scope*, Owner>();
  const torch::jit::Scope* last_scope = nullptr;
  Owner last_owner = kNoOwner;
  RewriteClassifier classifier;

  Owner OwnerOf(const ScopePtr& scope) {
    if (IsBlankScope(scope)) return kNoOwner;
    if (scope.get() == last_scope) return last_owner;
    auto [found, added] = owner_of.emplace(scope.get(), static_cast<Owner>(scopes.size()));
    if (added) scopes.push_back(scope);
    last_scope = scope.get();
    last_owner = found->second;
    return found->second;
  }

  void ReleaseScopes() {
    scopes.clear();
    owner_of.clear();
    last_scope = nullptr;
  }

  // Appends `node` to `graph`, as PassGraph reads it.
  // `inputs_known`: the inputs' numbers are read now (the graph after a pass);
  // else (the graph before one) they are left to InputNumbers, which a pass
  // that changes nothing never needs.
  void Add(PassGraph& graph, Node* node, uint32_t before_index, bool inputs_known = true) {
    static const c10::Symbol kOnnxConstant = c10::Symbol::onnx("Constant");
    PassGraph::Node entry;
    entry.kind = static_cast<uint32_t>(static_cast<c10::unique_t>(node->kind()));
    entry.owner = OwnerOf(node->scope());
    entry.holds_graphs = !node->blocks().empty();
    entry.is_return = node->kind() == c10::prim::Return;
    entry.constant_op = node->kind() == kOnnxConstant || node->kind() == c10::prim::Constant;
    // A node that reads nothing and holds no block is a constant: the
    // classification folds into it whether or not its attributes changed, so
    // nothing compares them.
    entry.attributes = node->inputs().empty() && !entry.holds_graphs ? 0 : HashAttributes(node);
    entry.before = before_index;
    graph.nodes.push_back(entry);
    if (inputs_known) {
      for (const Value* input : node->inputs()) graph.inputs.push_back(input->unique());
      graph.input_begin.push_back(static_cast<uint32_t>(graph.inputs.size()));
    } else {
      input_values.insert(input_values.end(), node->inputs().begin(), node->inputs().end());
      graph.input_begin.push_back(static_cast<uint32_t>(input_values.size()));
      for (const torch::jit::Block* block : node->blocks()) {
        for (const Value* input : block->inputs()) numbers.emplace_back(input, input->unique());
      }
    }
    for (const Value* output : node->outputs()) {
      graph.outputs.push_back(output->unique());
      graph.output_scalar.push_back(IsScalarLike(output));
      if (!inputs_known) numbers.emplace_back(output, output->unique());
    }
    graph.output_begin.push_back(static_cast<uint32_t>(graph.outputs.size()));
  }

  // The graph before a pass that changed it: each input's number, from the
  // values noted before the pass by address (an address is only compared,
  // never read: the pass may have freed the value).
  void InputNumbers() {
    std::sort(numbers.begin(), numbers.end());
    before.inputs.clear();
    before.inputs.reserve(input_values.size());
    for (const Value* input : input_values) {
      auto found = std::lower_bound(numbers.begin(), numbers.end(), std::make_pair(input, ValueId{0}));
      TORCH_INTERNAL_ASSERT(found != numbers.end() && found->first == input,
                            "hiertag: a node read a value no node or input made before the pass");
      before.inputs.push_back(found->second);
    }
  }

  void AddGraphInputs(PassGraph& graph, torch::jit::Graph& jit_graph, bool note_numbers) {
    for (const Value* input : jit_graph.inputs()) {
      graph.graph_inputs.push_back(input->unique());
      graph.graph_input_scalar.push_back(IsScalarLike(input));
      if (note_numbers) numbers.emplace_back(input, input->unique());
    }
  }

  // Notes the graph before a pass.
  void Take(torch::jit::Graph& graph) {
    if (expect_nodes) std::swap(nodes, expected);
    expect_nodes = true;  // unless the walk after the pass meets another order
    nodes.clear();
    first_output.clear();
    input_values.clear();
    numbers.clear();
    before.Clear();
    // Each node is noted as the walk reaches it: its loads overlap with the
    // load of the next node.
    VisitNodesAndReturns(
        graph.block(),
        [this](Node* node) {
          nodes.push_back(node);
          first_output.push_back(node->outputs().empty() ? kNoOutput : node->output(0)->unique());
          Add(before, node, PassGraph::kMade, /*inputs_known=*/false);
          return true;
        },
        expected);
    AddGraphInputs(before, graph, /*note_numbers=*/true);
  }

  // Whether `node`, at the address node i had, is node i: the same address
  // with another kind, scope or first output (values are numbered once per
  // graph) is a new node in a freed slot.
  bool SameNode(uint32_t i, Node* node) {
    size_t first = node->outputs().empty() ? kNoOutput : node->output(0)->unique();
    return before.nodes[i].kind == static_cast<uint32_t>(static_cast<c10::unique_t>(node->kind())) &&
           before.nodes[i].owner == OwnerOf(node->scope()) && first_output[i] == first;
  }

  // Whether the pass left every node where it was, with the same kind, scope
  // and inputs, and the graph's inputs as they were: then it removed, made and
  // rewired nothing (an attribute changed in place is looked at only for
  // nodes that also read something else).
  bool Unchanged(torch::jit::Graph& graph) {
    if (graph.inputs().size() != before.graph_inputs.size()) return false;
    for (size_t k = 0; k < before.graph_inputs.size(); ++k) {
      if (graph.inputs()[k]->unique() != before.graph_inputs[k]) return false;
    }
    uint32_t next = 0;  // in Take's order, the index the next node must have
    return VisitNodesAndReturns(
               graph.block(),
               [&](Node* node) {
                 uint32_t i = next++;
                 if (i >= nodes.size() || node != nodes[i] || !SameNode(i, node)) return false;
                 const Value* const* inputs = input_values.data() + before.input_begin[i];  // (Take's offsets)
                 return std::equal(node->inputs().begin(), node->inputs().end(), inputs,
                                   inputs + (before.input_begin[i + 1] - before.input_begin[i]));
               },
               nodes) &&
           next == nodes.size();
  }

  // Notes the graph after a pass that changed it, each node paired with the
  // node it was before.
  void TakeAfter(torch::jit::Graph& graph) {
    index.clear();
    index.reserve(nodes.size());
    for (uint32_t i = 0; i < nodes.size(); ++i) index.emplace(nodes[i], i);
    after.Clear();
    after_nodes.clear();
    expected.clear();
    expect_nodes = false;
    VisitNodesAndReturns(graph.block(), [&](Node* node) {
      expected.push_back(node);
      auto found = index.find(node);
      uint32_t i = found == index.end() ? kNotBefore : found->second;
      // Ahead of the node met, not of its position: the pass removed and
      // made nodes, so positions drift.
      if (i != kNotBefore) PrefetchExpectedAfter(node, nodes, i);
      if (i != kNotBefore && !SameNode(i, node)) i = kNotBefore;
      after_nodes.push_back(node);
      Add(after, node, i == kNotBefore ? PassGraph::kMade : i);
      return true;
    });
    AddGraphInputs(after, graph, /*note_numbers=*/false);
  }
};

RewriteRecorder::RewriteRecorder(BorrowedScopes& borrowed, RewriteLog& log)
    : borrowed_(borrowed), log_(log), arrays_(std::make_unique<Arrays>()) {}

RewriteRecorder::~RewriteRecorder() = default;

void RewriteRecorder::Release() { arrays_.reset(); }

void RewriteRecorder::Observe(torch::jit::Graph& graph, const std::string& pass,
                              const std::function<void()>& run_pass) {
  using Clock = std::chrono::steady_clock;
  if (!arrays_) arrays_ = std::make_unique<Arrays>();
  Arrays& arrays = *arrays_;
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
  } release{arrays, times_};
  Clock::time_point start = Clock::now();
  arrays.Take(graph);
  times_.snapshot += Clock::now() - start;
  run_pass();
  start = Clock::now();
  bool unchanged = arrays.Unchanged(graph);
  Clock::time_point checked = Clock::now();
  times_.check += checked - start;
  if (unchanged) {
    if (JitLogging()) GRAPH_DEBUG("hiertag: ", pass, " left the graph as it was");
    return;
  }
  arrays.InputNumbers();
  arrays.TakeAfter(graph);
  Clock::time_point matched = Clock::now();
  times_.matching += matched - checked;
  // An owner that is a loan stands for the loan's owners (made once per owner).
  std::unordered_map<Owner, OwnerLoan> loans;
  LoanLookup loan_of = [&](Owner owner) -> const OwnerLoan* {
    if (owner == kNoOwner) return nullptr;
    auto cached = loans.find(owner);
    if (cached != loans.end()) return &cached->second;
    const BorrowedScopes::Loan* loan = borrowed_.Find(arrays.scopes.at(owner));
    if (loan == nullptr) return nullptr;
    OwnerLoan converted{arrays.OwnerOf(loan->recorded), {}, {}, loan->rewrite, {}};
    for (const ScopePtr& scope : loan->spans) converted.spans.push_back(arrays.OwnerOf(scope));
    for (const ScopePtr& scope : loan->folded_from) converted.folded_from.push_back(arrays.OwnerOf(scope));
    for (const ScopePtr& scope : loan->shared_with) converted.shared_with.push_back(arrays.OwnerOf(scope));
    return &loans.emplace(owner, std::move(converted)).first->second;
  };
  RewriteDebugLog debug_log;
  if (JitLogging()) debug_log = [](const std::string& line) { GRAPH_UPDATE("hiertag: ", line); };
  PassRewrites rewrites = arrays.classifier.Classify(arrays.before, arrays.after, pass, loan_of, debug_log);
  auto scope_of = [&](Owner owner) { return owner == kNoOwner ? ScopePtr() : arrays.scopes.at(owner); };
  auto scopes_of = [&](const std::vector<Owner>& owners) {
    std::vector<ScopePtr> scopes;
    for (Owner owner : owners) scopes.push_back(scope_of(owner));
    return scopes;
  };
  Node* last_merger = nullptr;
  bool last_lent = false;
  for (const PassRewrites::Shared& shared : rewrites.shares) {
    Node* merger = arrays.after_nodes.at(shared.node);
    if (merger != last_merger) {
      log_.merged += last_lent;
      last_merger = merger;
      last_lent = false;
    }
    last_lent |= borrowed_.ShareWith(merger, scope_of(shared.with));
  }
  log_.merged += last_lent;
  for (PassRewrites::Lent& lent : rewrites.loans) {
    Node* node = arrays.after_nodes.at(lent.node);
    BorrowedScopes::Loan loan = borrowed_.NewLoan(node->scope(), node->scope());
    if (const BorrowedScopes::Loan* existing = borrowed_.Find(node->scope())) loan = *existing;
    loan.recorded = scope_of(lent.loan.recorded);
    loan.spans.clear();
    for (Owner owner : lent.loan.spans) loan.spans.push_back(scope_of(owner));
    loan.folded_from.clear();
    for (Owner owner : lent.loan.folded_from) loan.folded_from.push_back(scope_of(owner));
    loan.rewrite = lent.loan.rewrite;
    node->setScope(borrowed_.Lend(std::move(loan)));
  }
  log_.fused += rewrites.fused;
  for (OwnerRewrite& record : rewrites.records) {
    RewriteRecord converted;
    converted.pass = pass;
    switch (record.kind) {
      case OwnerRewrite::Kind::kRemoved:
        converted.kind = RewriteRecord::Kind::kRemoved;
        break;
      case OwnerRewrite::Kind::kFolded:
        converted.kind = RewriteRecord::Kind::kFolded;
        break;
      case OwnerRewrite::Kind::kRewired:
        converted.kind = RewriteRecord::Kind::kRewired;
        break;
    }
    converted.scopes = scopes_of(record.owners);
    converted.initializer = static_cast<size_t>(record.initializer);
    converted.reader = scope_of(record.reader);
    converted.replaced = scope_of(record.replaced);
    converted.value_scopes = scopes_of(record.value_owners);
    converted.graph_input = record.graph_input;
    log_.records.push_back(std::move(converted));
  }
  times_.classify += Clock::now() - matched;
}

void RecordRewrites(torch::jit::Graph& graph, const std::string& pass, BorrowedScopes& borrowed, RewriteLog& log,
                    const std::function<void()>& run_pass) {
  RewriteRecorder(borrowed, log).Observe(graph, pass, run_pass);
}

}  // namespace hiertag
