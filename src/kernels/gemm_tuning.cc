#include "kernels/gemm_tuning.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/error.h"

namespace mlaserve {

namespace {

std::string shape_key(int64_t N, int64_t K) { return fmt::format("N={},K={}", N, K); }

// A launch from rows (`rows_entry`) that takes codes has them from a quantization launch: "x":
// "quantized"; elsewhere codes come from the producer: "x": "codes".
nlohmann::json choice_json(const Fp8GemmChoice& c, bool rows_entry) {
  nlohmann::json j;
  if (c.kernel == Fp8GemmChoice::Kernel::Skinny) {
    j = {{"kernel", "skinny"}, {"row_tiles", c.row_tiles}, {"splits", c.splits}, {"k_warps", c.k_warps}};
    if (c.depth) j["depth"] = c.depth;
    if (c.codes_in) j["x"] = rows_entry ? "quantized" : "codes";
  } else if (c.kernel == Fp8GemmChoice::Kernel::Wgmma) {
    j = {{"kernel", "wgmma"}, {"waves", c.waves}, {"group_m", c.group_m}, {"cluster", c.cluster}};
  } else {
    j = {{"kernel", "cublaslt"}};
    if (!c.lt.heuristic())
      j["lt"] = {{"algo", c.lt.algo},       {"tile", c.lt.tile},       {"stages", c.lt.stages},
                 {"cluster", c.lt.cluster}, {"swizzle", c.lt.swizzle}, {"custom", c.lt.custom}};
  }
  if (c.ms > 0) j["ms"] = std::round(c.ms * 1e5) / 1e5;  // 10 ns: the file stays readable
  return j;
}

// j[name] into `into` where present (files without it keep the default); an integer or an error.
void read_optional_int(const nlohmann::json& j, const char* name, const std::string& where, int& into) {
  if (!j.contains(name)) return;
  MLA_CHECK(j[name].is_number_integer(), "{}: \"{}\" must be an integer", where, name);
  into = j[name];
}

Fp8GemmChoice choice_from_json(const nlohmann::json& j, const std::string& where, bool rows_entry) {
  MLA_CHECK(j.is_object() && j.contains("kernel") && j["kernel"].is_string(),
            "{}: expected an object with a \"kernel\" string", where);
  Fp8GemmChoice c;
  const std::string kernel = j["kernel"];
  if (kernel == "skinny") {
    c.kernel = Fp8GemmChoice::Kernel::Skinny;
    MLA_CHECK(j.contains("row_tiles") && j["row_tiles"].is_number_integer() && j.contains("splits") &&
                  j["splits"].is_number_integer(),
              "{}: a skinny choice needs integer \"row_tiles\" and \"splits\"", where);
    c.row_tiles = j["row_tiles"];
    c.splits = j["splits"];
    MLA_CHECK((c.row_tiles == 1 || c.row_tiles == 2 || c.row_tiles == 4) && c.splits >= 1 && c.splits <= 8,
              "{}: row_tiles {} (1, 2 or 4) or splits {} (1 to 8) out of range", where, c.row_tiles, c.splits);
    read_optional_int(j, "k_warps", where, c.k_warps);
    MLA_CHECK(c.k_warps == 1 || c.k_warps == 2 || c.k_warps == 4 || c.k_warps == 8,
              "{}: k_warps {} is not 1, 2, 4 or 8", where, c.k_warps);
    read_optional_int(j, "depth", where, c.depth);
    MLA_CHECK(c.depth == 0 || (c.depth >= 2 && c.depth <= 4), "{}: depth {} is not 0, 2, 3 or 4", where, c.depth);
    if (j.contains("x")) {
      const std::string x = j["x"].is_string() ? j["x"].get<std::string>() : std::string();
      const char* codes = rows_entry ? "quantized" : "codes";
      MLA_CHECK(x == codes || x == "rows", "{}: \"x\" must be \"{}\" or \"rows\"", where, codes);
      c.codes_in = x == codes;
    }
  } else if (kernel == "wgmma") {
    c.kernel = Fp8GemmChoice::Kernel::Wgmma;
    MLA_CHECK(j.contains("waves") && j["waves"].is_number_integer() && j.contains("group_m") &&
                  j["group_m"].is_number_integer(),
              "{}: a wgmma choice needs integer \"waves\" and \"group_m\"", where);
    c.waves = j["waves"];
    c.group_m = j["group_m"];
    read_optional_int(j, "cluster", where, c.cluster);  // files without it: single CTAs
    MLA_CHECK((c.waves == 1 || c.waves == 2) && c.group_m >= 1 && c.group_m <= 64 && (c.cluster == 1 || c.cluster == 2),
              "{}: waves {} (1 or 2), group_m {} (1 to 64) or cluster {} (1 or 2) out of range", where, c.waves,
              c.group_m, c.cluster);
  } else {
    MLA_CHECK(kernel == "cublaslt", "{}: unknown kernel \"{}\" (skinny, cublaslt or wgmma)", where, kernel);
    if (j.contains("lt")) {
      const nlohmann::json& lt = j["lt"];
      auto field = [&](const char* name) {
        MLA_CHECK(lt.is_object() && lt.contains(name) && lt[name].is_number_integer() && lt[name] >= 0,
                  "{}: \"lt\" needs a non-negative integer \"{}\"", where, name);
        return lt[name].get<int>();
      };
      c.lt = {field("algo"), field("tile"), field("stages"), field("cluster"), field("swizzle"), field("custom")};
    }
  }
  if (j.contains("ms") && j["ms"].is_number()) c.ms = j["ms"];
  return c;
}

}  // namespace

void Fp8GemmTuning::set(int64_t N, int64_t K, int64_t tokens, const Fp8GemmChoice& choice,
                        const std::optional<Fp8GemmChoice>& from_rows) {
  table_[{N, K}][tokens] = {choice, from_rows};
}

void Fp8GemmTuning::merge(const Fp8GemmTuning& other) {
  for (const auto& [nk, by_tokens] : other.table_)
    for (const auto& [tokens, e] : by_tokens) table_[nk][tokens] = e;
}

const Fp8GemmTuning::Entry* Fp8GemmTuning::entry(int64_t N, int64_t K, int64_t tokens) const {
  auto shape = table_.find({N, K});
  return shape == table_.end() ? nullptr : nearest_tuned(shape->second, tokens);
}

std::optional<Fp8GemmChoice> Fp8GemmTuning::find(int64_t N, int64_t K, int64_t tokens) const {
  const Entry* e = entry(N, K, tokens);
  return e ? std::optional<Fp8GemmChoice>(e->choice) : std::nullopt;
}

std::optional<Fp8GemmChoice> Fp8GemmTuning::find_from_rows(int64_t N, int64_t K, int64_t tokens) const {
  const Entry* e = entry(N, K, tokens);
  if (!e) return std::nullopt;
  return e->from_rows ? e->from_rows : e->choice;
}

std::string to_string(const CublasLtConfig& c) {
  if (c.heuristic()) return "cublaslt";
  return fmt::format("cublaslt algo={} tile={} stages={} cluster={} swizzle={} custom={}", c.algo, c.tile, c.stages,
                     c.cluster, c.swizzle, c.custom);
}

std::string to_string(const Fp8GemmChoice& c) {
  if (c.kernel == Fp8GemmChoice::Kernel::Cublaslt) return to_string(c.lt);
  if (c.kernel == Fp8GemmChoice::Kernel::Wgmma)
    return fmt::format("wgmma waves={} group_m={}{}", c.waves, c.group_m, c.cluster > 1 ? " cluster=2" : "");
  return fmt::format("skinny row_tiles={} splits={} k_warps={} depth={}{}", c.row_tiles, c.splits, c.k_warps, c.depth,
                     c.codes_in ? " x=codes" : "");
}

nlohmann::json Fp8GemmTuning::to_json() const {
  nlohmann::json shapes = nlohmann::json::object();
  for (const auto& [nk, by_tokens] : table_) {
    nlohmann::json entry = nlohmann::json::object();
    for (const auto& [tokens, e] : by_tokens) {
      nlohmann::json& j = entry[std::to_string(tokens)] = choice_json(e.choice, false);
      if (e.from_rows) j["rows"] = choice_json(*e.from_rows, true);
    }
    shapes[shape_key(nk.first, nk.second)] = entry;
  }
  return {{"device", device_}, {"kernel", kKernelName}, {"shapes", shapes}};
}

Fp8GemmTuning Fp8GemmTuning::from_json(const nlohmann::json& j, const std::string& what) {
  MLA_CHECK(j.is_object() && j.contains("shapes") && j["shapes"].is_object(),
            "{}: expected an object with \"shapes\"", what);
  MLA_CHECK(j.value("kernel", std::string()) == kKernelName, "{}: \"kernel\" must be \"{}\"", what, kKernelName);
  Fp8GemmTuning t;
  t.device_ = j.value("device", std::string());
  for (const auto& [key, entry] : j["shapes"].items()) {
    long long N = 0, K = 0;
    char tail = 0;
    MLA_CHECK(std::sscanf(key.c_str(), "N=%lld,K=%lld%c", &N, &K, &tail) == 2 && N > 0 && K > 0,
              "{}: shape key \"{}\" is not of the form N=<rows>,K=<columns>", what, key);
    MLA_CHECK(entry.is_object(), "{}: shape {} must map token counts to choices", what, key);
    for (const auto& [tokens, choice] : entry.items()) {
      const std::string where = fmt::format("{}: shape {} tokens {}", what, key, tokens);
      std::optional<Fp8GemmChoice> from_rows;
      if (choice.is_object() && choice.contains("rows"))
        from_rows = choice_from_json(choice["rows"], where + " rows", true);
      t.set(N, K, parse_tuned_count(tokens, where), choice_from_json(choice, where, false), from_rows);
    }
  }
  return t;
}

Fp8GemmTuning Fp8GemmTuning::load(const std::string& path) { return from_json(read_tuning_json(path), path); }

void Fp8GemmTuning::save(const std::string& path) const { write_tuning_json(path, to_json()); }

std::string Fp8GemmTuning::file_name(const std::string& device) { return tuning_file_name("fp8_gemm", device); }

std::string Fp8GemmTuning::path(const std::string& dir_flag, const std::string& device) {
  return (std::filesystem::path(tuning_dir(dir_flag)) / file_name(device)).string();
}

}  // namespace mlaserve
