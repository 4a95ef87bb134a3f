// Tests of wire-level proto tagging on ModelProto bytes written and read by the test itself.
#include "hiertag/core/export/proto_tagging.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "hiertag/core/export/mapped_memory.h"
#include "hiertag/core/format/tag_format.h"
#include "hiertag/core/onnx/onnx_fields.h"
#include "hiertag/core/onnx/proto_wire.h"

namespace hiertag {
namespace {

using namespace onnx_field;  // NOLINT: the field numbers read as in onnx.proto

// Fields onnx_fields.h has no use for elsewhere.
constexpr uint32_t kModelTrainingInfo = 20;
constexpr uint32_t kAttributeName = 1;
constexpr uint32_t kAttributeType = 20;

// ---- writer ----

// The tagged model PlanTaggedModel plans, as one string.
bool PlanToString(std::string_view model, const std::vector<SerializedNodeTag>& nodes,
                  const std::vector<ModelMetadataEntry>& model_entries, std::string* tagged_model, std::string* error) {
  TaggedModelPlan plan;
  if (!PlanTaggedModel(model, nodes, model_entries, &plan, error)) return false;
  *tagged_model = plan.ToString();
  return true;
}

std::string VarintField(uint32_t number, uint64_t value) {
  std::string out;
  wire::AppendVarint(&out, static_cast<uint64_t>(number) << 3);
  wire::AppendVarint(&out, value);
  return out;
}

std::string BytesField(uint32_t number, std::string_view payload) {
  std::string out;
  wire::AppendLengthDelimited(&out, number, payload);
  return out;
}

std::string NodeProto(std::string_view op_type, std::string_view name, const std::string& attributes = "") {
  return BytesField(kNodeInput, "x") + BytesField(kNodeOutput, std::string(name) + "_out") +
         BytesField(kNodeName, name) + BytesField(kNodeOpType, op_type) + attributes;
}

std::string GraphAttribute(std::string_view name, const std::string& graph) {
  return BytesField(kNodeAttribute, BytesField(kAttributeName, name) + BytesField(kAttributeGraph, graph) +
                                        VarintField(kAttributeType, 5 /* GRAPH */));
}

std::string GraphProto(const std::vector<std::string>& nodes, const std::string& rest = "") {
  std::string graph;
  for (const std::string& node : nodes) graph += BytesField(kGraphNode, node);
  return graph + rest;
}

// A TensorProto long enough for two-byte length varints, holding every byte value.
std::string Initializer() {
  std::string raw;
  for (int i = 0; i < 300; ++i) raw.push_back(static_cast<char>(i & 0xFF));
  return VarintField(1, 75) + VarintField(2, 1) + BytesField(8, "w") + BytesField(9, raw);
}

std::string ModelProto(const std::string& graph, const std::string& after_graph = "") {
  return VarintField(kModelIrVersion, 8) + BytesField(kModelGraph, graph) +
         BytesField(kModelOpsetImport, VarintField(2, 17)) + after_graph;
}

// ---- reader ----

// Every field of a message (wire::Reader, the reader the tool and the plugin use).
std::vector<wire::Field> Decode(std::string_view bytes) {
  std::vector<wire::Field> fields;
  wire::Reader reader(bytes);
  wire::Field field;
  while (!reader.done()) {
    if (!reader.Next(&field)) {
      ADD_FAILURE() << "malformed message";
      return fields;
    }
    fields.push_back(field);
  }
  return fields;
}

std::vector<uint32_t> FieldNumbers(std::string_view message) {
  std::vector<uint32_t> numbers;
  for (const wire::Field& field : Decode(message)) numbers.push_back(field.number);
  return numbers;
}

std::vector<std::string> Payloads(std::string_view message, uint32_t number) {
  std::vector<std::string> payloads;
  for (const wire::Field& field : Decode(message)) {
    if (field.number == number) payloads.push_back(std::string(field.payload));
  }
  return payloads;
}

std::string Only(std::string_view message, uint32_t number) {
  std::vector<std::string> payloads = Payloads(message, number);
  EXPECT_EQ(payloads.size(), 1u) << "field " << number;
  return payloads.empty() ? "" : payloads.front();
}

using Entries = std::vector<std::pair<std::string, std::string>>;

// The StringStringEntryProto list in field `number` of `message`.
Entries MetadataEntries(std::string_view message, uint32_t number) {
  Entries entries;
  for (const std::string& entry : Payloads(message, number)) {
    EXPECT_EQ(FieldNumbers(entry), (std::vector<uint32_t>{kEntryKey, kEntryValue}));
    entries.emplace_back(Only(entry, kEntryKey), Only(entry, kEntryValue));
  }
  return entries;
}

struct SeenNode {
  std::string op_type;
  std::string name;
  Entries metadata;
};

// Every NodeProto of `graph` in pre-order: a node, then its graph attributes' nodes.
void CollectNodes(std::string_view graph, std::vector<SeenNode>* out) {
  for (const std::string& node : Payloads(graph, kGraphNode)) {
    out->push_back({Only(node, kNodeOpType), Only(node, kNodeName), MetadataEntries(node, kNodeMetadataProps)});
    for (const std::string& attribute : Payloads(node, kNodeAttribute)) {
      for (const std::string& body : Payloads(attribute, kAttributeGraph)) CollectNodes(body, out);
    }
  }
}

std::vector<SeenNode> NodesOf(std::string_view model) {
  std::vector<SeenNode> nodes;
  CollectNodes(Only(model, kModelGraph), &nodes);
  return nodes;
}

// Re-encodes `message` without hiertag's additions; the test writes canonical
// varints, so the result equals the input model byte for byte if nothing else changed.
std::string StripGraph(std::string_view graph);

std::string StripNode(std::string_view node) {
  std::string out;
  for (const wire::Field& field : Decode(node)) {
    if (field.number == kNodeMetadataProps) continue;
    if (field.number == kNodeAttribute) {
      std::string attribute;
      for (const wire::Field& inner : Decode(field.payload)) {
        attribute += inner.number == kAttributeGraph && inner.wire_type == 2
                         ? BytesField(kAttributeGraph, StripGraph(inner.payload))
                         : inner.raw;
      }
      out += BytesField(kNodeAttribute, attribute);
    } else {
      out += field.raw;
    }
  }
  return out;
}

std::string StripGraph(std::string_view graph) {
  std::string out;
  for (const wire::Field& field : Decode(graph)) {
    out += field.number == kGraphNode && field.wire_type == 2 ? BytesField(kGraphNode, StripNode(field.payload))
                                                              : field.raw;
  }
  return out;
}

std::string StripModel(std::string_view model) {
  std::string out;
  for (const wire::Field& field : Decode(model)) {
    if (field.number == kModelMetadataProps) continue;
    out += field.number == kModelGraph ? BytesField(kModelGraph, StripGraph(field.payload)) : field.raw;
  }
  return out;
}

const std::vector<ModelMetadataEntry> kModelEntries = {
    {std::string(kModuleTableKey), R"({"/Net":{"path":"","class":"pkg.Net"}})"},
    {std::string(kFormatVersionKey), std::string(kFormatVersion)},
};

// Two top-level nodes, then a Loop whose body holds two nodes, then one more node.
std::string LoopModel(const std::string& after_graph = "") {
  std::string body =
      GraphProto({NodeProto("Add", "/layer.1/Add"), NodeProto("Mul", "/layer.1/Mul")}, BytesField(kGraphName, "body"));
  return ModelProto(
      GraphProto({NodeProto("Relu", "/layer.0/Relu"), NodeProto("Constant", "/Constant"),
                  NodeProto("Loop", "/layer.1/Loop", GraphAttribute("body", body)), NodeProto("Identity", "/Identity")},
                 BytesField(kGraphName, "main_graph") + BytesField(kGraphInitializer, Initializer())),
      after_graph);
}

std::vector<SerializedNodeTag> LoopModelTags() {
  return {{"Relu", "/Net/Layer.0", {}, {}},     {"Constant", "/Net", {}, {}},    {"Loop", "/Net/Layer.1", {}, {}},
          {"Add", "/Net/Layer.1/Attn", {}, {}}, {"Mul", "/Net/Layer.1", {}, {}}, {"Identity", "/Net", {}, {}}};
}

TEST(ProtoTaggingTest, EveryNodeGainsItsTag) {
  // Check that each top-level NodeProto gains exactly one hierarchy_tag entry with its tag.
  std::string model = ModelProto(GraphProto({NodeProto("Relu", "/l0/Relu"), NodeProto("Sigmoid", "/l1/Sigmoid")}));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, {{"Relu", "/Net/Layer.0", {}, {}}, {"Sigmoid", "/Net/Layer.1", {}, {}}},
                           kModelEntries, &tagged, &error))
      << error;
  std::vector<SeenNode> nodes = NodesOf(tagged);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].op_type, "Relu");
  EXPECT_EQ(nodes[0].metadata, (Entries{{"hierarchy_tag", "/Net/Layer.0"}}));
  EXPECT_EQ(nodes[1].op_type, "Sigmoid");
  EXPECT_EQ(nodes[1].metadata, (Entries{{"hierarchy_tag", "/Net/Layer.1"}}));
}

