// Python plugin: installs hiertag into torch's TorchScript-based ONNX exporter.
//
// The only file that knows about Python. Its static initializer (run when
// libhiertag.so loads it, with the GIL held) wraps, once per process:
//   exporter utils._setup_trace_module_map   reads HIERTAG, builds the module table,
//                                            gives each module instance its own
//                                            scope name (scope_names.h) and wraps
//                                            each module's forward to record its
//                                            calls (ModuleCalls)
//   torch._C.ScriptFunction.__call__         marks script-function calls while tracing
//   torch._C._jit_pass_onnx_function_substitution
//                                            (inlines those calls right after the
//                                            trace) lends their call-site scopes to
//                                            the inlined nodes (MarkInlinedCalls)
//   torch._C._jit_pass_cse                   records nodes merged across modules
//   the other graph passes of the export     record rewrites across modules
//   (kObservedPasses)                        (RecordRewrites)
//   torch._C._jit_pass_onnx_eliminate_unused_items
//                                            notes which graph inputs are initializers
//   torch._C._jit_pass_onnx_assign_scoped_names_for_node_and_value
//                                            tags the final graph, gives torch its
//                                            scopes back before naming
//   torch._C.Graph._export_onnx              plans the tagged bytes (fails before
//                                            anything is written if nodes and tags differ)
//   exporter onnx_proto_utils._export_file   writes the planned bytes: torch's own
//                                            chunks streamed between the new ones,
//                                            the weights never copied
//   exporter utils._reset_trace_module_map   ends the export's session (in torch's
//                                            finally: also after a failed export),
//                                            unwraps every forward
// With HIERTAG unset, empty or 0 every wrapper calls straight through.
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "hiertag/assign_hierarchy_tags.h"
#include "hiertag/borrowed_scopes.h"
#include "hiertag/call_tags.h"
#include "hiertag/mark_inlined_calls.h"
#include "hiertag/module_calls.h"
#include "hiertag/module_table.h"
#include "hiertag/proto_tagging.h"
#include "hiertag/record_cse_sharing.h"
#include "hiertag/record_rewrites.h"
#include "hiertag/scope_names.h"
#include "hiertag/tag_format.h"
#include "hiertag/tagged_model_entries.h"

namespace py = pybind11;

namespace hiertag {
namespace {

constexpr const char* kExporterUtils = "torch.onnx._internal.torchscript_exporter.utils";
constexpr const char* kExporterProtoUtils = "torch.onnx._internal.torchscript_exporter.onnx_proto_utils";
constexpr const char* kInstalledMarker = "_hiertag_plugin_installed";

// The graph passes of the export (utils._optimize_graph, _model_to_graph) that
// may remove or merge nodes, observed with RecordRewrites. CSE has its own
// observer; the conversion and canonicalize return new graphs (scopes copied
// one to one); dead code elimination removes only unused nodes.
constexpr const char* kObservedPasses[] = {
    "_jit_pass_constant_propagation",
    "_jit_pass_peephole",
    "_jit_pass_fuse_addmm",
    "_jit_pass_onnx_remove_inplace_ops_for_onnx",
    "_jit_pass_onnx_preprocess",
    "_jit_pass_prepare_division_for_onnx",
    "_jit_pass_erase_number_types",
    "_jit_pass_onnx_scalar_type_analysis",
    "_jit_pass_onnx_peephole",
    "_jit_pass_onnx_eval_peephole",
    "_jit_pass_onnx_constant_fold",
    "_jit_pass_onnx_graph_shape_type_inference",
};

// A module's original `forward` entry in its instance __dict__ (or none), so
// unwrapping leaves the instance exactly as it was.
struct WrappedForward {
  py::object module;
  py::object own_forward;  // null: the instance had no forward attribute of its own
};

struct ExportSession {
  ModuleTable modules;
  std::unordered_set<std::string> member_names;
  int user_input_count = -1;  // leading graph inputs that are not initializers
  BorrowedScopes borrowed;
  ModuleCalls calls;
  RewriteLog rewrites;
  std::vector<WrappedForward> wrapped;
  bool tagged = false;
  std::vector<SerializedNodeTag> node_tags;
  std::vector<ModelMetadataEntry> model_entries;
  py::object planned_bytes;  // torch's serialized model the plan borrows from
  TaggedModelPlan plan;
  bool written = false;
  std::string report;                            // HIERTAG_REPORT line, printed once written
  std::chrono::steady_clock::duration own_time{};  // hiertag's own work, torch's excluded
  std::chrono::steady_clock::duration write_time{};  // writing the file (replaces torch's write)
};

// Adds the time until it goes out of scope to `total`.
class Stopwatch {
 public:
  explicit Stopwatch(std::chrono::steady_clock::duration* total)
      : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Stopwatch() { *total_ += std::chrono::steady_clock::now() - start_; }

