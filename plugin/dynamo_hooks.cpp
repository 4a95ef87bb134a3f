// Dynamo hooks: module calls recorded on FX nodes, onnx_ir passes observed,
// and the ONNX model tagged.
#include "dynamo_hooks.h"

#include <pybind11/eval.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hiertag/core/format/json.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/tagging/call_tagging.h"
#include "hiertag/plugin/dynamo_session.h"
#include "onnx_ir_reader.h"
#include "python_modules.h"

namespace hiertag {
namespace python {
namespace {

using Clock = std::chrono::steady_clock;

// The key of node.meta["custom"] the recorded call is annotated under.
constexpr const char* kCallAnnotation = "hiertag.call";
// The metadata torch writes on every ONNX node an FX node lowers to: the FX node, printed (unique per node).
constexpr const char* kFxNodeMetadata = "pkg.torch.onnx.fx_node";
constexpr const char* kNonStrictCapture = "TorchExportNonStrictStrategy";
// Where the ONNXProgram keeps its export's records, for a later optimize().
constexpr const char* kProgramAttribute = "_hiertag_export";

// One tagged dynamo export: its session, the reader of its onnx_ir graphs,
// and which call each FX node's printed form names.
struct DynamoExportState {
  std::unique_ptr<DynamoSession> session;
  OnnxIrReader reader;
  std::unordered_map<std::string, Owner> fx_owner;
  py::object graph;                         // the onnx_ir graph observed
  std::vector<std::string> lost;            // FX nodes inside a module call whose record torch dropped
  std::vector<std::string> running_passes;  // the observed passes under way, outermost first
};

bool& DynamoHooksInstalled() {
  static bool installed = false;
  return installed;
}

// Whether torch's _core.export converts and optimizes the model itself (it takes `optimize`).
bool& ExportOptimizes() {
  static bool optimizes = false;
  return optimizes;
}

// The export under way (capture to tagging), and the records whose passes are observed now.
std::shared_ptr<DynamoExportState>& Capturing() {
  static auto* state = new std::shared_ptr<DynamoExportState>();
  return *state;
}
std::shared_ptr<DynamoExportState>& Observing() {
  static auto* state = new std::shared_ptr<DynamoExportState>();
  return *state;
}

py::object Annotate(int call) {
  static py::object annotate = py::module_::import("torch.fx.traceback").attr("annotate");
  py::dict annotation;
  annotation[kCallAnnotation] = call;
  return annotate(annotation);
}

// What a module's forward does during a tagged dynamo export's capture: its
// call is recorded, and every FX node made during it carries the call's number.
py::object CallForward(int module, const py::handle& self, const py::object& original, const py::args& args,
                       const py::kwargs& kwargs) {
  std::shared_ptr<DynamoExportState> state = Capturing();
  if (!state || state->session->stage() != DynamoStage::kCapture) return original(*args, **kwargs);
  state->session->MaybeFailAt("dynamo-capture");
  int call = state->session->EnterCall(module);
  py::object context = Annotate(call);
  context.attr("__enter__")();
  py::object result;
  try {
    result = original(*args, **kwargs);
  } catch (py::error_already_set& error) {
    context.attr("__exit__")(error.type(), error.value(), error.trace());
    state->session->ExitCall();
    throw;
  } catch (...) {
    context.attr("__exit__")(py::none(), py::none(), py::none());
    state->session->ExitCall();
    throw;
  }
  context.attr("__exit__")(py::none(), py::none(), py::none());
  state->session->ExitCall();
  return result;
}

// The owner of an ONNX node the translation made: the call its FX node was
// made in (kNoOwner: no call, it was made outside every forward). A node
// whose FX node was made inside a module call (torch's nn_module_stack says
// so) but carries no record is noted: torch dropped it.
Owner TranslatedOwner(DynamoExportState& state, const py::handle& node) {
  py::object fx = node.attr("meta").attr("get")("node");
  if (fx.is_none()) return kNoOwner;
  py::dict meta = fx.attr("meta");
  Owner owner = kNoOwner;
  if (meta.contains("custom")) {
    py::object custom = meta["custom"];
    if (py::isinstance<py::dict>(custom) && custom.cast<py::dict>().contains(kCallAnnotation)) {
      owner = custom.cast<py::dict>()[kCallAnnotation].cast<Owner>();
    }
  }
  if (owner == kNoOwner) {
    if (meta.contains("nn_module_stack") && py::len(meta["nn_module_stack"]) > 0) {
      state.lost.push_back(py::str(fx.attr("name")).cast<std::string>() + " (" +
                           py::str(fx.attr("target")).cast<std::string>() + ")");
    }
    return kNoOwner;
  }
  py::object printed = node.attr("metadata_props").attr("get")(kFxNodeMetadata);
  if (!printed.is_none()) state.fx_owner.emplace(printed.cast<std::string>(), owner);
  return owner;
}

// The owner of a node a pass made: the call of the FX node whose record the
// pass copied onto it (onnxscript's rewriter and inliner copy the replaced
// node's metadata), or kNoOwner.
Owner MadeOwner(const DynamoExportState& state, const py::handle& node) {
  py::object printed = node.attr("metadata_props").attr("get")(kFxNodeMetadata);
  if (printed.is_none()) return kNoOwner;
  auto found = state.fx_owner.find(printed.cast<std::string>());
  return found == state.fx_owner.end() ? kNoOwner : found->second;
}

// A pass's name in the records: its package and class (onnx_ir.RemoveUnusedNodesPass).
std::string PassName(const py::handle& pass) {
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(pass.ptr()));
  std::string module = py::str(type.attr("__module__"));
  return module.substr(0, module.find('.')) + "." + py::str(type.attr("__qualname__")).cast<std::string>();
}

// Notes the model's graph as it is now: after pass `pass` (paired with the
// last graph noted), or, when the model's graph is not the one observed (a
// step rebuilt it), as a graph no pass has rewritten yet.
void ObserveModel(DynamoExportState& state, const py::handle& model, const std::string& pass) {
  auto start = Clock::now();
  py::object graph = model.attr("graph");
  OnnxIrReader::MadeOwner made_owner = [&](const py::handle& node) { return MadeOwner(state, node); };
  if (!graph.is(state.graph)) {
    if (!state.session->loans().empty()) {
      throw std::runtime_error("hiertag: " + pass +
                               " rebuilt the ONNX graph after passes hiertag recorded rewrites of; nothing written: "
                               "export with dynamo=False");
    }
    DynamoGraph read = state.reader.Read(model, nullptr, made_owner);
    state.session->AddReadTime(Clock::now() - start);
    state.session->Translated(std::move(read));
    state.graph = graph;
  } else {
    DynamoGraph read = state.reader.Read(model, &state.session->graph().graph, made_owner);
    state.session->AddReadTime(Clock::now() - start);
    state.session->Observe(pass, std::move(read));
  }
  state.session->AddOwnWork(DynamoSession::Work::kPasses, Clock::now() - start);
}

void SetEntry(const py::dict& props, std::string_view key, const std::string& value) {
  props[py::str(key.data(), key.size())] = value;
}

// Removes hiertag's entries (an earlier tagging's, or copied by a pass from a tagged node).
void RemoveEntries(const py::dict& props) {
  std::vector<py::object> stale;
  for (auto item : props) {
    std::string key = py::str(item.first);
    if (key == kHierarchyTagKey || key.rfind(kKeyPrefix, 0) == 0) {
      stale.push_back(py::reinterpret_borrow<py::object>(item.first));
    }
  }
  for (const py::object& key : stale) PyDict_DelItem(props.ptr(), key.ptr());
}

// Tags the model's graph as last noted and writes the entries on its nodes and the model.
void TagModel(DynamoExportState& state, const py::handle& model) {
  auto start = Clock::now();
  DynamoSession& session = *state.session;
  session.MaybeFailAt("dynamo-tagging");
  CallTags call_tags(session.modules());
  PassGraphTagging tagged = session.Tag(call_tags);
  auto tagged_at = Clock::now();
  session.AddOwnWork(DynamoSession::Work::kTagging, tagged_at - start);
  const HierarchyTagging& tagging = tagged.tagging;
  for (size_t k = 0; k < tagging.nodes.size(); ++k) {
    py::dict props = state.reader.object(tagged.graph_index[k]).attr("metadata_props");
    RemoveEntries(props);
    NodeEntries entries = DescribeNode(tagging.nodes[k], tagging, call_tags);
    SetEntry(props, kHierarchyTagKey, *entries.tag);
    if (!entries.shared_with.empty()) SetEntry(props, kSharedWithKey, WriteStringList(entries.shared_with));
    for (const auto& [key, value] : entries.more) SetEntry(props, key, value);
  }
  auto node_of = [&](size_t k) { return state.reader.object(tagged.graph_index[k]); };
  std::vector<ModelMetadataEntry> model_entries = DescribeModel(
      tagging, call_tags, session.modules(),
      [&](size_t k) {
        py::object name = node_of(k).attr("name");
        return name.is_none() ? std::string() : name.cast<std::string>();
      },
      [&](size_t k) -> std::optional<std::string> {
        py::object outputs = node_of(k).attr("outputs");
        if (py::len(outputs) != 1) return std::nullopt;
        py::object name = outputs[py::int_(0)].attr("name");
        if (name.is_none()) return std::nullopt;
        return name.cast<std::string>();
      },
      [&](uint64_t id) -> std::optional<std::string> {
        py::object value = state.reader.value(id);
        if (!value || value.attr("name").is_none()) return std::nullopt;
        return value.attr("name").cast<std::string>();
      });
  py::dict props = model.attr("metadata_props");
  RemoveEntries(props);
  for (const ModelMetadataEntry& entry : model_entries) SetEntry(props, entry.key, entry.value);
  session.AddOwnWork(DynamoSession::Work::kEntries, Clock::now() - tagged_at);
  if (session.options().report) {
    std::string line = session.ReportLine(tagged);
    PySys_WriteStderr("%s", line.c_str());
  }
}

// Regions torch made higher-order ops of after the trace
// (wrap_with_set_grad_enabled for torch.no_grad(), wrap_with_autocast): the
// decompositions inline a region by running its graph as one call, every node
// it makes copying the region node's record. A region whose nodes were made
// in one call gets that call on its node; a region of several calls has its
// graph run node by node for the decompositions (Region), each under the call
// its node was made in, nothing else of torch's record changed. Returns the
// graphs so run, given their own forward back after the decompositions
// (hiertag_region_restore).
constexpr const char* kRegionCallsSource = R"(
import contextlib


def hiertag_region_calls(program, key):
    import torch
    from torch.fx import traceback as fx_traceback