TEST(ProtoTaggingTest, NodeBytesArePreservedBeforeTheTag) {
  // Check that a node without graph attributes keeps its bytes, followed only by field 9.
  std::string node = NodeProto("Relu", "/l0/Relu");
  std::string model = ModelProto(GraphProto({node}));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, {{"Relu", "/Net", {}, {}}}, {}, &tagged, &error)) << error;
  std::string tagged_node = Only(Only(tagged, kModelGraph), kGraphNode);
  ASSERT_GT(tagged_node.size(), node.size());
  EXPECT_EQ(tagged_node.substr(0, node.size()), node);
  EXPECT_EQ(FieldNumbers(tagged_node.substr(node.size())), (std::vector<uint32_t>{kNodeMetadataProps}));
}

TEST(ProtoTaggingTest, LoopBodyNodesAreTaggedInPreOrder) {
  // Check that a Loop's body nodes take the tags right after the Loop, before the next top-level node.
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(), LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  std::vector<SeenNode> nodes = NodesOf(tagged);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"/layer.0/Relu", "/Net/Layer.0"}, {"/Constant", "/Net"},
      {"/layer.1/Loop", "/Net/Layer.1"}, {"/layer.1/Add", "/Net/Layer.1/Attn"},
      {"/layer.1/Mul", "/Net/Layer.1"},  {"/Identity", "/Net"}};
  ASSERT_EQ(nodes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(nodes[i].name, expected[i].first) << i;
    EXPECT_EQ(nodes[i].metadata, (Entries{{"hierarchy_tag", expected[i].second}})) << i;
  }
}

