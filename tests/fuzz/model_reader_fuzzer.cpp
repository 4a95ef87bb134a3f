// Fuzz target: the tool's wire-level model reader (OnnxModel::Parse) on any
// bytes, then what the commands do with each initializer's external data:
// the location check, the bounded range check and read inside the work folder,
// and the tensor rewritten to inline or external data, which must parse again.
// Checks the decoded model's invariants (graph and node indices in range,
// every raw span inside the input).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "fuzz_support.h"
#include "hiertag/core/onnx/external_data.h"
#include "hiertag/core/onnx/onnx_model.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag::fuzz {
namespace {

void Require(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz: model reader invariant broken: %s\n", what);
  std::abort();
}

bool InsideInput(const OnnxModel& model, std::string_view span) {
  std::string_view bytes = model.bytes();
  return span.empty() || (span.data() >= bytes.data() && span.data() + span.size() <= bytes.data() + bytes.size());
}

// A serialized message that must walk to its end without a malformed field.
bool WellFormed(std::string_view message) {
  wire::Reader reader(message);
  wire::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) return false;
  }
  return true;
}

void CheckModel(const OnnxModel& model) {
  Require(!model.graphs.empty(), "a parsed model has a main graph");
  Require(model.graphs[0].holder == -1, "the main graph has no holder");
  size_t listed_nodes = 0;
  for (const OnnxGraph& graph : model.graphs) {
    Require(graph.holder >= -1 && graph.holder < static_cast<int>(model.nodes.size()), "graph holder in range");
    for (int node : graph.nodes) Require(node >= 0 && node < static_cast<int>(model.nodes.size()), "node in range");
    listed_nodes += graph.nodes.size();
    for (const OnnxInitializer& initializer : graph.initializers) {
      Require(InsideInput(model, initializer.raw), "initializer bytes inside the input");
      Require(initializer.elements >= 0 && initializer.bytes >= 0, "sizes not negative");
    }
  }
  Require(listed_nodes == model.nodes.size(), "every node listed by exactly one graph");
  for (size_t i = 0; i < model.nodes.size(); ++i) {
    const OnnxNode& node = model.nodes[i];
    Require(node.graph >= 0 && node.graph < static_cast<int>(model.graphs.size()), "node's graph in range");
    Require(InsideInput(model, node.raw), "node bytes inside the input");
    for (int graph : node.subgraphs) {
      Require(graph > 0 && graph < static_cast<int>(model.graphs.size()), "subgraph in range");
      Require(model.graphs[graph].holder == static_cast<int>(i), "subgraph held by its node");
    }
  }
}

void ExerciseExternalData(const OnnxModel& model) {
  const std::string folder = WorkFolder::Get().model_folder().string();
  for (const OnnxGraph& graph : model.graphs) {
    for (const OnnxInitializer& initializer : graph.initializers) {
      if (!initializer.external) continue;
      const ExternalData& where = *initializer.external;
      bool unsafe = UnsafeLocationReason(where.location).has_value();
      std::string error;
      std::optional<uint64_t> size = ExternalDataSize(folder, where, &error);
      Require(!(unsafe && size), "an unsafe location is refused");
      std::optional<std::string> data = ReadExternalData(folder, where, initializer.bytes, &error);
      Require(!(unsafe && data), "an unsafe location is never read");
      if (data) {
        Require(size && *size == data->size(), "the read range has the checked size");
        Require(data->find(kCanary) == std::string::npos, "nothing read from outside the model's folder");
      }
      std::string inline_tensor = TensorWithInlineData(initializer.raw, data ? *data : std::string("abc"));
      Require(WellFormed(inline_tensor), "a tensor with inline data is well-formed");
      std::string external_tensor = TensorWithExternalData(initializer.raw, where);
      Require(WellFormed(external_tensor), "a tensor with external data is well-formed");
    }
  }
}

}  // namespace
}  // namespace hiertag::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hiertag::fuzz::WorkFolder::Get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string error;
  std::optional<hiertag::OnnxModel> model =
      hiertag::OnnxModel::Parse(std::string(reinterpret_cast<const char*>(data), size), &error);
  if (!model) {
    hiertag::fuzz::Require(!error.empty(), "a refused model has a reason");
    return 0;
  }
  hiertag::fuzz::CheckModel(*model);
  hiertag::fuzz::ExerciseExternalData(*model);
  return 0;
}
