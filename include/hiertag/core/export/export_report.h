// Export report: the HIERTAG_REPORT=1 line of one tagged export.
//
//   hiertag: 185 nodes: recorded 160 parameter-owner 4 ... root 0; not recorded:
//   Constant=19 Identity=6; unresolved scope levels 0; module calls 18 (0 direct,
//   0 aliases); rewrites: fused 0, merged 3, removed/folded 1; hiertag work 3.1 ms
//   (set-up 0.2, inlining 0.1, passes 1.9 in 14, cse 0.3, tagging 0.3, entries 0.2,
//   plan 0.1, release 0.1), writing 0.4 ms; observed passes: snapshot 0.9, check 0.3,
//   matching 0.2, classify 0.3
//
// One line, printed to stderr once the file is written. No torch.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace hiertag {

struct ExportReport {
  size_t nodes = 0;
  std::vector<std::pair<std::string, int>> rule_counts;  // each tagging rule and the nodes it tagged
  std::map<std::string, int> unrecorded_op_types;        // op types of nodes no recorded scope tagged
  int unresolved_scope_levels = 0;
  size_t module_calls = 0;
  int direct_calls = 0;
  int aliases = 0;
  int fused = 0;
  int merged = 0;
  size_t removed_or_folded = 0;
  double own_milliseconds = 0;  // hiertag's own work, torch's excluded
  // Its parts (set-up, inlining, passes, cse, tagging, entries, plan), in milliseconds.
  std::vector<std::pair<std::string, double>> own_parts;
  int observed_passes = 0;  // torch passes RecordRewrites observed
  // The passes part broken down (RewriteTimes: snapshot, check, matching,
  // classify), in milliseconds; their sum is at most the part (which also
  // counts the time spent around them).
  std::vector<std::pair<std::string, double>> pass_parts;
  double write_milliseconds = 0;  // writing the file (hiertag replaces torch's write)
};

// The line, with a trailing newline.
std::string FormatExportReport(const ExportReport& report);

}  // namespace hiertag