TEST(ProtoTaggingTest, BodyNodesStayInsideTheBody) {
  // Check that the body nodes are tagged in place: the top-level graph still has four nodes, the body two.
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(), LoopModelTags(), {}, &tagged, &error)) << error;
  std::vector<std::string> top = Payloads(Only(tagged, kModelGraph), kGraphNode);
  ASSERT_EQ(top.size(), 4u);
  std::string attribute = Only(top[2], kNodeAttribute);
  EXPECT_EQ(FieldNumbers(attribute), (std::vector<uint32_t>{kAttributeName, kAttributeGraph, kAttributeType}));
  std::string body = Only(attribute, kAttributeGraph);
  EXPECT_EQ(Payloads(body, kGraphNode).size(), 2u);
  EXPECT_EQ(Only(body, kGraphName), "body");
}

TEST(ProtoTaggingTest, SharedNodeGetsSharedWithEntry) {
  // Check that a node with shared_with gets a second entry holding a JSON array of the tags.
  std::string model = ModelProto(GraphProto({NodeProto("Shape", "/l0/Shape"), NodeProto("Relu", "/l1/Relu")}));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(
      model, {{"Shape", "/Net/Layer.0", {"/Net/Layer.1", "/Net/Layer.2"}, {}}, {"Relu", "/Net/Layer.1", {}, {}}}, {},
      &tagged, &error))
      << error;
  std::vector<SeenNode> nodes = NodesOf(tagged);
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].metadata, (Entries{{"hierarchy_tag", "/Net/Layer.0"},
                                        {"hiertag.shared_with", R"(["/Net/Layer.1","/Net/Layer.2"])"}}));
  EXPECT_EQ(nodes[1].metadata, (Entries{{"hierarchy_tag", "/Net/Layer.1"}}));
}

