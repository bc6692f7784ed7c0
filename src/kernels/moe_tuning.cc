#include "kernels/moe_tuning.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace mlaserve {

namespace {

std::string shape_key(const std::array<int64_t, 3>& s) { return fmt::format("E={},N={},K={}", s[0], s[1], s[2]); }

nlohmann::json choice_json(const MoeGemmChoice& c) {
  nlohmann::json j = {{"kernel", c.kernel == MoeGemmChoice::Kernel::Wgmma ? "wgmma" : "mma"},
                      {"tile_rows", c.tile_rows},
                      {"k_splits", c.k_splits},
                      {"n_tiles", c.n_tiles}};
  if (c.ms > 0) j["ms"] = std::round(c.ms * 1e5) / 1e5;  // 10 ns: the file stays readable
  return j;
}

MoeGemmChoice choice_from_json(const nlohmann::json& j, const std::string& where) {
  MLA_CHECK(j.is_object() && j.contains("kernel") && j["kernel"].is_string(),
            "{}: expected an object with a \"kernel\" string", where);
  MoeGemmChoice c;
  const std::string kernel = j["kernel"];
  MLA_CHECK(kernel == "wgmma" || kernel == "mma", "{}: unknown kernel \"{}\" (wgmma or mma)", where, kernel);
  c.kernel = kernel == "wgmma" ? MoeGemmChoice::Kernel::Wgmma : MoeGemmChoice::Kernel::MmaSync;
  for (const char* key : {"tile_rows", "k_splits", "n_tiles"})
    MLA_CHECK(j.contains(key) && j[key].is_number_integer(), "{}: \"{}\" must be an integer", where, key);
  c.tile_rows = j["tile_rows"];
  c.k_splits = j["k_splits"];
  c.n_tiles = j["n_tiles"];
  const bool rows_ok = c.kernel == MoeGemmChoice::Kernel::MmaSync
                           ? c.tile_rows == 32
                           : c.tile_rows == 16 || c.tile_rows == 32 || c.tile_rows == 64 || c.tile_rows == 128;
  MLA_CHECK(rows_ok, "{}: tile_rows {} is not one the {} kernel has (wgmma: 16, 32, 64, 128; mma: 32)", where,
            c.tile_rows, kernel);
  MLA_CHECK(c.k_splits >= 1 && c.k_splits <= 64 && c.n_tiles >= 1 && c.n_tiles <= 64,
            "{}: k_splits {} or n_tiles {} out of range (1 to 64)", where, c.k_splits, c.n_tiles);
  if (j.contains("ms") && j["ms"].is_number()) c.ms = j["ms"];
  return c;
}

}  // namespace

void MoeTuning::set(int64_t E, int64_t N, int64_t K, int64_t rows, const MoeGemmChoice& choice) {
  table_[{E, N, K}][rows] = choice;
}

std::optional<MoeGemmChoice> MoeTuning::find(int64_t E, int64_t N, int64_t K, int64_t rows) const {
  auto shape = table_.find({E, N, K});
  if (shape == table_.end()) return std::nullopt;
  const MoeGemmChoice* c = nearest_tuned(shape->second, rows);
  return c ? std::optional<MoeGemmChoice>(*c) : std::nullopt;
}

nlohmann::json MoeTuning::to_json() const {
  nlohmann::json shapes = nlohmann::json::object();
  for (const auto& [shape, by_rows] : table_) {
    nlohmann::json entry = nlohmann::json::object();
    for (const auto& [rows, choice] : by_rows) entry[std::to_string(rows)] = choice_json(choice);
    shapes[shape_key(shape)] = entry;
  }
  return {{"device", device_}, {"kernel", kKernelName}, {"shapes", shapes}};
}

MoeTuning MoeTuning::from_json(const nlohmann::json& j, const std::string& what) {
  MLA_CHECK(j.is_object() && j.contains("shapes") && j["shapes"].is_object(),
            "{}: expected an object with \"shapes\"", what);
  MLA_CHECK(j.value("kernel", std::string()) == kKernelName, "{}: \"kernel\" must be \"{}\"", what, kKernelName);
  MoeTuning t;
  t.device_ = j.value("device", std::string());
  for (const auto& [key, entry] : j["shapes"].items()) {
    long long E = 0, N = 0, K = 0;
    char tail = 0;
    MLA_CHECK(std::sscanf(key.c_str(), "E=%lld,N=%lld,K=%lld%c", &E, &N, &K, &tail) == 3 && E > 0 && N > 0 && K > 0,
              "{}: shape key \"{}\" is not of the form E=<experts>,N=<rows>,K=<columns>", what, key);
    MLA_CHECK(entry.is_object(), "{}: shape {} must map row counts to choices", what, key);
    for (const auto& [rows, choice] : entry.items()) {
      const std::string where = fmt::format("{}: shape {} rows {}", what, key, rows);
      t.set(E, N, K, parse_tuned_count(rows, where), choice_from_json(choice, where));
    }
  }
  return t;
}

MoeTuning MoeTuning::load(const std::string& path) { return from_json(read_tuning_json(path), path); }

void MoeTuning::save(const std::string& path) const { write_tuning_json(path, to_json()); }

std::string MoeTuning::path(const std::string& dir_flag, const std::string& device) {
  return (std::filesystem::path(tuning_dir(dir_flag)) / file_name(device)).string();
}

}  // namespace mlaserve
