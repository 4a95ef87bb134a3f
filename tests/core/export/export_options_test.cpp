// Tests of the environment variables of one export (export_options.h).
#include "hiertag/core/export/export_options.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace hiertag {
namespace {

std::optional<ExportOptions> Read(const std::map<std::string, std::string>& environment, std::string* error) {
  return ReadExportOptions(
      [&](const char* name) {
        auto found = environment.find(name);
        return found == environment.end() ? nullptr : found->second.c_str();
      },
      error);
}

TEST(ExportOptionsTest, UnsetEmptyOrZeroLeavesTheExportAlone) {
  // Check that HIERTAG unset, empty or 0 asks for no tags, whatever the other variables say.
  std::string error;
  for (const auto& environment : std::vector<std::map<std::string, std::string>>{
           {}, {{"HIERTAG", ""}}, {{"HIERTAG", "0"}}, {{"HIERTAG", "0"}, {"HIERTAG_TORCH_MODULES", "bad value"}}}) {
    std::optional<ExportOptions> options = Read(environment, &error);
    ASSERT_TRUE(options) << error;
    EXPECT_FALSE(options->tag);
  }
}

TEST(ExportOptionsTest, OneAsksForTags) {
  // Check that HIERTAG=1 asks for tags with the default options.
  std::string error;
  std::optional<ExportOptions> options = Read({{"HIERTAG", "1"}}, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_TRUE(options->tag);
  EXPECT_FALSE(options->torch_modules.all);
  EXPECT_TRUE(options->torch_modules.classes.empty());
  EXPECT_FALSE(options->report);
}

TEST(ExportOptionsTest, OtherFlagValueIsAnError) {
  // Check that any other HIERTAG value is an error naming the value and the accepted ones.
  std::string error;
  EXPECT_FALSE(Read({{"HIERTAG", "yes"}}, &error));
  EXPECT_EQ(error, "hiertag: HIERTAG='yes' is not valid: use 1 (tag this export) or 0, empty or unset (plain export)");
}

TEST(ExportOptionsTest, TorchModuleListIsParsed) {
  // Check that a comma list of class names (spaces allowed) keeps exactly those torch classes.
  std::string error;
  std::optional<ExportOptions> options =
      Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "LayerNorm, Embedding"}}, &error);
  ASSERT_TRUE(options) << error;
  const TorchModuleSegments& segments = options->torch_modules;
  EXPECT_TRUE(segments.KeepsSegment("torch.nn.modules.normalization.LayerNorm", "LayerNorm"));
  EXPECT_TRUE(segments.KeepsSegment("torch.nn.modules.sparse.Embedding", "Embedding"));
  EXPECT_FALSE(segments.KeepsSegment("torch.nn.modules.linear.Linear", "Linear"));
  EXPECT_TRUE(segments.KeepsSegment("transformers.models.bert.modeling_bert.BertLayer", "BertLayer"));
}

TEST(ExportOptionsTest, AllTorchModulesKeepSegments) {
  // Check that HIERTAG_TORCH_MODULES=1 keeps every torch.nn and torch.ao class.
  std::string error;
  std::optional<ExportOptions> options = Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "1"}}, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_TRUE(options->torch_modules.KeepsSegment("torch.nn.modules.linear.Linear", "Linear"));
  EXPECT_TRUE(options->torch_modules.KeepsSegment("torch.ao.nn.quantized.Linear", "Linear"));
}

TEST(ExportOptionsTest, MalformedTorchModuleListIsAnError) {
  // Check that a list entry that is no class name is an error naming the value.
  std::string error;
  EXPECT_FALSE(Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "LayerNorm,,x-y"}}, &error));
  EXPECT_EQ(error,
            "hiertag: HIERTAG_TORCH_MODULES='LayerNorm,,x-y' is not valid: use 0 (none), 1 (all) or a comma list of "
            "class names, each starting with a capital letter (LayerNorm,Embedding)");
}