TEST(ProtoTaggingTest, UnsharedNodeGetsNoSharedWithEntry) {
  // Check that an empty shared_with writes no hiertag.shared_with entry.
  std::string model = ModelProto(GraphProto({NodeProto("Shape", "/l0/Shape")}));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, {{"Shape", "/Net/Layer.0", {}, {}}}, {}, &tagged, &error)) << error;
  std::string node = Only(Only(tagged, kModelGraph), kGraphNode);
  EXPECT_EQ(Payloads(node, kNodeMetadataProps).size(), 1u);
  EXPECT_EQ(tagged.find("hiertag.shared_with"), std::string::npos);
}

TEST(ProtoTaggingTest, SharedWithTagsAreJsonQuoted) {
  // Check that a tag holding a '"' or '\' is JSON-escaped inside the shared_with array.
  std::string model = ModelProto(GraphProto({NodeProto("Shape", "/l0/Shape")}));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, {{"Shape", "/Net", {"/Net/Odd[a\"b\\c]"}, {}}}, {}, &tagged, &error)) << error;
  std::vector<SeenNode> nodes = NodesOf(tagged);
  ASSERT_EQ(nodes.size(), 1u);
  ASSERT_EQ(nodes[0].metadata.size(), 2u);
  EXPECT_EQ(nodes[0].metadata[1].second, R"(["/Net/Odd[a\"b\\c]"])");
}

TEST(ProtoTaggingTest, ModelEntriesGoBeforeHigherFields) {
  // Check that the model's field-14 entries are written before a field 20 that follows the graph.
  std::string training_info = BytesField(kModelTrainingInfo, VarintField(1, 3));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(training_info), LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  EXPECT_EQ(FieldNumbers(tagged),
            (std::vector<uint32_t>{kModelIrVersion, kModelGraph, kModelOpsetImport, kModelMetadataProps,
                                   kModelMetadataProps, kModelTrainingInfo}));
  EXPECT_EQ(MetadataEntries(tagged, kModelMetadataProps),
            (Entries{{"hiertag.modules", R"({"/Net":{"path":"","class":"pkg.Net"}})"},
                     {"hiertag.format_version", std::string(kFormatVersion)}}));
  EXPECT_EQ(Decode(tagged).back().raw, training_info);
}

TEST(ProtoTaggingTest, ModelEntriesGoLastWithoutHigherFields) {
  // Check that without fields above 14 the model entries are appended at the end.
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(), LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  EXPECT_EQ(FieldNumbers(tagged), (std::vector<uint32_t>{kModelIrVersion, kModelGraph, kModelOpsetImport,
                                                         kModelMetadataProps, kModelMetadataProps}));
}

TEST(ProtoTaggingTest, ExistingModelMetadataIsKeptBeforeOurs) {
  // Check that a model's own field-14 entry stays in place and ours follow it, before field 20.
  std::string own = BytesField(kModelMetadataProps, BytesField(kEntryKey, "author") + BytesField(kEntryValue, "me"));
  std::string training_info = BytesField(kModelTrainingInfo, VarintField(1, 3));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(own + training_info), LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  EXPECT_EQ(MetadataEntries(tagged, kModelMetadataProps),
            (Entries{{"author", "me"},
                     {"hiertag.modules", R"({"/Net":{"path":"","class":"pkg.Net"}})"},
                     {"hiertag.format_version", std::string(kFormatVersion)}}));
  EXPECT_EQ(FieldNumbers(tagged).back(), kModelTrainingInfo);
}

