// Tuned launches of the FP8 fused MoE's two grouped expert GEMMs (gate/up and down), as `tune-moe`
// measures them on one GPU model and writes them (one JSON file a device, moe_fp8_<device>.json).
// A product is keyed by its experts E, its N x K weights and its rows (token-expert pairs); a
// backend loads the file of its device at start and plans the products it lacks itself. The file:
//   {"device": "NVIDIA H200", "kernel": "moe_fp8_w8a8_block128",
//    "shapes": {"E=257,N=512,K=7168": {"9": {"kernel": "wgmma", "tile_rows": 16, "k_splits": 8,
//                                            "n_tiles": 1, "ms": 0.041}, ...}, ...}}
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/tuning_file.h"

namespace mlaserve {

struct MoeGemmChoice {
  enum class Kernel { Wgmma, MmaSync };  // warpgroup MMA, tiles of 16-128 rows; mma.sync, 32 rows
  Kernel kernel = Kernel::Wgmma;
  int tile_rows = 16, k_splits = 1, n_tiles = 1;  // n_tiles: 128-column tiles a block runs in turn
  double ms = 0;                                  // what the tuner measured (0: not measured)
  bool operator==(const MoeGemmChoice& o) const {
    return kernel == o.kernel && tile_rows == o.tile_rows && k_splits == o.k_splits && n_tiles == o.n_tiles;
  }
};

// One MoE layer to tune: `routed` experts and then `shared` fused shared experts, each gate / up
// [inter, hidden] and down [hidden, inter]; `tokens` tokens of top_k routed pairs each, spread evenly
// over the routed experts, and with route_shared one pair more for each shared expert (as the model
// routes them for batches of up to shared_fusion_max_tokens; larger ones run them apart).
struct MoeTuneCase {
  int64_t routed = 0, shared = 0, hidden = 0, inter = 0, tokens = 0, top_k = 0;
  bool route_shared = false;
  int64_t experts() const { return routed + shared; }
  int64_t pairs_per_token() const { return top_k + (route_shared ? shared : 0); }
};

class MoeTuning {
 public:
  static constexpr const char* kKernelName = "moe_fp8_w8a8_block128";

  void set(int64_t E, int64_t N, int64_t K, int64_t rows, const MoeGemmChoice& choice);
  // The choice tuned for the row count nearest to `rows` of that product (see nearest_tuned).
  std::optional<MoeGemmChoice> find(int64_t E, int64_t N, int64_t K, int64_t rows) const;
  size_t shapes() const { return table_.size(); }
  const std::string& device() const { return device_; }
  void set_device(std::string d) { device_ = std::move(d); }

  nlohmann::json to_json() const;
  // Errors name what is wrong (`what`: the file, for messages).
  static MoeTuning from_json(const nlohmann::json& j, const std::string& what);
  static MoeTuning load(const std::string& path);
  void save(const std::string& path) const;

  static std::string file_name(const std::string& device) { return tuning_file_name("moe_fp8", device); }
  // That file in tuning_dir(dir_flag), where the runtime reads it and the tuner writes it.
  static std::string path(const std::string& dir_flag, const std::string& device);

 private:
  std::string device_;
  std::map<std::array<int64_t, 3>, std::map<int64_t, MoeGemmChoice>> table_;  // {E, N, K} -> rows -> choice
};

}  // namespace mlaserve
