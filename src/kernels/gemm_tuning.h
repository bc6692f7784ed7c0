// Tuned kernel choices for the FP8 block-scaled linear, per weight shape (N, K) and token count,
// as `tune-fp8-gemm` measures them on one GPU model and writes them (one JSON file a device,
// fp8_gemm_<device>.json). A backend loads the file of its device at start; shapes or token counts
// it lacks get the backend's defaults. The file:
//   {"device": "NVIDIA H200", "kernel": "fp8_w8a8_block128",
//    "shapes": {"N=24576,K=1536": {"1": {"kernel": "skinny", "row_tiles": 1, "splits": 1, "k_warps": 1,
//                                        "depth": 4},
//                                  "16": {"kernel": "cublaslt", "rows": {"kernel": "skinny", ...}},
//                                  "1024": {"kernel": "cublaslt", "lt": {"algo": 66, "tile": 17, ...}},
//                                  "4096": {"kernel": "wgmma", "waves": 2, "group_m": 8}, ...},
//               ...}}
// "rows" (where the choice takes codes): the fastest launch from BF16 rows, for a linear whose input
// no producer writes as codes (o_proj's comes from the attention); "x": "quantized" there: the rows
// quantized by a launch of their own, then the skinny launch on those codes.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "kernels/tuning_file.h"

namespace mlaserve {

// One of cuBLASLt's configurations of its block-scaled FP8 matmul, in cuBLASLt's numbering
// (cublasLtMatmulAlgoConfigAttributes_t): the algorithm id, tile, stage count, cluster shape, CTA
// swizzle and custom option. algo < 0: the heuristic's pick. Where few row tiles fill the GPU
// (q_kv_a at 1024 tokens: 136 tiles of 128 x 128 on 132 SMs) a smaller tile beat that pick by a third.
struct CublasLtConfig {
  int algo = -1, tile = 0, stages = 0, cluster = 0, swizzle = 0, custom = 0;
  bool heuristic() const { return algo < 0; }
  // Spelled out: .cu files include this header as C++17.
  auto fields() const { return std::tie(algo, tile, stages, cluster, swizzle, custom); }
  bool operator==(const CublasLtConfig& o) const { return fields() == o.fields(); }
  bool operator<(const CublasLtConfig& o) const { return fields() < o.fields(); }
};

struct Fp8GemmChoice {
  enum class Kernel { Skinny, Cublaslt, Wgmma };
  Kernel kernel = Kernel::Cublaslt;
  int row_tiles = 0, splits = 0;  // the skinny kernel's launch (cuda/skinny_gemm_fp8.h)
  double ms = 0;                  // the linear behind its input's producer, as tuned (0: not measured)
  int k_warps = 8;                // the skinny launch's warps on K (files without it: 8)
  int depth = 0;                  // the skinny launch's form: 0 x in registers, 2-4 x staged (files without it: 0)
  // The skinny launch takes x as codes the producer wrote (timed behind a producer writing them),
  // not as BF16 rows it quantizes itself (files without it: rows). cuBLASLt always takes codes. In
  // a launch from rows: codes made by a quantization launch first (timed with it).
  bool codes_in = false;
  CublasLtConfig lt{};  // cuBLASLt's configuration (files without it: the heuristic's)
  // The warp-specialized kernel's launch (cuda/fp8_gemm_wgmma.h): 128-token waves a tile, token
  // tiles walked together, CTAs a cluster (2: pairs sharing x's tile by multicast).
  int waves = 0, group_m = 0, cluster = 1;
  bool operator==(const Fp8GemmChoice& o) const {
    return kernel == o.kernel && row_tiles == o.row_tiles && splits == o.splits && k_warps == o.k_warps &&
           depth == o.depth && codes_in == o.codes_in && lt == o.lt && waves == o.waves && group_m == o.group_m &&
           cluster == o.cluster;
  }
};

class Fp8GemmTuning {
 public:
  // Kernel name in the file: which GEMM the choices are for.
  static constexpr const char* kKernelName = "fp8_w8a8_block128";

  // from_rows: where `choice` takes codes (codes_in, or cuBLASLt), the fastest launch from rows.
  void set(int64_t N, int64_t K, int64_t tokens, const Fp8GemmChoice& choice,
           const std::optional<Fp8GemmChoice>& from_rows = std::nullopt);
  // Every entry of `other`, over this table's.
  void merge(const Fp8GemmTuning& other);
  // The choice tuned for the token count nearest to `tokens` (the smaller on a tie) of shape
  // (N, K); nothing if the shape was not tuned. A token count past the largest tuned one by more
  // than half of it gets nothing either: a choice made for 16 tokens says nothing about 4096.
  std::optional<Fp8GemmChoice> find(int64_t N, int64_t K, int64_t tokens) const;
  // The same entry's launch for an input that comes as BF16 rows: its from_rows where it has one,
  // else the choice.
  std::optional<Fp8GemmChoice> find_from_rows(int64_t N, int64_t K, int64_t tokens) const;
  size_t shapes() const { return table_.size(); }
  const std::string& device() const { return device_; }
  void set_device(std::string d) { device_ = std::move(d); }

  nlohmann::json to_json() const;
  // Errors name what is wrong (`what`: the file, for messages).
  static Fp8GemmTuning from_json(const nlohmann::json& j, const std::string& what);
  static Fp8GemmTuning load(const std::string& path);
  void save(const std::string& path) const;

  // "fp8_gemm_NVIDIA_H200.json" for "NVIDIA H200": the device name with every character other than
  // letters, digits, '-' and '.' as '_'.
  static std::string file_name(const std::string& device);
  // That file in tuning_dir(dir_flag), where the runtime reads it and the tuner writes it.
  static std::string path(const std::string& dir_flag, const std::string& device);

 private:
  struct Entry {
    Fp8GemmChoice choice;
    std::optional<Fp8GemmChoice> from_rows;
  };
  const Entry* entry(int64_t N, int64_t K, int64_t tokens) const;

  std::string device_;
  std::map<std::pair<int64_t, int64_t>, std::map<int64_t, Entry>> table_;
};

// "skinny row_tiles=1 splits=1 k_warps=8 depth=0 x=codes", "cublaslt", "cublaslt algo=66 tile=17 ...", or
// "wgmma waves=2 group_m=8" (" cluster=2" where pairs).
std::string to_string(const Fp8GemmChoice& c);
std::string to_string(const CublasLtConfig& c);

}  // namespace mlaserve