TEST(ProtoTaggingTest, AllOtherBytesArePreserved) {
  // Check that removing the added entries gives back the input model byte for byte.
  std::string training_info = BytesField(kModelTrainingInfo, VarintField(1, 3));
  std::string model = LoopModel(training_info);
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  EXPECT_NE(tagged, model);
  EXPECT_EQ(StripModel(tagged), model);
}

TEST(ProtoTaggingTest, InitializerIsByteIdentical) {
  // Check that the graph's initializer (field 5) is copied through unchanged.
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(), LoopModelTags(), kModelEntries, &tagged, &error)) << error;
  std::string graph = Only(tagged, kModelGraph);
  EXPECT_EQ(Only(graph, kGraphInitializer), Initializer());
  EXPECT_EQ(Only(graph, kGraphName), "main_graph");
}

TEST(ProtoTaggingTest, OpTypeMismatchFailsNamingBoth) {
  // Check that a node whose op_type differs from the expected one fails, naming both, output untouched.
  std::string model = ModelProto(GraphProto({NodeProto("Relu", "/l0/Relu"), NodeProto("Sigmoid", "/l1/Sigmoid")}));
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(model, {{"Relu", "/Net/Layer.0", {}, {}}, {"Tanh", "/Net/Layer.1", {}, {}}}, kModelEntries,
                            &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_NE(error.find("Sigmoid"), std::string::npos) << error;
  EXPECT_NE(error.find("Tanh"), std::string::npos) << error;
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
}

TEST(ProtoTaggingTest, OpTypeMismatchInsideBodyFails) {
  // Check that a body node out of step with the pre-order list fails.
  std::vector<SerializedNodeTag> tags = LoopModelTags();
  std::swap(tags[3], tags[4]);  // Mul expected where the body holds Add
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(LoopModel(), tags, kModelEntries, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_NE(error.find("Add"), std::string::npos) << error;
  EXPECT_NE(error.find("Mul"), std::string::npos) << error;
}

TEST(ProtoTaggingTest, TooFewTagsFail) {
  // Check that a model with more nodes than tags fails and leaves the output untouched.
  std::vector<SerializedNodeTag> tags = LoopModelTags();
  tags.pop_back();
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(LoopModel(), tags, kModelEntries, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_FALSE(error.empty());
}

TEST(ProtoTaggingTest, TooManyTagsFail) {
  // Check that a tag list longer than the model's nodes fails and leaves the output untouched.
  std::vector<SerializedNodeTag> tags = LoopModelTags();
  tags.push_back({"Relu", "/Net", {}, {}});
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(LoopModel(), tags, kModelEntries, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_FALSE(error.empty());
}

TEST(ProtoTaggingTest, TruncatedModelFailsCleanly) {
  // Check that every cut inside a field of a valid model is rejected without touching the output.
  std::string model = LoopModel(BytesField(kModelTrainingInfo, VarintField(1, 3)));
  // A cut between two top-level fields leaves a well-formed ModelProto: not a truncation the
  // wire format can reveal, so those sizes are left out.
  std::set<size_t> field_boundaries;
  size_t end = 0;
  for (const wire::Field& field : Decode(model)) field_boundaries.insert(end += field.raw.size());
  for (size_t size = 1; size < model.size(); ++size) {
    if (field_boundaries.count(size)) continue;
    std::string tagged = "untouched", error;
    EXPECT_FALSE(PlanToString(model.substr(0, size), LoopModelTags(), kModelEntries, &tagged, &error))
        << "accepted a model cut to " << size << " of " << model.size() << " bytes";
    EXPECT_EQ(tagged, "untouched");
    EXPECT_FALSE(error.empty()) << size;
  }
}

TEST(ProtoTaggingTest, WholeModelIsAccepted) {
  // Check that the untruncated model used by the truncation test is accepted.
  std::string tagged, error;
  EXPECT_TRUE(PlanToString(LoopModel(BytesField(kModelTrainingInfo, VarintField(1, 3))), LoopModelTags(), kModelEntries,
                           &tagged, &error))
      << error;
}

TEST(ProtoTaggingTest, ModelWithoutGraphFails) {
  // Check that bytes holding no graph field are rejected.
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(VarintField(kModelIrVersion, 8), {}, kModelEntries, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_FALSE(error.empty());
}

TEST(ProtoTaggingTest, NodeWithoutOpTypeFails) {
  // Check that a NodeProto without op_type is rejected rather than tagged blindly.
  std::string node = BytesField(kNodeInput, "x") + BytesField(kNodeName, "/n");
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(ModelProto(GraphProto({node})), {{"Relu", "/Net", {}, {}}}, {}, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_FALSE(error.empty());
}

TEST(ProtoTaggingTest, MalformedNodeOrAttributeFails) {
  // Check that a node or an attribute whose payload is not a message is rejected, even
  // inside well-formed framing: an attribute without a graph is copied, not rebuilt,
  // but it is still read.
  const std::string not_a_message = "\xff";
  for (const std::string& node :
       {NodeProto("Relu", "/n") + not_a_message, NodeProto("Relu", "/n", BytesField(kNodeAttribute, not_a_message))}) {
    std::string tagged = "untouched", error;
    EXPECT_FALSE(
        PlanToString(ModelProto(GraphProto({node})), {{"Relu", "/Net", {}, {}, {"/n_out"}}}, {}, &tagged, &error));
    EXPECT_EQ(tagged, "untouched");
    EXPECT_NE(error.find("not well-formed"), std::string::npos) << error;
  }
}

TEST(ProtoTaggingTest, AttributeWithoutGraphIsCopiedAsItIs) {
  // Check that a node's other attributes keep their bytes, their order and their place.
  std::string alpha = BytesField(kNodeAttribute, BytesField(kAttributeName, "alpha") + VarintField(kAttributeType, 1));
  std::string node = NodeProto("LeakyRelu", "/n", alpha + alpha);
  std::string tagged, error;
  ASSERT_TRUE(
      PlanToString(ModelProto(GraphProto({node})), {{"LeakyRelu", "/Net", {}, {}, {"/n_out"}}}, {}, &tagged, &error))
      << error;
  EXPECT_NE(tagged.find(node), std::string::npos);
}

TEST(ProtoTaggingTest, NestedBodiesAreRebuiltByteForByte) {
  // Check the whole output against one written by hand: an If whose then-branch holds a
  // Loop with a body of its own, an else-branch, plain attributes after the graphs, and a
  // node after the If. Every node ends with its hierarchy_tag entry, nothing else moves.
  std::string alpha = BytesField(kNodeAttribute, BytesField(kAttributeName, "alpha") + VarintField(kAttributeType, 1));
  auto model_of = [&](bool tagged) {
    auto tag = [&](std::string_view value) {
      return tagged ? BytesField(kNodeMetadataProps,
                                 BytesField(kEntryKey, kHierarchyTagKey) + BytesField(kEntryValue, value))
                    : std::string();
    };
    std::string inner = NodeProto("Relu", "/inner") + tag("/Net/Inner");
    std::string loop =
        NodeProto("Loop", "/loop", GraphAttribute("body", GraphProto({inner})) + alpha) + tag("/Net/Loop");
    std::string other = NodeProto("Neg", "/other") + tag("/Net/Other");
    std::string branch = NodeProto("If", "/if",
                                   GraphAttribute("then_branch", GraphProto({loop})) +
                                       GraphAttribute("else_branch", GraphProto({other})) + alpha) +
                         tag("/Net");
    std::string after = NodeProto("Add", "/after", alpha) + tag("/Net/After");
    return ModelProto(GraphProto({branch, after}));
  };
  std::vector<SerializedNodeTag> tags = {{"Add", "/Net/After", {}, {}, {"/after_out"}},
                                         {"Relu", "/Net/Inner", {}, {}, {"/inner_out"}},
                                         {"If", "/Net", {}, {}, {"/if_out"}},
                                         {"Neg", "/Net/Other", {}, {}, {"/other_out"}},
                                         {"Loop", "/Net/Loop", {}, {}, {"/loop_out"}}};
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model_of(false), tags, {}, &tagged, &error)) << error;
  EXPECT_EQ(tagged, model_of(true));
}

// The Loop model's tags with each node's outputs (NodeProto writes "<name>_out"), in another order.
std::vector<SerializedNodeTag> LoopModelTagsByIdentity() {
  return {{"Identity", "/Net", {}, {}, {"/Identity_out"}},
          {"Mul", "/Net/Layer.1", {}, {}, {"/layer.1/Mul_out"}},
          {"Relu", "/Net/Layer.0", {}, {}, {"/layer.0/Relu_out"}},
          {"Loop", "/Net/Layer.1", {}, {}, {"/layer.1/Loop_out"}},
          {"Constant", "/Net", {}, {}, {"/Constant_out"}},
          {"Add", "/Net/Layer.1/Attn", {}, {}, {"/layer.1/Add_out"}}};
}

TEST(ProtoTaggingTest, NodesTakeTheTagsOfTheirOutputsWhateverTheOrder) {
  // Check that with outputs known, each node takes the entry making its outputs, not the one at its place.
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(LoopModel(), LoopModelTagsByIdentity(), kModelEntries, &tagged, &error)) << error;
  std::vector<SeenNode> nodes = NodesOf(tagged);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"/layer.0/Relu", "/Net/Layer.0"}, {"/Constant", "/Net"},
      {"/layer.1/Loop", "/Net/Layer.1"}, {"/layer.1/Add", "/Net/Layer.1/Attn"},
      {"/layer.1/Mul", "/Net/Layer.1"},  {"/Identity", "/Net"}};
  ASSERT_EQ(nodes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(nodes[i].name, expected[i].first) << i;
    EXPECT_EQ(nodes[i].metadata, (Entries{{"hierarchy_tag", expected[i].second}})) << i;
  }
}

TEST(ProtoTaggingTest, NodeWhoseOutputsNoEntryMakesFails) {
  // Check that a node the graph does not know by its outputs stops the plan, naming it.
  std::vector<SerializedNodeTag> tags = LoopModelTagsByIdentity();
  tags[2].outputs = {"/layer.0/Relu_renamed"};
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(LoopModel(), tags, kModelEntries, &tagged, &error));
  EXPECT_EQ(tagged, "untouched");
  EXPECT_EQ(error,
            "the model's Relu node making '/layer.0/Relu_out' has no tag: the graph has no node with those "
            "outputs");
}