    class Region(torch.fx.Interpreter):
        "A region's graph, run node by node, each under the call its node was made in."

        @contextlib.contextmanager
        def _set_current_node(self, node):
            call = (node.meta.get("custom") or {}).get(key)
            meta = fx_traceback.get_current_meta()
            if call is None or not fx_traceback.has_preserved_node_meta():
                yield
                return
            had, saved = "custom" in meta, meta.get("custom")
            meta["custom"] = {**(saved or {}), key: call}
            try:
                yield
            finally:
                if had:
                    meta["custom"] = saved
                else:
                    meta.pop("custom", None)

    run_node_by_node = []

    def give(module):
        calls = set()
        for node in module.graph.nodes:
            if node.op != "call_function":
                continue
            custom = node.meta.get("custom") or {}
            inner, regions = set(), []
            for arg in node.all_input_nodes:
                if arg.op == "get_attr":
                    target = getattr(module, arg.target, None)
                    if isinstance(target, torch.fx.GraphModule):
                        inner |= give(target)
                        regions.append(target)
            if key not in custom and len(inner) == 1:
                node.meta["custom"] = {**custom, key: next(iter(inner))}
                custom = node.meta["custom"]
            elif key not in custom and len(inner) > 1:
                for region in regions:
                    region.forward = lambda *args, _region=region: Region(_region).run(*args)
                    run_node_by_node.append(region)
            if key in custom:
                calls.add(custom[key])
            else:
                calls |= inner
        return calls