TEST(ExportOptionsTest, SwitchWordsAreAnErrorNotClassNames) {
  // Check that a word meant as a switch, or any name no class of torch's could have, is an
  // error naming the accepted values, alone or in a list.
  for (const char* value : {"yes", "maybe", "true", "on", "all", "True", "None", "layerNorm", "LayerNorm,yes", "_x"}) {
    std::string error;
    EXPECT_FALSE(Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", value}}, &error)) << value;
    EXPECT_EQ(error, "hiertag: HIERTAG_TORCH_MODULES='" + std::string(value) +
                         "' is not valid: use 0 (none), 1 (all) or a comma list of class names, each starting "
                         "with a capital letter (LayerNorm,Embedding)");
  }
}

TEST(ExportOptionsTest, CapitalizedNamesArePickedAsClasses) {
  // Check that names spelt as torch's classes are, private ones too, are read as a list.
  std::string error;
  std::optional<ExportOptions> options =
      Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "GELU,_LSTMLayer,Yes"}}, &error);
  ASSERT_TRUE(options) << error;
  EXPECT_EQ(options->torch_modules.classes, (std::set<std::string, std::less<>>{"GELU", "Yes", "_LSTMLayer"}));
}

TEST(ExportOptionsTest, ReportIsAskedForWithOne) {
  // Check that HIERTAG_REPORT=1 asks for the report and other values do not.
  std::string error;
  EXPECT_TRUE(Read({{"HIERTAG", "1"}, {"HIERTAG_REPORT", "1"}}, &error)->report);
  EXPECT_FALSE(Read({{"HIERTAG", "1"}, {"HIERTAG_REPORT", "yes"}}, &error)->report);
}

TEST(ExportOptionsTest, TorchModuleListNamingNoTorchClassIsWarnedOf) {
  // Check that names no torch class has are listed in one stderr line, singular and plural.
  auto known = [](std::string_view name) { return name == "LayerNorm" || name == "Linear"; };
  std::string error;
  std::optional<ExportOptions> one = Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "LayerNorm,LayerNrom"}}, &error);
  ASSERT_TRUE(one) << error;
  EXPECT_EQ(UnknownTorchModulesNote(UnknownTorchModules(one->torch_modules, known), "HIERTAG_TORCH_MODULES"),
            "HIERTAG_TORCH_MODULES names 'LayerNrom', which is not a torch.nn or torch.ao class: it has no "
            "effect (the list picks the torch classes that keep a tag segment; every other class has one)");
  std::optional<ExportOptions> two =
      Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", "MyBlock,Linear,LayerNrom"}}, &error);
  ASSERT_TRUE(two) << error;
  EXPECT_EQ(UnknownTorchModulesNote(UnknownTorchModules(two->torch_modules, known), "--torch-modules"),
            "--torch-modules names 'LayerNrom', 'MyBlock', which are not torch.nn or torch.ao "
            "classes: they have no effect (the list picks the torch classes that keep a tag segment; every other "
            "class has one)");
}

TEST(ExportOptionsTest, TorchModuleListOfTorchClassesIsNotWarnedOf) {
  // Check that a list of torch classes, 0 and 1 give no warning.
  auto known = [](std::string_view name) { return name == "LayerNorm" || name == "Linear"; };
  for (const char* value : {"LayerNorm,Linear", "0", "1"}) {
    std::string error;
    std::optional<ExportOptions> options = Read({{"HIERTAG", "1"}, {"HIERTAG_TORCH_MODULES", value}}, &error);
    ASSERT_TRUE(options) << error;
    EXPECT_TRUE(UnknownTorchModules(options->torch_modules, known).empty()) << value;
    EXPECT_EQ(UnknownTorchModulesNote({}, "HIERTAG_TORCH_MODULES"), "");
  }
}

TEST(ExportOptionsTest, TorchModuleClassesAreTorchNnAndAo) {
  // Check which class names count as torch modules.
  EXPECT_TRUE(IsTorchModuleClass("torch.nn.modules.linear.Linear"));
  EXPECT_TRUE(IsTorchModuleClass("torch.ao.nn.quantized.modules.linear.Linear"));
  EXPECT_FALSE(IsTorchModuleClass("torch.jit.ScriptModule.Something"));
  EXPECT_FALSE(IsTorchModuleClass("mypackage.torch.nn.Linear"));
}

}  // namespace
}  // namespace hiertag