TEST(ProtoTaggingTest, SameOutputsWithAnotherOpTypeFail) {
  // Check that identity is outputs and op_type together: a Relu where the graph made a Sigmoid fails.
  std::vector<SerializedNodeTag> tags = LoopModelTagsByIdentity();
  tags[2].op_type = "Sigmoid";
  std::string tagged = "untouched", error;
  EXPECT_FALSE(PlanToString(LoopModel(), tags, kModelEntries, &tagged, &error));
  EXPECT_EQ(error, "node making '/layer.0/Relu_out' is 'Relu' in the model but 'Sigmoid' in the graph");
}

TEST(ProtoTaggingTest, APlanMovedKeepsItsChunksAndAnEmptyPlanWritesNothing) {
  // Check that a plan (its arena holds the written pieces) writes the same
  // model after being moved twice, and that a plan never built writes nothing.
  // (A plan borrows the model's bytes: both models outlive the plans.)
  const std::string model = LoopModel();
  const std::string other = ModelProto(GraphProto({NodeProto("Relu", "/l0/Relu")}));
  TaggedModelPlan plan;
  std::string error;
  EXPECT_EQ(plan.size(), 0u);
  EXPECT_EQ(plan.ToString(), "");
  ASSERT_TRUE(PlanTaggedModel(model, LoopModelTags(), kModelEntries, &plan, &error)) << error;
  std::string written = plan.ToString();
  std::string direct;
  ASSERT_TRUE(PlanToString(model, LoopModelTags(), kModelEntries, &direct, &error)) << error;
  EXPECT_EQ(written, direct);
  TaggedModelPlan moved(std::move(plan));
  TaggedModelPlan assigned;
  ASSERT_TRUE(PlanTaggedModel(other, {{"Relu", "/Net", {}, {}}}, {}, &assigned, &error)) << error;
  assigned = std::move(moved);
  EXPECT_EQ(assigned.size(), written.size());
  EXPECT_EQ(assigned.ToString(), written);
}