 private:
  std::chrono::steady_clock::duration* total_;
  std::chrono::steady_clock::time_point start_;
};

// One export runs at a time per process (torch's exporter keeps global state
// too); the GIL serialises every access.
std::unique_ptr<ExportSession>& Session() {
  static auto* session = new std::unique_ptr<ExportSession>();
  return *session;
}

// HIERTAG: "1" on; unset, "" or "0" off; anything else is an error.
bool TaggingRequested() {
  const char* value = std::getenv("HIERTAG");
  if (value == nullptr || value[0] == '\0' || std::string(value) == "0") return false;
  if (std::string(value) == "1") return true;
  throw py::value_error("hiertag: HIERTAG='" + std::string(value) +
                        "' is not valid: use 1 (tag this export) or 0, empty or unset (plain export)");
}

// HIERTAG_REPORT=1: one stderr line per tagged export saying which rule tagged
// how many nodes, the op types of the nodes no recorded scope tagged, and the
// time hiertag's own work took; printed once the file is written.
bool ReportRequested() {
  const char* value = std::getenv("HIERTAG_REPORT");
  return value != nullptr && std::string(value) == "1";
}

std::string DescribeTagging(const HierarchyTagging& tagging) {
  std::ostringstream line;
  line << "hiertag: " << tagging.nodes.size() << " nodes:";
  for (int rule = 0; rule < kTagRuleCount; ++rule) {
    line << " " << TagRuleName(static_cast<TagRule>(rule)) << " " << tagging.rule_counts[rule];
  }
  std::map<std::string, int> unrecorded;
  for (const TaggedNode& tagged : tagging.nodes) {
    if (tagged.rule != TagRule::kRecorded) ++unrecorded[tagged.node->kind().toUnqualString()];
  }
  if (!unrecorded.empty()) {
    line << "; not recorded:";
    for (const auto& [op_type, count] : unrecorded) line << " " << op_type << "=" << count;
  }
  line << "; unresolved scope levels " << tagging.unresolved_scope_levels;
  return line.str();
}

std::string DescribeCallsAndRewrites(const ModuleCalls& calls, const RewriteLog& rewrites) {
  std::ostringstream line;
  line << "; module calls " << calls.calls().size() << " (" << calls.direct_calls() << " direct, "
       << calls.aliases() << " aliases); rewrites: fused " << rewrites.fused << ", merged " << rewrites.merged
       << ", removed/folded " << rewrites.records.size();
  return line.str();
}

void PrintReport(const ExportSession& session) {
  using Milliseconds = std::chrono::duration<double, std::milli>;
  std::ostringstream line;
  line.precision(1);
  line << std::fixed << session.report << "; hiertag work "
       << Milliseconds(session.own_time).count() << " ms, writing "
       << Milliseconds(session.write_time).count() << " ms\n";
  PySys_WriteStderr("%s", line.str().c_str());
}

// HIERTAG_TORCH_MODULES: which torch.nn / torch.ao classes keep a tag segment.
struct TorchModuleSegments {
  bool all = false;
  std::unordered_set<std::string> classes;
};

TorchModuleSegments ReadTorchModuleSegments() {
  TorchModuleSegments segments;
  const char* value = std::getenv("HIERTAG_TORCH_MODULES");
  std::string text = value == nullptr ? "" : value;
  if (text.empty() || text == "0") return segments;
  if (text == "1") {
    segments.all = true;
    return segments;
  }
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    size_t begin = item.find_first_not_of(" \t");
    size_t end = item.find_last_not_of(" \t");
    std::string name = begin == std::string::npos ? "" : item.substr(begin, end - begin + 1);
    bool valid = !name.empty() && (std::isalpha(static_cast<unsigned char>(name[0])) || name[0] == '_');
    for (char c : name) valid &= std::isalnum(static_cast<unsigned char>(c)) || c == '_';
    if (!valid) {
      throw py::value_error("hiertag: HIERTAG_TORCH_MODULES='" + text +
                            "' is not valid: use 0, 1 or a comma list of class names (LayerNorm,Embedding)");
    }
    segments.classes.insert(name);
  }
  return segments;
}

bool IsTorchModuleClass(const std::string& qualified) {
  return qualified.compare(0, 9, "torch.nn.") == 0 || qualified.compare(0, 9, "torch.ao.") == 0;
}

void FlattenTensors(const py::handle& value, std::vector<at::Tensor>* out, int depth = 0) {
  if (depth > 8) return;
  if (THPVariable_Check(value.ptr())) {
    out->push_back(THPVariable_Unpack(value.ptr()));
  } else if (py::isinstance<py::tuple>(value) || py::isinstance<py::list>(value)) {
    for (py::handle item : value) FlattenTensors(item, out, depth + 1);
  } else if (py::isinstance<py::dict>(value)) {
    for (auto item : value.cast<py::dict>()) FlattenTensors(item.second, out, depth + 1);
  }
}

// Stands in for a module's forward during a tagged export: every call, through
// __call__ or straight to .forward(), passes ModuleCalls. inspect.signature
// follows __wrapped__ to the original, as for functools.wraps.
class ForwardWrapper {
 public:
  ForwardWrapper(py::object original, int module, std::string scope_name)
      : original_(std::move(original)), module_(module), scope_name_(std::move(scope_name)) {}

