// Tests of the HIERTAG_REPORT line (export_report.h).
#include "hiertag/core/export/export_report.h"

#include <gtest/gtest.h>

namespace hiertag {
namespace {

TEST(ExportReportTest, LineListsRulesOpsCallsRewritesAndTimes) {
  // Check that the line carries every count in order, with times to 0.1 ms.
  ExportReport report;
  report.nodes = 12;
  report.rule_counts = {{"recorded", 9}, {"consumers", 3}};
  report.unrecorded_op_types = {{"Identity", 1}, {"Constant", 2}};
  report.unresolved_scope_levels = 0;
  report.module_calls = 4;
  report.direct_calls = 1;
  report.aliases = 2;
  report.fused = 1;
  report.merged = 3;
  report.removed_or_folded = 5;
  report.own_milliseconds = 1.25;
  report.write_milliseconds = 0.04;
  EXPECT_EQ(FormatExportReport(report),
            "hiertag: 12 nodes: recorded 9 consumers 3; not recorded: Constant=2 Identity=1; unresolved scope "
            "levels 0; module calls 4 (1 direct, 2 aliases); rewrites: fused 1, merged 3, removed/folded 5; "
            "hiertag work 1.2 ms, writing 0.0 ms\n");
}

TEST(ExportReportTest, OwnWorkIsBrokenDownByPart) {
  // Check that the parts of hiertag's own work follow its total, the passes with how many were observed.
  ExportReport report;
  report.own_milliseconds = 3.0;
  report.own_parts = {{"set-up", 0.5}, {"passes", 2.0}, {"plan", 0.5}};
  report.observed_passes = 14;
  std::string line = FormatExportReport(report);
  EXPECT_NE(line.find("; hiertag work 3.0 ms (set-up 0.5, passes 2.0 in 14, plan 0.5), writing 0.0 ms\n"),
            std::string::npos)
      << line;
}

TEST(ExportReportTest, ObservedPassesAreBrokenDownAtTheEnd) {
  // Check that the passes' parts come last, after the write, in the order given.
  ExportReport report;
  report.own_milliseconds = 3.0;
  report.own_parts = {{"passes", 2.0}};
  report.observed_passes = 14;
  report.pass_parts = {{"snapshot", 1.25}, {"check", 0.5}, {"matching", 0.0}, {"classify", 0.0}};
  std::string line = FormatExportReport(report);
  EXPECT_NE(line.find("(passes 2.0 in 14), writing 0.0 ms; observed passes: snapshot 1.2, check 0.5, matching 0.0, "
                      "classify 0.0\n"),
            std::string::npos)
      << line;
}

TEST(ExportReportTest, NothingUnrecordedLeavesThatPartOut) {
  // Check that with every node recorded there is no "not recorded" part.
  ExportReport report;
  report.rule_counts = {{"recorded", 1}};
  EXPECT_EQ(FormatExportReport(report).find("not recorded"), std::string::npos);
}

}  // namespace
}  // namespace hiertag
