// Export report: one line per tagged export.
#include "hiertag/core/export/export_report.h"

#include <sstream>

namespace hiertag {

std::string FormatExportReport(const ExportReport& report) {
  std::ostringstream line;
  line << "hiertag: " << report.nodes << " nodes:";
  for (const auto& [rule, count] : report.rule_counts) line << " " << rule << " " << count;
  if (!report.unrecorded_op_types.empty()) {
    line << "; not recorded:";
    for (const auto& [op_type, count] : report.unrecorded_op_types) line << " " << op_type << "=" << count;
  }
  line << "; unresolved scope levels " << report.unresolved_scope_levels;
  line << "; module calls " << report.module_calls << " (" << report.direct_calls << " direct, " << report.aliases
       << " aliases); rewrites: fused " << report.fused << ", merged " << report.merged << ", removed/folded "
       << report.removed_or_folded;
  line.precision(1);
  line << std::fixed << "; hiertag work " << report.own_milliseconds << " ms";
  if (!report.own_parts.empty()) {
    const char* separator = " (";
    for (const auto& [part, milliseconds] : report.own_parts) {
      line << separator << part << " " << milliseconds;
      if (part == "passes") line << " in " << report.observed_passes;
      separator = ", ";
    }
    line << ")";
  }
  line << ", writing " << report.write_milliseconds << " ms";
  const char* separator = "; observed passes: ";
  for (const auto& [part, milliseconds] : report.pass_parts) {
    line << separator << part << " " << milliseconds;
    separator = ", ";
  }
  line << "\n";
  return line.str();
}

}  // namespace hiertag
