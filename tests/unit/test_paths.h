// Paths the unit tests read: fixtures in the repo, the shared tokenizer beside it, the binary (and
// how to run it).
#pragma once

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <unistd.h>

namespace mlaserve::testing {

inline std::string source_dir() { return MLASERVE_SOURCE_DIR; }
inline std::string model_fixture(const std::string& name) { return source_dir() + "/tests/fixtures/models/" + name; }
inline std::string mlaserve_binary() { return MLASERVE_BINARY; }

// `mlaserve ARGS` through the shell (ARGS may redirect: "< in.txt", "2>&1"): what it wrote to
// stdout, and its exit status.
struct CommandResult {
  int status;
  std::string out;
};
inline CommandResult run_mlaserve(const std::string& args) {
  const std::string command = mlaserve_binary() + " " + args;
  CommandResult r{-1, ""};
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> chunk;
  while (size_t n = fread(chunk.data(), 1, chunk.size(), pipe)) r.out.append(chunk.data(), n);
  r.status = pclose(pipe);
  return r;
}

// A fresh temporary folder, removed when the object goes away.
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("mlaserve_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

}  // namespace mlaserve::testing
