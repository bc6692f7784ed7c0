#include "kernels/tuning_file.h"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace mlaserve {

std::string tuning_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!dir.empty()) return dir;
  if (const char* env = std::getenv("MLASERVE_TUNING_DIR"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ((ec ? fs::path(".") : exe.parent_path()) / ".." / "configs" / "tuning").lexically_normal().string();
}

std::string tuning_file_name(const std::string& prefix, const std::string& device) {
  std::string name = device;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return prefix + "_" + name + ".json";
}

nlohmann::json read_tuning_json(const std::string& path) {
  std::ifstream in(path);
  MLA_CHECK(in.good(), "cannot read tuned configs {}", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", path, e.what());
  }
}

void write_tuning_json(const std::string& path, const nlohmann::json& j) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  // Written beside it and renamed over it: a tuner stopped mid-write (they write after each shape)
  // leaves the previous file whole, never half of one that the next start refuses.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    MLA_CHECK(out.good(), "cannot write tuned configs {}", tmp);
    out << j.dump(1) << "\n";
    MLA_CHECK(out.good(), "writing {} failed", tmp);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  MLA_CHECK(!ec, "cannot replace {} with {}: {}", path, tmp, ec.message());
}

int64_t parse_tuned_count(const std::string& s, const std::string& where) {
  size_t used = 0;
  int64_t v = -1;
  try {
    v = std::stoll(s, &used);
  } catch (const std::exception&) {
  }
  MLA_CHECK(used == s.size() && v > 0, "{}: count \"{}\" is not a positive integer", where, s);
  return v;
}

}  // namespace mlaserve