  py::object Call(py::args args, py::kwargs kwargs) {
    ExportSession* session = Session().get();
    if (session == nullptr) return original_(*args, **kwargs);
    std::vector<at::Tensor> inputs;
    FlattenTensors(args, &inputs);
    FlattenTensors(kwargs, &inputs);
    ModuleCalls::Entered entered = session->calls.Enter(module_, scope_name_, std::move(inputs));
    py::object result;
    try {
      result = original_(*args, **kwargs);
    } catch (...) {
      session->calls.Exit(entered, false, session->borrowed);
      throw;
    }
    session->calls.Exit(entered, true, session->borrowed);
    return result;
  }

 private:
  py::object original_;
  int module_;
  std::string scope_name_;
};

void WrapForward(ExportSession& session, const py::handle& module, int index, const std::string& scope_name) {
  py::dict own = module.attr("__dict__");
  WrappedForward record{py::reinterpret_borrow<py::object>(module),
                        own.contains("forward") ? py::object(own["forward"]) : py::object()};
  py::object wrapper = py::cast(ForwardWrapper(module.attr("forward"), index, scope_name));
  wrapper.attr("__wrapped__") = module.attr("forward");
  own["forward"] = wrapper;
  session.wrapped.push_back(std::move(record));
}

void UnwrapForwards(ExportSession& session) {
  for (WrappedForward& record : session.wrapped) {
    py::dict own = record.module.attr("__dict__");
    if (record.own_forward) {
      own["forward"] = record.own_forward;
    } else if (own.contains("forward")) {
      PyDict_DelItemString(own.ptr(), "forward");
    }
  }
  session.wrapped.clear();
}

// Builds the module table from named_modules(). With `trace_module_map` (a
// traced export), also gives each module instance a scope name of its own
// (scope_names.h), which the tracer pushes at every module call, and wraps
// every module's forward but the root's (the tracer calls the root itself, and
// the exporter reads its signature) to record its calls.
std::unique_ptr<ExportSession> BuildSession(const py::handle& model, py::object trace_module_map) {
  auto session = std::make_unique<ExportSession>();
  py::module_ torch = py::module_::import("torch");
  py::object script_module = torch.attr("jit").attr("ScriptModule");
  py::object typename_of = torch.attr("typename");
  TorchModuleSegments torch_segments = ReadTorchModuleSegments();
  for (py::handle item : model.attr("named_modules")()) {
    auto pair = item.cast<py::tuple>();
    std::string path = pair[0].cast<std::string>();
    py::handle module = pair[1];
    std::string qualified;
    std::string short_name;
    if (py::isinstance(module, script_module)) {
      qualified = UnmangleTorchScriptTypeName(
          module.attr("_c").attr("_type")().attr("qualified_name")().cast<std::string>());
      short_name = module.attr("original_name").cast<std::string>();
    } else {
      py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(module.ptr()));
      qualified = typename_of(type).cast<std::string>();
      short_name = type.attr("__name__").cast<std::string>();
    }
    bool has_segment = !IsTorchModuleClass(qualified) || torch_segments.all ||
                       torch_segments.classes.count(short_name) > 0;
    int index = session->modules.Add(path, qualified, short_name, has_segment);
    if (!trace_module_map.is_none() && trace_module_map.contains(module)) {
      std::string name = trace_module_map[module].cast<std::string>();
      std::string instance_name = MarkInstanceScopeName(index, name);
      trace_module_map[module] = instance_name;
      if (index > 0) WrapForward(*session, module, index, instance_name);
    }
  }
  session->modules.Finalize();
  for (const char* members : {"named_parameters", "named_buffers"}) {
    for (py::handle item : model.attr(members)()) {
      session->member_names.insert(item.cast<py::tuple>()[0].cast<std::string>());
    }
  }
  return session;
}

