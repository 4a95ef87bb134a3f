// Fuzz target: `hiertag tree` (text, JSON or CSV, with or without --depth, from
// the input's hash) on mutated tagged files. Exit status 0 or 2; anything else,
// a crash, an exception, a leak or a hang is a finding.
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
  uint64_t hash = hiertag::fuzz::Hash(data, size);
  static constexpr hiertag::TreeFormat kFormats[] = {hiertag::TreeFormat::kText, hiertag::TreeFormat::kJson,
                                                     hiertag::TreeFormat::kCsv};
  hiertag::TreeFormat format = kFormats[hash % 3];
  int depth = static_cast<int>((hash >> 8) % 5) - 1;  // -1: no limit
  int code = hiertag::RunTree(path, format, depth, out, err);
  if (code != 0 && code != 2) {
    std::fprintf(stderr, "fuzz: tree exited %d\n", code);
    std::abort();
  }
  return 0;
}