TEST(ProtoTaggingTest, WrittenBytesPastTheirReservedSizeAreKeptWhole) {
  // Check that entries far longer than the plan reserved for them (shared_with
  // tags of control characters, each escaped to six bytes in the JSON) are
  // written whole, on every node, in the model's node order.
  const std::string odd(40, '\x01');
  std::string escaped;
  for (size_t i = 0; i < odd.size(); ++i) escaped += "\\u0001";
  std::vector<std::string> names;
  std::vector<std::string> layer_tags;  // what the entries' tags view
  layer_tags.reserve(50);
  std::vector<SerializedNodeTag> tags;
  for (int i = 0; i < 50; ++i) {
    names.push_back("/l" + std::to_string(i) + "/Relu");
    layer_tags.push_back("/Net/Layer." + std::to_string(i));
    tags.push_back({"Relu", layer_tags.back(), {"/Net/" + odd, "/Net/Other" + odd}, {}});
  }
  std::vector<std::string> nodes;
  for (const std::string& name : names) nodes.push_back(NodeProto("Relu", name));
  std::string model = ModelProto(GraphProto(nodes));
  std::string tagged, error;
  ASSERT_TRUE(PlanToString(model, tags, kModelEntries, &tagged, &error)) << error;
  std::vector<SeenNode> seen = NodesOf(tagged);
  ASSERT_EQ(seen.size(), 50u);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(seen[i].name, names[i]);
    EXPECT_EQ(seen[i].metadata,
              (Entries{{"hierarchy_tag", "/Net/Layer." + std::to_string(i)},
                       {"hiertag.shared_with", "[\"/Net/" + escaped + "\",\"/Net/Other" + escaped + "\"]"}}));
  }
}