py::object SetupTraceModuleMap(const py::object& original, py::args args, py::kwargs kwargs) {
  if (Session()) UnwrapForwards(*Session());
  Session().reset();
  bool tagging = TaggingRequested();
  py::object model = args.size() > 0 ? py::reinterpret_borrow<py::object>(args[0])
                                     : py::reinterpret_borrow<py::object>(kwargs["model"]);
  if (tagging) {
    py::object as_functions = args.size() > 1 ? py::reinterpret_borrow<py::object>(args[1])
                                              : kwargs.attr("get")("export_modules_as_functions", false);
    if (py::bool_(as_functions)) {
      throw py::value_error(
          "hiertag: HIERTAG=1 does not support export_modules_as_functions; export without it");
    }
  }
  py::object result = original(*args, **kwargs);
  if (!tagging) return result;
  // A scripted model is not traced: its nodes carry call stacks instead.
  bool scripted = py::isinstance(model, py::module_::import("torch").attr("jit").attr("ScriptModule"));
  py::object trace_module_map = py::none();
  if (!scripted) trace_module_map = py::module_::import("torch.jit._trace").attr("_trace_module_map");
  auto start = std::chrono::steady_clock::now();
  Session() = BuildSession(model, trace_module_map);
  Session()->own_time += std::chrono::steady_clock::now() - start;
  return result;
}

py::object ObservePass(const py::object& original, const char* name, py::args args, py::kwargs kwargs) {
  ExportSession* session = Session().get();
  if (session == nullptr || args.size() == 0 || !py::isinstance(args[0], py::module_::import("torch._C").attr("Graph"))) {
    return original(*args, **kwargs);
  }
  auto graph = args[0].cast<std::shared_ptr<torch::jit::Graph>>();
  py::object result;
  std::chrono::steady_clock::duration torch_time{};
  auto start = std::chrono::steady_clock::now();
  RecordRewrites(*graph, name, session->borrowed, session->rewrites, [&] {
    Stopwatch torch_pass(&torch_time);
    result = original(*args, **kwargs);
  });
  session->own_time += std::chrono::steady_clock::now() - start - torch_time;
  return result;
}

py::object SubstituteFunctions(const py::object& original, py::args args) {
  py::object result = original(*args);
  if (Session()) {
    Stopwatch own(&Session()->own_time);
    MarkInlinedCalls(*args[0].cast<std::shared_ptr<torch::jit::Graph>>(), Session()->borrowed);
  }
  return result;
}

py::object CallScriptFunction(const py::object& original, py::args args, py::kwargs kwargs) {
  std::shared_ptr<torch::jit::tracer::TracingState> state =
      Session() ? torch::jit::tracer::getTracingState() : nullptr;
  if (!state) return original(*args, **kwargs);
  InsertCallMarker(*state->graph, CallMarker::kBegin);
  py::object result = original(*args, **kwargs);
  InsertCallMarker(*state->graph, CallMarker::kEnd);
  return result;
}

