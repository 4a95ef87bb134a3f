// Pass scaling: time per node of hiertag's passes on synthetic graphs.
//
// A synthetic model: a root with L layers, each holding an attention and an MLP
// block with two Linear-like children each (torch.nn, filtered) and a LayerNorm,
// giving scope chains 3 to 4 levels deep, as in HF transformer exports. Each
// layer contributes a fixed chain of ONNX-level nodes recorded in those scopes,
// plus a share of pass-made nodes (a Constant and an initializer Identity per
// layer) that the rules settle. Sizes are node counts: 1k, 10k, 100k, 1M.
//
// usage: build/hiertag_pass_scaling [--benchmark_filter=...] [--benchmark_format=json]
// Reports time per iteration and per node (per_node, in seconds with an SI
// prefix: 150n = 150 ns; items_per_second = nodes/s); linear
// scaling shows as a constant per-node time across sizes. Memory comes from
// Google Benchmark's memory manager run: max_bytes_used is the peak of the heap
// the pass allocated (the synthetic graph and other set-up not counted) plus,
// for the plan, the bytes its arena mapped (whole blocks, reserved as well as
// used: mapped_memory.h), allocs_per_iter the number of heap allocations (the
// arena's own are not among them).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <atomic>
#include <cstdlib>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/export/proto_tagging.h"
#include "hiertag/core/export/scope_names.h"
#include "hiertag/core/format/json.h"
#include "hiertag/core/format/module_table.h"
#include "hiertag/core/format/tagged_entries.h"
#include "hiertag/core/onnx/proto_wire.h"
#include "hiertag/passes/assign_hierarchy_tags.h"
#include "hiertag/passes/borrowed_scopes.h"
#include "hiertag/passes/record_cse_sharing.h"
#include "hiertag/passes/record_rewrites.h"
#include "hiertag/passes/tagged_model_entries.h"

// Heap accounting for the memory manager: every operator new block carries a
// header saying whether it was made while counting, so a block made before
// counting started and freed during it does not lower the count.
namespace heap {
std::atomic<bool> counting{false};
std::atomic<int64_t> live{0}, peak{0}, allocations{0};
struct alignas(std::max_align_t) Header {
  size_t size;
  bool counted;
};

// Raises `peak` to `now` if it is below (from any thread).
void RaisePeak(std::atomic<int64_t>& peak, int64_t now) {
  int64_t seen = peak.load(std::memory_order_relaxed);
  while (now > seen && !peak.compare_exchange_weak(seen, now, std::memory_order_relaxed)) {
  }
}

void* Allocate(size_t size) {
  auto* header = static_cast<Header*>(std::malloc(sizeof(Header) + size));
  if (header == nullptr) throw std::bad_alloc();
  header->size = size;
  header->counted = counting.load(std::memory_order_relaxed);
  if (header->counted) {
    allocations.fetch_add(1, std::memory_order_relaxed);
    RaisePeak(peak, live.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed) + static_cast<int64_t>(size));
  }
  return header + 1;
}

void Free(void* pointer) {
  if (pointer == nullptr) return;
  Header* header = static_cast<Header*>(pointer) - 1;
  if (header->counted) live.fetch_sub(static_cast<int64_t>(header->size), std::memory_order_relaxed);
  std::free(header);
}

// Runs a benchmark's set-up outside the heap count: the memory manager counts
// from before the benchmark function runs, set-up included.
template <typename SetUp>
auto Uncounted(SetUp set_up) {
  bool was_counting = counting.exchange(false);
  auto made = set_up();
  counting.store(was_counting);
  return made;
}

// Pauses timing and heap counting together (for set-up inside the loop).
void Pause(benchmark::State& state) {
  state.PauseTiming();
  counting.store(false);
}

void Resume(benchmark::State& state, bool was_counting) {
  counting.store(was_counting);
  state.ResumeTiming();
}

// The peak of the bytes mapped for plans (mapped_memory.h), which the heap
// count does not see: a benchmark whose code maps memory samples it.
std::atomic<int64_t> mapped_peak{0};
void SampleMapped() { RaisePeak(mapped_peak, static_cast<int64_t>(hiertag::MappedBytes())); }

class Manager : public benchmark::MemoryManager {
 public:
  void Start() override {
    live = 0;
    peak = 0;
    mapped_peak = 0;
    allocations = 0;
    counting = true;
  }
  void Stop(Result& result) override {
    counting = false;
    result.num_allocs = allocations;
    result.max_bytes_used = peak + mapped_peak;
  }
  void Stop(Result* result) override { Stop(*result); }
};
}  // namespace heap

