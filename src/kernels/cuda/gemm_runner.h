// BF16 and block-scaled FP8 GEMMs through cuBLASLt: out[T, N] = x[T, K] · W[N, K]^T with fp32
// accumulation. The heuristic's algorithm is looked up once per (T, N, K, strides) and cached.
#pragma once

#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/cuda/cublaslt.h"

namespace mlaserve::cuda {

class GemmRunner {
 public:
  explicit GemmRunner(size_t workspace_bytes = 32u << 20) : lt_(workspace_bytes) {}
  // Row-major operands; ld* are row strides in elements. out may be BF16 or F32 (out_f32).
  void bf16_nt(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
               int64_t T, int64_t N, int64_t K, cudaStream_t stream);
  // out[T, N] = x · W^T in FP8 with block scales, fp32 accumulation: x e4m3 [T, K] with one scale
  // per token per 128 channels, token-contiguous (x_scales [K/128, T]), W e4m3 [N, K] with one
  // scale per 128 x 128 block (w_scales [N/128, K/128]); value = e4m3 * scale on both sides. N and
  // K multiples of 128, T of 16 (what cuBLASLt's block-scaled kernels take). `config`: one of
  // fp8_configs' (tune-fp8-gemm's pick), else the heuristic's; one cuBLASLt rejects here falls back
  // to the heuristic's with a warning.
  void fp8_block_nt(const void* x, int64_t ldx, const float* x_scales, const void* w, int64_t ldw,
                    const float* w_scales, void* out, int64_t ldo, bool out_f32, int64_t T, int64_t N, int64_t K,
                    cudaStream_t stream, const CublasLtConfig& config = {});
  // Every configuration cuBLASLt accepts for that product, or those of `among` (CublasLt::configs).
  std::vector<CublasLtConfig> fp8_configs(const float* x_scales, int64_t ldx, const float* w_scales, int64_t ldw,
                                          int64_t ldo, bool out_f32, int64_t T, int64_t N, int64_t K,
                                          const std::vector<CublasLtConfig>* among = nullptr);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  const CublasLtPlan& plan(const Key& key);
  CublasLtPlan& fp8_plan(const Key& key, const CublasLtConfig& config, const float* x_scales,
                         const float* w_scales);
  static void set_fp8_scales(CublasLtPlan& p, const float* x_scales, const float* w_scales);

  CublasLt lt_;
  std::map<Key, std::unique_ptr<CublasLtPlan>> plans_;
  std::map<std::pair<Key, CublasLtConfig>, std::unique_ptr<CublasLtPlan>> fp8_plans_;
};

}  // namespace mlaserve::cuda
