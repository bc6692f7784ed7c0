#include "cli/tokenizer_location.h"

#include <cstdlib>
#include <filesystem>

#include "common/error.h"

namespace mlaserve::cli {

namespace fs = std::filesystem;

std::string find_tokenizer(const std::string& tokenizer_path, const std::string& model) {
  if (!tokenizer_path.empty()) return tokenizer_path;
  if (fs::exists(fs::path(model) / "tokenizer.json")) return model;
  if (const char* env = std::getenv("MLASERVE_TOKENIZER_DIR")) return env;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  fs::path builtin = (ec ? fs::path(".") : exe.parent_path()) / "tokenizers" / "deepseek-v3";
  if (fs::exists(builtin / "tokenizer.json")) return builtin.string();
  fail("no tokenizer for '{}': pass --tokenizer-path (a folder with tokenizer.json), or run scripts/setup.sh "
       "to fetch the DeepSeek-V3 tokenizer of the built-in models", model);
}

}  // namespace mlaserve::cli