py::object EliminateCommonSubexpression(const py::object& original, py::args args) {
  if (!Session()) return original(*args);
  auto graph = args[0].cast<std::shared_ptr<torch::jit::Graph>>();
  bool changed = false;
  std::chrono::steady_clock::duration torch_time{};
  auto start = std::chrono::steady_clock::now();
  RecordCseSharing(*graph, Session()->borrowed, [&] {
    Stopwatch torch_cse(&torch_time);
    changed = original(*args).cast<bool>();
  });
  Session()->own_time += std::chrono::steady_clock::now() - start - torch_time;
  return py::bool_(changed);
}

// The exporter's final params_dict: its initializers are the trailing inputs.
py::object EliminateUnusedItems(const py::object& original, py::args args) {
  py::object params = original(*args);
  if (Session()) {
    auto graph = args[0].cast<std::shared_ptr<torch::jit::Graph>>();
    Session()->user_input_count =
        static_cast<int>(graph->inputs().size()) - static_cast<int>(py::len(params));
  }
  return params;
}

py::object AssignScopedNames(const py::object& original, py::args args) {
  ExportSession* session = Session().get();
  if (session != nullptr) {
    auto graph = args[0].cast<std::shared_ptr<torch::jit::Graph>>();
    CallTags call_tags(session->modules);
    HierarchyTagging tagging;
    {
      Stopwatch own(&session->own_time);
      tagging = AssignHierarchyTags(*graph, session->modules, call_tags, session->borrowed, session->member_names,
                                    session->user_input_count, &session->calls, &session->rewrites);
      if (ReportRequested()) {
        session->report = DescribeTagging(tagging) + DescribeCallsAndRewrites(session->calls, session->rewrites);
      }
      session->borrowed.Restore(graph->block());
      RestoreTorchScopes(graph->block());
    }
    py::object result = original(*args);
    Stopwatch own(&session->own_time);
    TaggedModelEntries entries = DescribeTaggedModel(tagging, call_tags, session->modules, *graph);
    session->node_tags = std::move(entries.nodes);
    session->model_entries = std::move(entries.model);
    session->tagged = true;
    return result;
  }
  return original(*args);
}

std::string_view BytesView(const py::handle& bytes) {
  char* data = nullptr;
  Py_ssize_t size = 0;
  if (PyBytes_AsStringAndSize(bytes.ptr(), &data, &size) != 0) throw py::error_already_set();
  return std::string_view(data, static_cast<size_t>(size));
}

void PlanTags(ExportSession& session, const py::object& model_bytes) {
  std::string error;
  if (!PlanTaggedModel(BytesView(model_bytes), session.node_tags, session.model_entries, &session.plan, &error)) {
    throw std::runtime_error("hiertag: cannot tag the exported model (" + error + "); nothing written");
  }
  session.planned_bytes = model_bytes;
}

py::object ExportOnnx(const py::object& original, py::args args, py::kwargs kwargs) {
  ExportSession* session = Session().get();
  if (session == nullptr) {
    if (TaggingRequested()) {
      throw py::value_error(
          "hiertag: HIERTAG=1 tags exports of a torch.nn.Module or ScriptModule; this export's "
          "model is neither");
    }
    return original(*args, **kwargs);
  }
  if (!session->tagged) {
    throw std::runtime_error("hiertag: the graph reached the serializer untagged; nothing written");
  }
  py::tuple result = original(*args, **kwargs);
  Stopwatch own(&session->own_time);
  PlanTags(*session, result[0]);
  return result;
}

