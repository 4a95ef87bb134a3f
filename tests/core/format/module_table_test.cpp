// Tests of the module table: tags, tag owners, sibling disambiguation, lookups, JSON.
#include "hiertag/core/format/module_table.h"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "hiertag/core/format/tag_format.h"

namespace hiertag {
namespace {

// Tag of the module at `path` (which must have a segment).
std::string TagAt(const ModuleTable& table, std::string_view path) {
  int index = table.FindByPath(path);
  EXPECT_GE(index, 0) << "no module '" << path << "'";
  if (index < 0) return "";
  EXPECT_TRUE(table.at(index).has_segment) << path;
  return table.at(index).tag;
}

// Every tagged module's tag must be distinct and follow the grammar.
void ExpectTagsUniqueAndWellFormed(const ModuleTable& table) {
  std::set<std::string> tags;
  int tagged = 0;
  for (int i = 0; i < table.size(); ++i) {
    if (!table.at(i).has_segment) {
      EXPECT_TRUE(table.at(i).tag.empty()) << table.at(i).path;
      continue;
    }
    ++tagged;
    tags.insert(table.at(i).tag);
    std::string error;
    EXPECT_TRUE(ParseTag(table.at(i).tag, &error).has_value()) << table.at(i).tag << ": " << error;
  }
  EXPECT_EQ(static_cast<int>(tags.size()), tagged);
}

ModuleTable BertTable() {
  ModuleTable table;
  table.Add("", "transformers.BertModel", "BertModel", true);
  table.Add("embeddings", "transformers.BertEmbeddings", "BertEmbeddings", true);
  table.Add("embeddings.LayerNorm", "torch.nn.modules.normalization.LayerNorm", "LayerNorm", false);
  table.Add("encoder", "transformers.BertEncoder", "BertEncoder", true);
  table.Add("encoder.layer", "torch.nn.modules.container.ModuleList", "ModuleList", false);
  table.Add("encoder.layer.0", "transformers.BertLayer", "BertLayer", true);
  table.Add("encoder.layer.0.attention", "transformers.BertAttention", "BertAttention", true);
  table.Add("encoder.layer.0.attention.self", "transformers.BertSdpaSelfAttention", "BertSdpaSelfAttention", true);
  table.Add("encoder.layer.0.attention.self.query", "torch.nn.modules.linear.Linear", "Linear", false);
  table.Add("encoder.layer.1", "transformers.BertLayer", "BertLayer", true);
  table.Finalize();
  return table;
}

ModuleTable Gpt2Table() {
  ModuleTable table;
  table.Add("", "transformers.GPT2Model", "GPT2Model", true);
  table.Add("h", "torch.nn.modules.container.ModuleList", "ModuleList", false);
  for (std::string block : {"h.0", "h.1"}) {
    table.Add(block, "transformers.GPT2Block", "GPT2Block", true);
    table.Add(block + ".ln_1", "torch.nn.modules.normalization.LayerNorm", "LayerNorm", false);
    table.Add(block + ".attn", "transformers.GPT2Attention", "GPT2Attention", true);
    table.Add(block + ".attn.c_attn", "transformers.Conv1D", "Conv1D", true);
    table.Add(block + ".attn.c_proj", "transformers.Conv1D", "Conv1D", true);
    table.Add(block + ".attn.attn_dropout", "torch.nn.modules.dropout.Dropout", "Dropout", false);
    table.Add(block + ".mlp", "transformers.GPT2MLP", "GPT2MLP", true);
    table.Add(block + ".mlp.c_fc", "transformers.Conv1D", "Conv1D", true);
    table.Add(block + ".mlp.c_proj", "transformers.Conv1D", "Conv1D", true);
  }
  table.Finalize();
  return table;
}

ModuleTable ResNetTable() {
  ModuleTable table;
  table.Add("", "torchvision.models.resnet.ResNet", "ResNet", true);
  table.Add("conv1", "torch.nn.modules.conv.Conv2d", "Conv2d", false);
  table.Add("layer1", "torch.nn.modules.container.Sequential", "Sequential", false);
  table.Add("layer1.0", "torchvision.models.resnet.Bottleneck", "Bottleneck", true);
  table.Add("layer1.0.conv1", "torch.nn.modules.conv.Conv2d", "Conv2d", false);
  table.Add("layer2", "torch.nn.modules.container.Sequential", "Sequential", false);
  table.Add("layer2.0", "torchvision.models.resnet.Bottleneck", "Bottleneck", true);
  table.Add("layer2.1", "torchvision.models.resnet.Bottleneck", "Bottleneck", true);
  table.Finalize();
  return table;
}

TEST(ModuleTableTest, HfStyleTagsFollowTheModuleTree) {
  // Check that tagged modules get parent tag + "/Class" or "/Class.N" (list index) segments.
  ModuleTable table = BertTable();
  EXPECT_EQ(TagAt(table, ""), "/BertModel");
  EXPECT_EQ(TagAt(table, "embeddings"), "/BertModel/BertEmbeddings");
  EXPECT_EQ(TagAt(table, "encoder"), "/BertModel/BertEncoder");
  EXPECT_EQ(TagAt(table, "encoder.layer.0"), "/BertModel/BertEncoder/BertLayer.0");
  EXPECT_EQ(TagAt(table, "encoder.layer.1"), "/BertModel/BertEncoder/BertLayer.1");
  EXPECT_EQ(TagAt(table, "encoder.layer.0.attention"), "/BertModel/BertEncoder/BertLayer.0/BertAttention");
  EXPECT_EQ(TagAt(table, "encoder.layer.0.attention.self"),
            "/BertModel/BertEncoder/BertLayer.0/BertAttention/BertSdpaSelfAttention");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, ModuleTreeParentsAndTagDepths) {
  // Check that parents follow the module tree (filtered containers included) and depths the tag tree.
  ModuleTable table = BertTable();
  const int root = table.FindByPath("");
  const int encoder = table.FindByPath("encoder");
  const int list = table.FindByPath("encoder.layer");
  const int layer0 = table.FindByPath("encoder.layer.0");
  const int attention = table.FindByPath("encoder.layer.0.attention");
  EXPECT_EQ(root, 0);
  EXPECT_EQ(table.at(root).parent, -1);
  EXPECT_EQ(table.at(list).parent, encoder);
  EXPECT_EQ(table.at(layer0).parent, list);
  EXPECT_EQ(table.at(root).tag_depth, 0);
  EXPECT_EQ(table.at(encoder).tag_depth, 1);
  EXPECT_EQ(table.at(list).tag_depth, 1);
  EXPECT_EQ(table.at(layer0).tag_depth, 2);
  EXPECT_EQ(table.at(attention).tag_depth, 3);
}

TEST(ModuleTableTest, FilteredModuleCollapsesOntoNearestTaggedAncestor) {
  // Check that a filtered torch.nn module has no tag of its own and is owned by its nearest tagged ancestor.
  ModuleTable table = BertTable();
  const int query = table.FindByPath("encoder.layer.0.attention.self.query");
  const int self = table.FindByPath("encoder.layer.0.attention.self");
  const int list = table.FindByPath("encoder.layer");
  const int encoder = table.FindByPath("encoder");
  EXPECT_FALSE(table.at(query).has_segment);
  EXPECT_TRUE(table.at(query).tag.empty());
  EXPECT_EQ(table.TagOwner(query), self);
  EXPECT_EQ(table.TagOf(query), "/BertModel/BertEncoder/BertLayer.0/BertAttention/BertSdpaSelfAttention");
  EXPECT_EQ(table.TagOwner(list), encoder);
  EXPECT_EQ(table.TagOf(list), "/BertModel/BertEncoder");
  EXPECT_EQ(table.TagOf(table.FindByPath("embeddings.LayerNorm")), "/BertModel/BertEmbeddings");
}

TEST(ModuleTableTest, TaggedModuleOwnsItself) {
  // Check that a module with a segment is its own tag owner.
  ModuleTable table = BertTable();
  const int self = table.FindByPath("encoder.layer.0.attention.self");
  EXPECT_EQ(table.TagOwner(self), self);
  EXPECT_EQ(table.TagOf(self), table.at(self).tag);
}

TEST(ModuleTableTest, RootAlwaysHasSegment) {
  // Check that the root gets a segment even when added as filtered.
  ModuleTable table;
  table.Add("", "torch.nn.modules.container.Sequential", "Sequential", false);
  table.Add("0", "torch.nn.modules.linear.Linear", "Linear", false);
  table.Finalize();
  EXPECT_TRUE(table.at(0).has_segment);
  EXPECT_EQ(table.at(0).tag, "/Sequential");
  EXPECT_EQ(table.TagOf(1), "/Sequential");
}

TEST(ModuleTableTest, SameClassSiblingsAreQualified) {
  // Check that GPT-2's two Conv1D children of one module get Class[attr] segments.
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(TagAt(table, "h.0"), "/GPT2Model/GPT2Block.0");
  EXPECT_EQ(TagAt(table, "h.0.attn"), "/GPT2Model/GPT2Block.0/GPT2Attention");
  EXPECT_EQ(TagAt(table, "h.0.attn.c_attn"), "/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_attn]");
  EXPECT_EQ(TagAt(table, "h.0.attn.c_proj"), "/GPT2Model/GPT2Block.0/GPT2Attention/Conv1D[c_proj]");
  EXPECT_EQ(TagAt(table, "h.0.mlp.c_fc"), "/GPT2Model/GPT2Block.0/GPT2MLP/Conv1D[c_fc]");
  EXPECT_EQ(TagAt(table, "h.0.mlp.c_proj"), "/GPT2Model/GPT2Block.0/GPT2MLP/Conv1D[c_proj]");
  EXPECT_EQ(TagAt(table, "h.1.attn.c_proj"), "/GPT2Model/GPT2Block.1/GPT2Attention/Conv1D[c_proj]");
  EXPECT_EQ(table.TagOf(table.FindByPath("h.0.ln_1")), "/GPT2Model/GPT2Block.0");
  EXPECT_EQ(table.TagOf(table.FindByPath("h.1.attn.attn_dropout")), "/GPT2Model/GPT2Block.1/GPT2Attention");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, LoneClassChildIsNotQualified) {
  // Check that a child whose class no sibling shares keeps the plain segment.
  ModuleTable table;
  table.Add("", "transformers.GPT2Model", "GPT2Model", true);
  table.Add("attn", "transformers.GPT2Attention", "GPT2Attention", true);
  table.Add("attn.c_attn", "transformers.Conv1D", "Conv1D", true);
  table.Add("attn.dropout", "torch.nn.modules.dropout.Dropout", "Dropout", false);
  table.Finalize();
  EXPECT_EQ(TagAt(table, "attn.c_attn"), "/GPT2Model/GPT2Attention/Conv1D");
}

TEST(ModuleTableTest, CousinsUnderFilteredContainersAreQualified) {
  // Check that ResNet's layer1.0 / layer2.0 (Sequential parents filtered) get Class[relative.path].
  ModuleTable table = ResNetTable();
  EXPECT_EQ(TagAt(table, "layer1.0"), "/ResNet/Bottleneck[layer1.0]");
  EXPECT_EQ(TagAt(table, "layer2.0"), "/ResNet/Bottleneck[layer2.0]");
  EXPECT_EQ(table.TagOf(table.FindByPath("layer1.0.conv1")), "/ResNet/Bottleneck[layer1.0]");
  EXPECT_EQ(table.TagOf(table.FindByPath("layer2")), "/ResNet");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, CousinWithUniqueSegmentIsNotQualified) {
  // Check that layer2.1, whose plain segment no tag-tree sibling shares, keeps "Class.N".
  ModuleTable table = ResNetTable();
  EXPECT_EQ(TagAt(table, "layer2.1"), "/ResNet/Bottleneck.1");
}

TEST(ModuleTableTest, QualifierIsRelativeToTagTreeParent) {
  // Check that the qualifier is the path relative to a non-root tag-tree parent, containers included.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Add("block", "pkg.Block", "Block", true);
  table.Add("block.seq", "torch.nn.modules.container.Sequential", "Sequential", false);
  table.Add("block.seq.0", "pkg.Expert", "Expert", true);
  table.Add("block.list", "torch.nn.modules.container.ModuleList", "ModuleList", false);
  table.Add("block.list.0", "pkg.Expert", "Expert", true);
  table.Finalize();
  EXPECT_EQ(TagAt(table, "block.seq.0"), "/Net/Block/Expert[seq.0]");
  EXPECT_EQ(TagAt(table, "block.list.0"), "/Net/Block/Expert[list.0]");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, QualifierEscapesReservedCharacters) {
  // Check that a ModuleDict key holding '/' or '[' is percent-escaped in the qualifier.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Add("experts", "torch.nn.modules.container.ModuleDict", "ModuleDict", false);
  table.Add("experts.a/b", "pkg.Expert", "Expert", true);
  table.Add("experts.a[c]", "pkg.Expert", "Expert", true);
  table.Finalize();
  const std::string slash = TagAt(table, "experts.a/b");
  EXPECT_EQ(slash, "/Net/Expert[experts.a%2Fb]");
  EXPECT_EQ(TagAt(table, "experts.a[c]"), "/Net/Expert[experts.a%5Bc%5D]");
  EXPECT_EQ(ParentTag(slash), "/Net");
  auto parsed = ParseTag(slash);
  ASSERT_TRUE(parsed.has_value());
  ASSERT_EQ(parsed->size(), 2u);
  ASSERT_TRUE((*parsed)[1].qualifier.has_value());
  EXPECT_EQ(*(*parsed)[1].qualifier, "experts.a/b");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, HostileNamesGiveOnePrintableTagEach) {
  // Check that attribute and class names with control characters, quotes and letters beyond ASCII
  // give well-formed tags without a control character, while the records keep the names as they are.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Add("line\nbreak", "pkg.Expert", "Expert", true);
  table.Add("say \"hi\"", "pkg.Expert", "Expert", true);
  table.Add("\xe5\xb1\xa4", "pkg.Expert", "Expert", true);
  table.Add("blocks", "torch.nn.modules.container.ModuleList", "ModuleList", false);
  table.Add("blocks.0", "pkg.esc\x1b[1m", "esc\x1b[1m", true);
  table.Finalize();
  EXPECT_EQ(TagAt(table, "line\nbreak"), "/Net/Expert[line%0Abreak]");
  EXPECT_EQ(TagAt(table, "say \"hi\""), "/Net/Expert[say \"hi\"]");
  EXPECT_EQ(TagAt(table, "\xe5\xb1\xa4"), "/Net/Expert[\xe5\xb1\xa4]");
  EXPECT_EQ(TagAt(table, "blocks.0"), "/Net/esc%1B%5B1m.0");
  EXPECT_EQ(table.at(table.FindByPath("line\nbreak")).path, "line\nbreak");
  ExpectTagsUniqueAndWellFormed(table);
}

TEST(ModuleTableTest, NamesNoTagCanHoldAreRefusedInOneLine) {
  // Check that a class without a name and a qualified name given twice are refused, each with one
  // line naming the module, its control characters escaped.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Add("a.b\n", "pkg.Expert", "Expert", true);
  try {
    table.Add("a.b\n", "pkg.Expert", "Expert", true);
    ADD_FAILURE() << "a repeated qualified name was accepted";
  } catch (const std::invalid_argument& refused) {
    EXPECT_EQ(std::string(refused.what()),
              "hiertag: two modules have the qualified name 'a.b\\n' in named_modules() (an attribute name holding "
              "'.'): the module table names every module by its qualified name");
  }
  try {
    table.Add("c", "pkg.", "", true);
    ADD_FAILURE() << "a class without a name was accepted";
  } catch (const std::invalid_argument& refused) {
    EXPECT_EQ(std::string(refused.what()),
              "hiertag: module 'c' has a class with an empty name (pkg.): its tag "
              "segment needs one");
  }
}

TEST(ModuleTableTest, FilteredModuleNeedsNoClassName) {
  // Check that the class name is asked for only where a segment needs it.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  EXPECT_NO_THROW(table.Add("c", "torch.nn.Whatever", "", false));
}

TEST(ModuleTableTest, FindOwnerOfMemberTakesLongestModulePrefix) {
  // Check that a parameter belongs to the module whose path is its longest dotted prefix.
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(table.FindOwnerOfMember("h.0.attn.c_attn.weight"), table.FindByPath("h.0.attn.c_attn"));
  EXPECT_EQ(table.FindOwnerOfMember("h.1.attn.masked_bias"), table.FindByPath("h.1.attn"));
  EXPECT_EQ(table.FindOwnerOfMember("h.0.ln_1.weight"), table.FindByPath("h.0.ln_1"));
}

TEST(ModuleTableTest, FindOwnerOfMemberDoesNotMatchPartialAtoms) {
  // Check that "c_attnx" is not taken for module "c_attn": ownership goes up to "h.0.attn".
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(table.FindOwnerOfMember("h.0.attn.c_attnx.weight"), table.FindByPath("h.0.attn"));
}

TEST(ModuleTableTest, RootLevelMemberBelongsToRoot) {
  // Check that a member without a module prefix ("bias") belongs to the root.
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(table.FindOwnerOfMember("bias"), 0);
  EXPECT_EQ(table.FindOwnerOfMember("wte.weight"), 0);
}

TEST(ModuleTableTest, FindByPathOfUnknownPathFails) {
  // Check that FindByPath finds added paths and returns -1 for others.
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(table.FindByPath(""), 0);
  EXPECT_EQ(table.FindByPath("h"), 1);
  EXPECT_EQ(table.FindByPath("h.0.nope"), -1);
  EXPECT_EQ(table.FindByPath("h.0.att"), -1);
}

TEST(ModuleTableTest, TagParentSkipsFilteredContainers) {
  // Check that the tag-tree parent of GPT2Block.0 is the root although its module parent is the ModuleList.
  ModuleTable table = Gpt2Table();
  EXPECT_EQ(table.TagParent(table.FindByPath("h.0")), 0);
  EXPECT_EQ(table.TagParent(table.FindByPath("h.0.attn.c_attn")), table.FindByPath("h.0.attn"));
  EXPECT_EQ(table.TagParent(0), -1);
}

TEST(ModuleTableTest, TagChildrenAreTheModulesWhoseTagParentItIs) {
  // Check TagChildren against TagParent for every module of a table with filtered containers: the tagged
  // modules under a filtered ModuleList are the root's, in index order, and a filtered module has none.
  ModuleTable table = BertTable();
  for (int index = 0; index < table.size(); ++index) {
    std::vector<int> expected;
    for (int child = 1; child < table.size(); ++child) {
      if (table.at(child).has_segment && table.TagParent(child) == index) expected.push_back(child);
    }
    EXPECT_EQ(table.TagChildren(index), expected) << table.at(index).path;
  }
  EXPECT_EQ(table.TagChildren(table.FindByPath("encoder")),
            (std::vector<int>{table.FindByPath("encoder.layer.0"), table.FindByPath("encoder.layer.1")}));
  EXPECT_TRUE(table.TagChildren(table.FindByPath("encoder.layer")).empty());
  EXPECT_TRUE(table.TagChildren(table.FindByPath("encoder.layer.1")).empty());
}

TEST(ModuleTableTest, ModuleAncestry) {
  // Check that IsModuleAncestorOrSelf holds downwards and for self, not upwards or across blocks.
  ModuleTable table = Gpt2Table();
  const int list = table.FindByPath("h");
  const int block0 = table.FindByPath("h.0");
  const int c_attn = table.FindByPath("h.0.attn.c_attn");
  EXPECT_TRUE(table.IsModuleAncestorOrSelf(list, block0));
  EXPECT_TRUE(table.IsModuleAncestorOrSelf(0, c_attn));
  EXPECT_TRUE(table.IsModuleAncestorOrSelf(c_attn, c_attn));
  EXPECT_FALSE(table.IsModuleAncestorOrSelf(block0, list));
  EXPECT_FALSE(table.IsModuleAncestorOrSelf(table.FindByPath("h.1"), c_attn));
}

TEST(ModuleTableTest, AddReturnsIndicesInOrder) {
  // Check that a well-ordered sequence of Add calls is accepted and numbered from 0.
  ModuleTable table;
  EXPECT_EQ(table.Add("", "pkg.Net", "Net", true), 0);
  EXPECT_EQ(table.Add("a", "pkg.A", "A", true), 1);
  EXPECT_EQ(table.Add("a.b", "pkg.B", "B", false), 2);
  EXPECT_EQ(table.size(), 3);
}

TEST(ModuleTableTest, AddRejectsDuplicatePath) {
  // Check that adding the same path twice throws.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Add("a", "pkg.A", "A", true);
  EXPECT_THROW(table.Add("a", "pkg.A", "A", true), std::invalid_argument);
  EXPECT_THROW(table.Add("", "pkg.Net", "Net", true), std::invalid_argument);
}

TEST(ModuleTableTest, AddRejectsNonRootFirst) {
  // Check that the first module added must be the root.
  ModuleTable table;
  EXPECT_THROW(table.Add("a", "pkg.A", "A", true), std::invalid_argument);
}

TEST(ModuleTableTest, AddAfterFinalizeIsRejected) {
  // Check that a finalized table takes no more modules.
  ModuleTable table;
  table.Add("", "pkg.Net", "Net", true);
  table.Finalize();
  EXPECT_THROW(table.Add("a", "pkg.A", "A", true), std::logic_error);
}

}  // namespace
}  // namespace hiertag