TEST(ProtoTaggingTest, APlansMemoryIsReturnedWithIt) {
  // Check that every page a plan mapped, a failed one's too, is unmapped when it goes.
  const std::string model = LoopModel();
  size_t before = MappedBytes();
  {
    TaggedModelPlan plan;
    std::string error;
    ASSERT_TRUE(PlanTaggedModel(model, LoopModelTags(), kModelEntries, &plan, &error)) << error;
    EXPECT_GT(MappedBytes(), before);
    EXPECT_FALSE(PlanTaggedModel(model, {{"Relu", "/Net", {}, {}}}, kModelEntries, &plan, &error));
  }
  EXPECT_EQ(MappedBytes(), before);
}

TEST(ProtoTaggingTest, AFailedPlanLeavesThePlanItWasGiven) {
  // Check that planning into a plan that holds one keeps it when it fails.
  const std::string model = LoopModel();
  TaggedModelPlan plan;
  std::string error;
  ASSERT_TRUE(PlanTaggedModel(model, LoopModelTags(), kModelEntries, &plan, &error)) << error;
  std::string written = plan.ToString();
  EXPECT_FALSE(PlanTaggedModel(model, {{"Relu", "/Net", {}, {}}}, kModelEntries, &plan, &error));
  EXPECT_EQ(plan.ToString(), written);
}

}  // namespace
}  // namespace hiertag
