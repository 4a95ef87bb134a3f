// Fuzz target: `hiertag extract` on mutated tagged files. The module (one of
// the file's table, or an unknown one), the call (none, in range or out of it)
// and the external-data mode follow from the input's hash. Outputs go into the
// work folder and are removed after the run; whatever extract wrote must hold
// no bytes from outside the model's folder (the canary behind "../outside/...",
// a symlink, or /etc/passwd) unless the input held them itself.
#include <cstdio>
#include <cstdlib>

#include "fuzz_support.h"
#include "hiertag/core/file/tagged_file.h"
#include "hiertag/tool/shape_inference.h"
#include "hiertag/tool/tool_commands.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  hiertag::fuzz::WorkFolder::Get();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fuzz = hiertag::fuzz;
  fuzz::WorkFolder& folder = fuzz::WorkFolder::Get();
  std::string path = folder.WriteModel(data, size);
  uint64_t hash = fuzz::Hash(data, size);
  std::string error;
  std::optional<hiertag::TaggedFile> file = hiertag::LoadTaggedFile(path, &error);
  std::string tag = "/NoSuchModule";
  std::optional<int64_t> call;
  if (file && !file->modules.empty() && (hash & 15) != 0) {
    const hiertag::ModuleEntry& entry = file->modules[(hash >> 4) % file->modules.size()];
    tag = entry.tag;
    switch ((hash >> 20) & 3) {
      case 0:
        break;
      case 1:
        call = 0;
        break;
      case 2:
        call = static_cast<int64_t>((hash >> 24) % static_cast<uint64_t>(entry.call_count()));
        break;
      case 3:
        call = entry.call_count();
        break;  // out of range
    }
  }
  static constexpr hiertag::ExternalDataMode kModes[] = {
      hiertag::ExternalDataMode::kAuto, hiertag::ExternalDataMode::kInline, hiertag::ExternalDataMode::kCopy,
      hiertag::ExternalDataMode::kReference};
  hiertag::ExternalDataMode mode = kModes[(hash >> 28) & 3];
  // OUT beside the model (references to its external files stay inside OUT's
  // folder), or extract's default name derived from the tag.
  std::string out_path = (hash >> 30) & 1 ? "" : (folder.model_folder() / "extracted.onnx").string();
  fuzz::NullStream out, err;
  int code =
      hiertag::RunExtract(path, tag, hiertag::ExtractOptions{call, out_path, mode, "", hiertag::NativeInferTypes()},
                          (hash >> 31) & 1, out, err);
  if (code != 0 && code != 2) {
    std::fprintf(stderr, "fuzz: extract exited %d\n", code);
    std::abort();
  }
  folder.CheckAndRemoveOutputs(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