    give(program.graph_module)
    return run_node_by_node


def hiertag_region_restore(regions):
    for region in regions:
        region.__dict__.pop("forward", None)
)";

py::object& RegionRestore() {
  static auto* function = new py::object();
  return *function;
}

py::object& RegionCalls() {
  static auto* function = new py::object();
  if (!*function) {
    py::dict scope;
    scope["__name__"] = "hiertag";
    py::exec(kRegionCallsSource, scope);
    *function = scope["hiertag_region_calls"];
    RegionRestore() = scope["hiertag_region_restore"];
  }
  return *function;
}

py::object Argument(const py::args& args, const py::kwargs& kwargs, size_t position, const char* name) {
  if (args.size() > position) return py::reinterpret_borrow<py::object>(args[position]);
  if (kwargs.contains(name)) return kwargs[name];
  return py::none();
}

// hiertag's refusal in an exception's chain (its causes and contexts): one
// hiertag raised, or torch.compile refusing to trace hiertag's forward
// wrapper (a strict capture, or a torch.cond or torch.while_loop body, which
// torch traces with torch.compile in every capture).
std::optional<std::string> OwnRefusal(const py::handle& error) {
  py::object next = py::reinterpret_borrow<py::object>(error);
  for (int depth = 0; depth < 16 && next && !next.is_none(); ++depth) {
    std::string text = py::str(next);
    if (py::isinstance<py::value_error>(next) && text.rfind("hiertag:", 0) == 0) return text;
    if (text.find("_hiertag_forward") != std::string::npos) {
      return "hiertag: torch traces this model, or part of it, with torch.compile (a strict capture, or the "
             "body of a torch.cond or torch.while_loop), which cannot run hiertag's record of the module calls "
             "in it; nothing written: export it with dynamo=False, or without HIERTAG=1";
    }
    py::object cause = next.attr("__cause__");
    next = cause.is_none() ? py::object(next.attr("__context__")) : cause;
  }
  return std::nullopt;
}

void EndCapture() {
  WrappedForwards::End();
  Capturing().reset();
  Observing().reset();
}

}  // namespace