void* operator new(size_t size) { return heap::Allocate(size); }
void* operator new[](size_t size) { return heap::Allocate(size); }
void operator delete(void* pointer) noexcept { heap::Free(pointer); }
void operator delete[](void* pointer) noexcept { heap::Free(pointer); }
void operator delete(void* pointer, size_t) noexcept { heap::Free(pointer); }
void operator delete[](void* pointer, size_t) noexcept { heap::Free(pointer); }

namespace hiertag {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::ScopePtr;
using torch::jit::Value;

constexpr int kNodesPerLayer = 20;

struct SyntheticModel {
  ModuleTable modules;
  std::unordered_set<std::string> members;
  InstanceScopeSymbols symbols;  // as the session's set-up lists them
  std::shared_ptr<Graph> graph = std::make_shared<Graph>();
};

// A module's instance scope under `parent`, named and listed as the session's set-up does.
ScopePtr Push(SyntheticModel& model, const ScopePtr& parent, int module, const std::string& name) {
  std::string instance_name = MarkInstanceScopeName(module, name);
  model.symbols.Add(module, instance_name);
  return parent->push(c10::Symbol::scope(instance_name));
}

// Builds a model of about `nodes` nodes.
std::unique_ptr<SyntheticModel> BuildModel(int64_t nodes) {
  auto model = std::make_unique<SyntheticModel>();
  int layers = static_cast<int>(std::max<int64_t>(1, nodes / kNodesPerLayer));
  model->modules.Add("", "pkg.Model", "Model", true);
  model->modules.Add("layers", "torch.nn.modules.container.ModuleList", "ModuleList", false);
  struct LayerModules {
    int layer, attention, query, output, norm, mlp, up, down;
  };
  std::vector<LayerModules> ids;
  for (int i = 0; i < layers; ++i) {
    std::string layer = "layers." + std::to_string(i);
    LayerModules m;
    m.layer = model->modules.Add(layer, "pkg.Layer", "Layer", true);
    m.attention = model->modules.Add(layer + ".attention", "pkg.Attention", "Attention", true);
    m.query = model->modules.Add(layer + ".attention.query", "torch.nn.modules.linear.Linear", "Linear", false);
    m.output = model->modules.Add(layer + ".attention.output", "torch.nn.modules.linear.Linear", "Linear", false);
    m.norm = model->modules.Add(layer + ".norm", "torch.nn.modules.normalization.LayerNorm", "LayerNorm", false);
    m.mlp = model->modules.Add(layer + ".mlp", "pkg.MLP", "MLP", true);
    m.up = model->modules.Add(layer + ".mlp.up", "torch.nn.modules.linear.Linear", "Linear", false);
    m.down = model->modules.Add(layer + ".mlp.down", "torch.nn.modules.linear.Linear", "Linear", false);
    ids.push_back(m);
    model->members.insert(layer + ".norm.weight");
  }
  model->modules.Finalize();

  Graph& graph = *model->graph;
  ScopePtr root = Push(*model, c10::make_intrusive<torch::jit::Scope>(), 0, "pkg.Model::");
  Value* x = graph.addInput("x");
  std::vector<Value*> weights;
  for (int i = 0; i < layers; ++i) {
    Value* weight = graph.addInput();
    weight->setDebugName("w" + std::to_string(i));
    weights.push_back(weight);
  }
  auto add = [&](const char* kind, std::vector<Value*> inputs, const ScopePtr& scope) {
    Node* node = graph.create(c10::Symbol::onnx(kind), inputs, 1);
    if (scope) node->setScope(scope);
    graph.appendNode(node);
    return node->output();
  };
  for (int i = 0; i < layers; ++i) {
    const LayerModules& m = ids[i];
    ScopePtr layer = Push(*model, root, m.layer, "pkg.Layer::layers." + std::to_string(i));
    ScopePtr attention = Push(*model, layer, m.attention, "pkg.Attention::attention");
    ScopePtr query = Push(*model, attention, m.query, "torch.nn.modules.linear.Linear::query");
    ScopePtr output = Push(*model, attention, m.output, "torch.nn.modules.linear.Linear::output");
    ScopePtr norm = Push(*model, layer, m.norm, "torch.nn.modules.normalization.LayerNorm::norm");
    ScopePtr mlp = Push(*model, layer, m.mlp, "pkg.MLP::mlp");
    ScopePtr up = Push(*model, mlp, m.up, "torch.nn.modules.linear.Linear::up");
    ScopePtr down = Push(*model, mlp, m.down, "torch.nn.modules.linear.Linear::down");
    // Pass-made nodes: an unscoped Constant and the Identity of a deduplicated initializer.
    Value* constant = add("Constant", {}, nullptr);
    Value* bias = add("Identity", {weights[i]}, nullptr);
    bias->setDebugName("layers." + std::to_string(i) + ".norm.weight");
    Value* h = add("MatMul", {x, weights[i]}, query);
    h = add("Add", {h, constant}, query);
    h = add("Reshape", {h, constant}, attention);
    h = add("Transpose", {h}, attention);
    h = add("MatMul", {h, h}, attention);
    h = add("Div", {h, constant}, attention);
    h = add("Softmax", {h}, attention);
    h = add("MatMul", {h, h}, attention);
    h = add("MatMul", {h, weights[i]}, output);
    h = add("Add", {h, x}, layer);
    h = add("LayerNormalization", {h, bias}, norm);
    Value* r = h;
    h = add("MatMul", {h, weights[i]}, up);
    h = add("Add", {h, constant}, up);
    h = add("Gelu", {h}, mlp);
    h = add("MatMul", {h, weights[i]}, down);
    h = add("Add", {h, constant}, down);
    x = add("Add", {h, r}, layer);
  }
  graph.registerOutput(x);
  return model;
}

// The counters every benchmark over a graph of `nodes` nodes reports: items
// processed, the node count, and the time per node (per_node).
void ReportPerNode(benchmark::State& state, size_t nodes) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(nodes));
  state.counters["nodes"] = static_cast<double>(nodes);
  state.counters["per_node"] = benchmark::Counter(
      static_cast<double>(nodes), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

void BM_AssignHierarchyTags(benchmark::State& state) {
  std::unique_ptr<SyntheticModel> model = heap::Uncounted([&] { return BuildModel(state.range(0)); });
  BorrowedScopes borrowed;
  size_t nodes = 0;
  for (auto _ : state) {
    CallTags call_tags(model->modules);
    HierarchyTagging tagging = AssignHierarchyTags(*model->graph, model->modules, call_tags, borrowed, model->members,
                                                   1, nullptr, nullptr, &model->symbols);
    nodes = tagging.nodes.size();
    benchmark::DoNotOptimize(tagging);
  }
  ReportPerNode(state, nodes);
}

// The floor any pass over torch's graph pays: visit every node, its scope and
// the uses of its outputs, nothing else. Its per-node time grows with the
// graph as AssignHierarchyTags' does (torch's nodes outgrow the caches), so
// the ratio of the two, not either alone, shows whether the pass is linear.
void BM_VisitGraph(benchmark::State& state) {
  std::unique_ptr<SyntheticModel> model = heap::Uncounted([&] { return BuildModel(state.range(0)); });
  size_t nodes = 0;
  for (auto _ : state) {
    size_t visited = 0, uses = 0;
    for (Node* node : model->graph->nodes()) {
      benchmark::DoNotOptimize(node->scope().get());
      for (const Value* output : node->outputs()) uses += output->uses().size();
      ++visited;
    }
    benchmark::DoNotOptimize(uses);
    nodes = visited;
  }
  ReportPerNode(state, nodes);
}

void BM_PlanTaggedModel(benchmark::State& state) {
  bool was_counting = heap::counting.exchange(false);  // set-up outside the heap count
  std::unique_ptr<SyntheticModel> model = BuildModel(state.range(0));
  BorrowedScopes borrowed;
  CallTags call_tags(model->modules);
  HierarchyTagging tagging = AssignHierarchyTags(*model->graph, model->modules, call_tags, borrowed, model->members, 1,
                                                 nullptr, nullptr, &model->symbols);
  TaggedModelEntries entries = DescribeTaggedModel(tagging, call_tags, model->modules, *model->graph);
  std::vector<SerializedNodeTag>& tags = entries.nodes;
  // A ModelProto holding one NodeProto per node (outputs and op_type), 1 MB of weights.
  std::string graph;
  for (const SerializedNodeTag& tag : tags) {
    std::string node;
    for (std::string_view output : tag.outputs) wire::AppendLengthDelimited(&node, 2, output);
    wire::AppendLengthDelimited(&node, 4, tag.op_type);
    wire::AppendLengthDelimited(&graph, 1, node);
  }
  wire::AppendLengthDelimited(&graph, 5, std::string(1 << 20, '\0'));
  std::string bytes;
  wire::AppendVarint(&bytes, (1 << 3) | wire::kVarint);
  wire::AppendVarint(&bytes, 8);
  wire::AppendLengthDelimited(&bytes, 7, graph);
  std::string table = entries.model.front().value;
  heap::counting.store(was_counting);
  for (auto _ : state) {
    TaggedModelPlan plan;
    std::string error;
    if (!PlanTaggedModel(bytes, tags, {{"hiertag.modules", table}}, &plan, &error)) {
      state.SkipWithError(error.c_str());
      break;
    }
    heap::SampleMapped();  // the plan is alive: all its memory is mapped
    benchmark::DoNotOptimize(plan);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(tags.size()));
  state.counters["per_node"] = benchmark::Counter(
      static_cast<double>(tags.size()), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}

// The module table's JSON, written and read back: one entry per tag, as a
// deep model's hiertag.modules (the 825-layer decoder has about 5,000). Per
// node here means per tag; linear scaling shows as a constant time per tag.
void BM_ModuleTableJson(benchmark::State& state) {
  std::vector<TableEntry> entries;
  for (int64_t i = 0; i < state.range(0); ++i) {
    std::string layer = std::to_string(i / 8);
    entries.push_back({"/Net/Layer." + layer + "/Block." + std::to_string(i % 8),
                       "layers." + layer + ".block",
                       "pkg.Block",
                       {},
                       {},
                       true,
                       {}});
  }
  for (auto _ : state) {
    std::string text = WriteModuleTable(entries);
    std::string error;
    std::optional<ParsedJson> parsed = ParseJsonDocument(text, &error);
    if (!parsed || parsed->value.size() != entries.size()) {
      state.SkipWithError("the table did not read back");
      break;
    }
    benchmark::DoNotOptimize(parsed);
  }
  ReportPerNode(state, entries.size());
}

void BM_RecordCseSharing(benchmark::State& state) {
  size_t nodes = 0;
  for (auto _ : state) {
    bool counting = heap::counting;
    heap::Pause(state);
    std::unique_ptr<SyntheticModel> model = BuildModel(state.range(0));
    BorrowedScopes borrowed;
    nodes = std::distance(model->graph->nodes().begin(), model->graph->nodes().end());
    heap::Resume(state, counting);
    // The bookkeeping around CSE alone: the pass itself is torch's.
    RecordCseSharing(*model->graph, borrowed, [] {});
    heap::Pause(state);
    model.reset();
    heap::Resume(state, counting);
  }
  ReportPerNode(state, nodes);
}

// RecordRewrites around a pass that changes nothing (most of the export's
// observed passes, most of the time) and around one that cancels a Transpose
// per layer (the ONNX peephole's daily work): the observer's own cost, the
// pass itself being a lambda.
void BM_RecordRewritesUnchanged(benchmark::State& state) {
  std::unique_ptr<SyntheticModel> model = heap::Uncounted([&] { return BuildModel(state.range(0)); });
  BorrowedScopes borrowed;
  RewriteLog log;
  size_t nodes = std::distance(model->graph->nodes().begin(), model->graph->nodes().end());
  RewriteRecorder recorder(borrowed, log);  // as the export keeps one for all its passes
  for (auto _ : state) recorder.Observe(*model->graph, "_jit_pass_bench", [] {});
  ReportPerNode(state, nodes);
}

void BM_RecordRewritesChanged(benchmark::State& state) {
  size_t nodes = 0;
  for (auto _ : state) {
    bool counting = heap::counting;
    heap::Pause(state);
    std::unique_ptr<SyntheticModel> model = BuildModel(state.range(0));
    BorrowedScopes borrowed;
    RewriteLog log;
    nodes = std::distance(model->graph->nodes().begin(), model->graph->nodes().end());
    std::vector<Node*> transposes;
    for (Node* node : model->graph->nodes()) {
      if (node->kind() == c10::Symbol::onnx("Transpose")) transposes.push_back(node);
    }
    heap::Resume(state, counting);
    RecordRewrites(*model->graph, "_jit_pass_bench", borrowed, log, [&] {
      for (Node* transpose : transposes) {
        transpose->output()->replaceAllUsesWith(transpose->input(0));
        transpose->destroy();
      }
    });
    heap::Pause(state);
    model.reset();
    heap::Resume(state, counting);
  }
  ReportPerNode(state, nodes);
}

BENCHMARK(BM_AssignHierarchyTags)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_VisitGraph)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PlanTaggedModel)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ModuleTableJson)->RangeMultiplier(10)->Range(1000, 100000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecordCseSharing)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecordRewritesUnchanged)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_RecordRewritesChanged)->RangeMultiplier(10)->Range(1000, 1000000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace hiertag

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  heap::Manager manager;
  benchmark::RegisterMemoryManager(&manager);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::RegisterMemoryManager(nullptr);
  benchmark::Shutdown();
  return 0;
}