py::object ExportFile(const py::object& original, py::args args, py::kwargs kwargs) {
  ExportSession* session = Session().get();
  if (session == nullptr || !session->planned_bytes || args.size() < 2) return original(*args, **kwargs);
  py::object model_bytes = py::reinterpret_borrow<py::object>(args[0]);
  // torch re-serializes the model when it adds onnxscript functions; the nodes
  // are the same, so plan again on the new bytes.
  if (!model_bytes.is(session->planned_bytes)) {
    Stopwatch own(&session->own_time);
    PlanTags(*session, model_bytes);
  }
  Stopwatch writing(&session->write_time);
  py::object open_file_like = py::module_::import("torch.serialization").attr("_open_file_like");
  py::object context = open_file_like(args[1], "wb");
  py::object opened = context.attr("__enter__")();
  try {
    py::object write = opened.attr("write");
    session->plan.ForEachChunk([&](std::string_view chunk) {
      write(py::memoryview::from_memory(chunk.data(), static_cast<py::ssize_t>(chunk.size())));
    });
  } catch (py::error_already_set& error) {
    context.attr("__exit__")(error.type(), error.value(), error.trace());
    throw;
  }
  context.attr("__exit__")(py::none(), py::none(), py::none());
  session->planned_bytes = py::object();
  session->written = true;
  return py::none();
}

py::object ResetTraceModuleMap(const py::object& original, py::args args) {
  if (Session()) {
    UnwrapForwards(*Session());
    if (Session()->written && ReportRequested()) PrintReport(*Session());
  }
  Session().reset();
  return original(*args);
}

template <typename Wrapper>
void Wrap(py::object owner, const char* name, Wrapper wrapper) {
  py::object original = owner.attr(name);
  owner.attr(name) = py::cpp_function(
      [original, wrapper](py::args args, py::kwargs kwargs) { return wrapper(original, args, kwargs); },
      py::name(name));
}

void Install() {
  py::module_ torch = py::module_::import("torch");
  py::module_ c = torch.attr("_C");
  if (py::hasattr(c, kInstalledMarker)) return;
  py::module_ utils = py::module_::import(kExporterUtils);
  Wrap(utils, "_setup_trace_module_map", SetupTraceModuleMap);
  Wrap(py::module_::import(kExporterProtoUtils), "_export_file", ExportFile);
  Wrap(utils, "_reset_trace_module_map",
       [](const py::object& original, py::args args, py::kwargs) { return ResetTraceModuleMap(original, args); });
  Wrap(c, "_jit_pass_onnx_function_substitution",
       [](const py::object& original, py::args args, py::kwargs) { return SubstituteFunctions(original, args); });
  Wrap(c, "_jit_pass_cse",
       [](const py::object& original, py::args args, py::kwargs) { return EliminateCommonSubexpression(original, args); });
  Wrap(c, "_jit_pass_onnx_eliminate_unused_items",
       [](const py::object& original, py::args args, py::kwargs) { return EliminateUnusedItems(original, args); });
  Wrap(c, "_jit_pass_onnx_assign_scoped_names_for_node_and_value",
       [](const py::object& original, py::args args, py::kwargs) { return AssignScopedNames(original, args); });
  for (const char* name : kObservedPasses) {
    Wrap(c, name, [name](const py::object& original, py::args args, py::kwargs kwargs) {
      return ObservePass(original, name, args, kwargs);
    });
  }
  py::class_<ForwardWrapper>(c, "_HiertagForward", py::dynamic_attr())
      .def("__call__", &ForwardWrapper::Call);

  py::object graph_class = c.attr("Graph");
  py::object export_onnx = graph_class.attr("_export_onnx");
  graph_class.attr("_export_onnx") = py::cpp_function(
      [export_onnx](py::args args, py::kwargs kwargs) { return ExportOnnx(export_onnx, args, kwargs); },
      py::name("_export_onnx"), py::is_method(graph_class));
  py::object function_class = c.attr("ScriptFunction");
  py::object call = function_class.attr("__call__");
  function_class.attr("__call__") = py::cpp_function(
      [call](py::args args, py::kwargs kwargs) { return CallScriptFunction(call, args, kwargs); },
      py::name("__call__"), py::is_method(function_class));
  c.attr(kInstalledMarker) = true;
}

struct InstallAtLoad {
  InstallAtLoad() {
    if (!Py_IsInitialized()) return;
    PyGILState_STATE gil = PyGILState_Ensure();
    try {
      Install();
    } catch (const std::exception& error) {
      PyErr_Clear();
      PySys_WriteStderr("hiertag: plugin not installed: %.400s\n", error.what());
    }
    PyGILState_Release(gil);
  }
} install_at_load;

}  // namespace
}  // namespace hiertag