void NoteDynamoHooksInstalled(const py::handle& core_export) {
  DynamoHooksInstalled() = true;
  py::object parameters = py::module_::import("inspect").attr("signature")(core_export).attr("parameters");
  ExportOptimizes() = parameters.contains("optimize");
}

std::optional<std::string> DynamoIncapable() {
  std::string torch = "torch " + TorchVersion();
  if (!DynamoHooksInstalled()) {
    return torch + "'s dynamo exporter is not the one hiertag observes (no torch.onnx._internal.exporter._core)";
  }
  py::module_ traceback = py::module_::import("torch.fx.traceback");
  if (!py::hasattr(traceback, "annotate") || !py::hasattr(traceback, "preserve_node_meta")) {
    return torch + " has no torch.fx.traceback.annotate, which hiertag records module calls on FX nodes with";
  }
  // From torch 2.11 the exporter converts and optimizes the ONNX model inside
  // _core.export (observed there); before, its caller did after it returned.
  if (!ExportOptimizes()) {
    return torch +
           "'s dynamo exporter optimizes the ONNX model after torch.onnx._internal.exporter._core.export "
           "returns, where hiertag does not observe it";
  }
  py::object fields = py::module_::import("torch.fx.proxy").attr("_COPY_META_FIELDS");
  if (!fields.contains("custom")) {
    return torch +
           "'s FX tracer does not copy node.meta[\"custom\"] (torch.fx.proxy._COPY_META_FIELDS), so "
           "module calls recorded there are lost";
  }
  return std::nullopt;
}

