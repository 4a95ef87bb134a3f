// Shared by the libFuzzer targets of tests/fuzz: a per-process work folder the
// commands read their model from (and extract writes into), output streams that
// discard, a stable hash to derive options from the input, and the
// path-traversal oracle.
//
// The work folder, created once per process under $TMPDIR and removed at exit:
//
//   hiertag_fuzz.<pid>/outside/canary.bin   bytes no command may ever copy out:
//                                           the folder lies outside the model's
//   hiertag_fuzz.<pid>/model/model.onnx     the input of the current run
//   hiertag_fuzz.<pid>/model/weights.bin    4 MiB of external data the seeds point into
//   hiertag_fuzz.<pid>/model/link.bin       symlink to ../outside/canary.bin
//   hiertag_fuzz.<pid>/model/linkdir        symlink to ../outside
//
// The seeds (make_seed_corpus.py) name these files as external-data locations,
// next to hostile ones ("../../etc/passwd", "/etc/passwd", "../outside/canary.bin").
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <ostream>
#include <set>
#include <streambuf>
#include <string>
#include <string_view>

namespace hiertag::fuzz {

namespace fs = std::filesystem;

// An ostream that formats everything and keeps nothing.
class NullStream : public std::ostream {
 public:
  NullStream() : std::ostream(&buffer_) {}

 private:
  class Discard : public std::streambuf {
   protected:
    int overflow(int c) override { return traits_type::not_eof(c); }
    std::streamsize xsputn(const char*, std::streamsize count) override { return count; }
  };
  Discard buffer_;
};

// FNV-1a: options a run takes (format, depth, module, call) follow from its bytes,
// so a crashing input reproduces alone.
inline uint64_t Hash(const uint8_t* data, size_t size) {
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 1099511628211ull;
  return hash;
}

inline std::string ReadFile(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
}

inline void WriteFile(const fs::path& path, std::string_view bytes) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!file) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

// Bytes the oracle looks for in what extract writes.
inline constexpr std::string_view kCanary = "HIERTAG-FUZZ-CANARY-outside-the-model-folder";

class WorkFolder {
 public:
  static WorkFolder& Get() {
    static WorkFolder* folder = new WorkFolder();  // never destroyed: libFuzzer exits with exit()
    return *folder;
  }

  const fs::path& model_folder() const { return model_; }
  const fs::path& model_path() const { return model_path_; }

  // Writes the input as the model of this run.
  std::string WriteModel(const uint8_t* data, size_t size) {
    WriteFile(model_path_, std::string_view(reinterpret_cast<const char*>(data), size));
    return model_path_.string();
  }

  // Checks what a run wrote into the model's folder (extract's outputs) with
  // CheckNothingFromOutside, then removes it.
  void CheckAndRemoveOutputs(std::string_view input) {
    std::error_code status;
    for (const fs::directory_entry& entry : fs::directory_iterator(model_, status)) {
      if (fixed_.count(entry.path().filename().string())) continue;
      if (entry.is_regular_file(status)) CheckNothingFromOutside(input, ReadFile(entry.path()), entry.path());
      fs::remove_all(entry.path(), status);
    }
  }

 private:
  // Aborts when `written` holds data from outside the model's folder that the
  // input itself did not hold: the canary, or the first line of /etc/passwd.
  void CheckNothingFromOutside(std::string_view input, const std::string& written, const fs::path& file) const {
    for (std::string_view secret : {kCanary, std::string_view(passwd_head_)}) {
      if (secret.empty() || input.find(secret) != std::string_view::npos) continue;
      if (written.find(secret) != std::string::npos) {
        std::fprintf(stderr, "fuzz: %s holds bytes from outside the model's folder (%.*s)\n", file.c_str(),
                     static_cast<int>(secret.size()), secret.data());
        std::abort();
      }
    }
  }

  WorkFolder() {
    const char* tmp = std::getenv("TMPDIR");
    root_ = fs::path(tmp && *tmp ? tmp : "/tmp") / ("hiertag_fuzz." + std::to_string(getpid()));
    fs::remove_all(root_);
    model_ = root_ / "model";
    fs::create_directories(model_);
    fs::create_directories(root_ / "outside");
    WriteFile(root_ / "outside" / "canary.bin", std::string(kCanary) + std::string(4096, 'C'));
    std::string weights(4 << 20, '\0');
    for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>((i * 131) >> 3);
    WriteFile(model_ / "weights.bin", weights);
    fs::create_symlink("../outside/canary.bin", model_ / "link.bin");
    fs::create_directory_symlink("../outside", model_ / "linkdir");
    model_path_ = model_ / "model.onnx";
    fixed_ = {"model.onnx", "weights.bin", "link.bin", "linkdir"};
    std::string passwd = ReadFile("/etc/passwd");
    passwd_head_ = passwd.substr(0, std::min<size_t>(passwd.find('\n'), 32));
    if (passwd_head_.size() < 8) passwd_head_.clear();
    std::atexit([] {
      std::error_code status;
      fs::remove_all(Get().root_, status);
    });
  }

  fs::path root_;
  fs::path model_;
  fs::path model_path_;
  std::set<std::string> fixed_;
  std::string passwd_head_;
};

}  // namespace hiertag::fuzz
