// Fuzz target: `hiertag validate` (text or JSON, from the input's hash) on
// mutated tagged files. Exit status 0, 1 or 2; anything else, a crash, an
// exception, a leak or a hang is a finding.
#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"
#include "hiertag/tool/tool_commands.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hiertag::fuzz::WorkFolder::Get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  hiertag::fuzz::WorkFolder& folder = hiertag::fuzz::WorkFolder::Get();
  std::string path = folder.WriteModel(data, size);
  hiertag::fuzz::NullStream out, err;
  bool json = hiertag::fuzz::Hash(data, size) & 1;
  int code = hiertag::RunValidate(path, json, out, err);
  if (code < 0 || code > 2) {
    std::fprintf(stderr, "fuzz: validate exited %d\n", code);
    std::abort();
  }
  return 0;
}