py::object DynamoExport(const py::object& original, py::args args, py::kwargs kwargs) {
  ExportOptions options = ReadOptionsOrThrow();
  if (!options.tag) return original(*args, **kwargs);
  if (std::optional<std::string> why = DynamoIncapable()) {
    throw py::value_error("hiertag: " + *why + "; nothing written: pass dynamo=False to torch.onnx.export");
  }
  py::module_ torch = py::module_::import("torch");
  py::object model = Argument(args, kwargs, 0, "model");
  if (py::isinstance(model, torch.attr("export").attr("ExportedProgram"))) {
    throw py::value_error(
        "hiertag: HIERTAG=1 records module calls while torch.onnx.export captures the model, and this "
        "ExportedProgram was captured before; nothing written: pass the torch.nn.Module to torch.onnx.export");
  }
  if (!py::isinstance(model, torch.attr("nn").attr("Module")) ||
      py::isinstance(model, torch.attr("jit").attr("ScriptModule"))) {
    throw py::value_error(
        "hiertag: HIERTAG=1 with the dynamo exporter tags exports of a torch.nn.Module; this export's model is "
        "not one (a scripted model: export it with dynamo=False); nothing written");
  }
  auto start = Clock::now();
  EndCapture();
  WarnOfUnknownTorchModules(options.torch_modules);
  ModelModules modules = ReadModelModules(model, options);
  auto state = std::make_shared<DynamoExportState>();
  state->session = std::make_unique<DynamoSession>(std::move(modules.table), std::move(options));
  WrappedForwards& forwards = WrappedForwards::Begin(&CallForward);
  for (size_t index = 0; index < modules.instances.size(); ++index) {
    // torch.export reads the root forward's code object (the fake tensors' shape environment is named after it).
    forwards.Wrap(modules.instances[index], static_cast<int>(index), /*python_code=*/index == 0);
  }
  // Debug lines of the classification, through Python's logging (logger "hiertag", level DEBUG).
  py::object logger = py::module_::import("logging").attr("getLogger")("hiertag");
  if (logger.attr("isEnabledFor")(py::module_::import("logging").attr("DEBUG")).cast<bool>()) {
    state->session->set_debug_log([logger](const std::string& line) { logger.attr("debug")("%s", line); });
  }
  Capturing() = state;
  py::object preserve = py::module_::import("torch.fx.traceback").attr("preserve_node_meta")();
  preserve.attr("__enter__")();
  state->session->AddOwnWork(DynamoSession::Work::kSetUp, Clock::now() - start);
  py::object program;
  try {
    program = original(*args, **kwargs);
  } catch (py::error_already_set& error) {
    preserve.attr("__exit__")(error.type(), error.value(), error.trace());
    EndCapture();
    // hiertag's own refusal, raised inside torch's steps, is the one line the
    // user gets (torch wraps it in its conversion error).
    std::optional<std::string> refusal = OwnRefusal(error.value());
    if (refusal) throw py::value_error(*refusal);
    throw;
  } catch (...) {
    preserve.attr("__exit__")(py::none(), py::none(), py::none());
    EndCapture();
    throw;
  }
  preserve.attr("__exit__")(py::none(), py::none(), py::none());
  try {
    py::object strategy = py::getattr(program, "_capture_strategy", py::none());
    if (!strategy.is_none() && py::str(strategy).cast<std::string>() != kNonStrictCapture) {
      throw py::value_error("hiertag: torch.export's non-strict capture of this model failed and torch fell back to " +
                            py::str(strategy).cast<std::string>() +
                            ", whose module calls hiertag cannot observe; nothing written: export with dynamo=False");
    }
    if (state->session->stage() == DynamoStage::kCapture) {
      throw std::runtime_error("hiertag: torch's dynamo exporter returned without translating the model hiertag saw");
    }
    ObserveModel(*state, program.attr("model"), "torch.onnx.export");
    TagModel(*state, program.attr("model"));
  } catch (...) {
    EndCapture();
    throw;
  }
  EndCapture();
  // Kept with the program: a later optimize() is observed and tagged again.
  auto* kept = new std::shared_ptr<DynamoExportState>(state);
  py::capsule capsule(kept, [](void* pointer) { delete static_cast<std::shared_ptr<DynamoExportState>*>(pointer); });
  py::setattr(program, kProgramAttribute, capsule);
  return program;
}

py::object PrepareExportedProgram(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<DynamoExportState> state = Capturing();
  if (!state) return original(*args, **kwargs);
  auto start = Clock::now();
  state->session->MaybeFailAt("dynamo-region");
  py::object regions = RegionCalls()(Argument(args, kwargs, 0, "exported_program"), kCallAnnotation);
  state->session->AddOwnWork(DynamoSession::Work::kCapture, Clock::now() - start);
  py::object prepared;
  try {
    prepared = original(*args, **kwargs);
  } catch (...) {
    RegionRestore()(regions);
    throw;
  }
  RegionRestore()(regions);
  return prepared;
}

