// hiertag: the command-line tool. The commands live in the hiertag_tool library.
#include <iostream>
#include <string>
#include <vector>

#include "hiertag/core/format/printable.h"
#include "hiertag/tool/shape_inference.h"
#include "hiertag/tool/tool_commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    return hiertag::RunTool(args, hiertag::NativeInferTypes(), std::cout, std::cerr);
  } catch (const std::exception& error) {
    std::cerr << "hiertag: internal error: " << hiertag::Printable(error.what()) << "\n";
    return 3;
  }
}