py::object TranslateExportedProgram(const py::object& original, py::args args, py::kwargs kwargs) {
  py::object program = original(*args, **kwargs);
  std::shared_ptr<DynamoExportState> state = Capturing();
  if (!state) return program;
  auto start = Clock::now();
  state->session->MaybeFailAt("dynamo-translation");
  py::object model = program.attr("model");
  OnnxIrReader::MadeOwner owner = [&](const py::handle& node) { return TranslatedOwner(*state, node); };
  DynamoGraph graph = state->reader.Read(model, nullptr, owner);
  if (!state->lost.empty()) {
    std::string examples;
    for (size_t k = 0; k < state->lost.size() && k < 3; ++k) examples += (k ? ", " : "") + state->lost[k];
    throw py::value_error("hiertag: torch " + TorchVersion() + " dropped the module call recorded on " +
                          std::to_string(state->lost.size()) + " FX nodes made inside module calls (" + examples +
                          "): a region torch wrapped after the trace (torch.no_grad(), autocast) holds several "
                          "calls; nothing written: export with dynamo=False");
  }
  state->session->Translated(std::move(graph));
  state->graph = model.attr("graph");
  Observing() = state;
  state->session->AddOwnWork(DynamoSession::Work::kTranslation, Clock::now() - start);
  return program;
}

py::object RunOnnxPass(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<DynamoExportState> state = Observing();
  if (!state || args.size() < 2) return original(*args, **kwargs);
  static py::object sequential = py::module_::import("onnx_ir.passes").attr("Sequential");
  static py::object result_type = py::module_::import("onnx_ir.passes").attr("PassResult");
  py::handle pass = args[0];
  if (py::isinstance(pass, sequential)) return original(*args, **kwargs);  // its passes are observed one by one
  py::handle given = args[1];
  py::object model =
      py::isinstance(given, result_type) ? py::object(given.attr("model")) : py::reinterpret_borrow<py::object>(given);
  py::object graph = model.attr("graph");
  if (!graph.is(state->graph)) return original(*args, **kwargs);  // not the model being tagged
  // A pass another pass runs (the rewriter removes unused nodes after its
  // rules): what the outer pass did so far is the outer pass's.
  std::vector<std::string>& running = state->running_passes;
  if (!running.empty()) ObserveModel(*state, model, running.back());
  running.push_back(PassName(pass));
  py::object result;
  try {
    state->session->MaybeFailAt("dynamo-pass");
    result = original(*args, **kwargs);
  } catch (...) {
    running.pop_back();
    throw;
  }
  std::string name = std::move(running.back());
  running.pop_back();
  // A pass that says it changed nothing is not read after: should it have
  // changed something, the next read (at the latest the export's end) still
  // sees it, only counted to the pass read next.
  if (py::bool_(result.attr("modified"))) ObserveModel(*state, result.attr("model"), name);
  return result;
}

py::object OptimizeOnnxProgram(const py::object& original, py::args args, py::kwargs kwargs) {
  if (Capturing() || args.size() < 1) return original(*args, **kwargs);  // torch's own, during the export
  py::object kept = py::getattr(args[0], kProgramAttribute, py::none());
  if (kept.is_none()) return original(*args, **kwargs);
  std::shared_ptr<DynamoExportState> state =
      *static_cast<std::shared_ptr<DynamoExportState>*>(kept.cast<py::capsule>().get_pointer());
  Observing() = state;
  py::object result;
  try {
    result = original(*args, **kwargs);
    ObserveModel(*state, args[0].attr("model"), "ONNXProgram.optimize");
    TagModel(*state, args[0].attr("model"));
  } catch (...) {
    Observing().reset();
    throw;
  }
  Observing().reset();
  return result;
}

py::object DynamoExportCompat(const py::object& original, py::args args, py::kwargs kwargs) {
  if (ReadOptionsOrThrow().tag) {
    if (std::optional<std::string> why = DynamoIncapable()) {
      throw py::value_error("hiertag: " + *why + "; nothing written: pass dynamo=False to torch.onnx.export");
    }
  }
  return original(*args, **kwargs);
}

}  // namespace python
}  // namespace hiertag
