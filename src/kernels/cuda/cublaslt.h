// What every cuBLASLt user here shares: a handle with its workspace, and a matmul plan (the
// description, operand layouts and the algorithm the heuristic chose) that destroys itself.
// Runners keep plans per shape, so the heuristic runs once per shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kernels/cuda/cuda_check.h"
#include "kernels/gemm_tuning.h"

namespace mlaserve::cuda {

struct CublasLtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // d = c
  cublasLtMatmulAlgo_t algo{};
  // What the layouts hold: A and B's element type, C and D's (D = C). Compute and scale are fp32.
  cudaDataType_t ab_type = CUDA_R_16BF, cd_type = CUDA_R_16BF;

  CublasLtPlan() = default;
  CublasLtPlan(const CublasLtPlan&) = delete;
  CublasLtPlan& operator=(const CublasLtPlan&) = delete;
  ~CublasLtPlan();
  // fp32 accumulation and scale, with the given transposes of A and B.
  void describe(bool trans_a, bool trans_b);
};

class CublasLt {
 public:
  explicit CublasLt(size_t workspace_bytes = 32u << 20);
  ~CublasLt();
  CublasLt(const CublasLt&) = delete;
  CublasLt& operator=(const CublasLt&) = delete;

  // Sets plan.algo to the heuristic's first choice; `alignment` > 0 promises that many bytes of
  // alignment for every operand. False when cuBLASLt has no algorithm for the plan.
  bool choose_algorithm(CublasLtPlan& plan, uint32_t alignment = 0);
  // Sets plan.algo to `config` (CublasLtConfig: cuBLASLt's numbering) where cuBLASLt accepts it for
  // the plan (cublasLtMatmulAlgoCheck, within the workspace); false, plan unchanged, where not.
  bool use_config(CublasLtPlan& plan, const CublasLtConfig& config);
  // Every configuration cuBLASLt accepts for the plan: each algorithm id it lists for the plan's
  // types, times each tile, stage count, cluster shape (up to 4 CTAs), CTA swizzle and custom option
  // that id supports. Accepted is not correct: some compute wrong products (tune-fp8-gemm checks).
  // `among` given: only those of `among` cuBLASLt accepts for the plan, each checked alone (the full
  // enumeration costs seconds of host time; tune-fp8-gemm re-checks one shape's at each token count).
  std::vector<CublasLtConfig> configs(const CublasLtPlan& plan, const std::vector<CublasLtConfig>* among = nullptr);
  // c = a · b (with the plan's transposes), alpha 1, beta 0.
  void matmul(const CublasLtPlan& plan, const void* a, const void* b, void* c, cudaStream_t stream);

 private:
  // Whether cuBLASLt runs `algo` for the plan (cublasLtMatmulAlgoCheck) within the workspace.
  bool accepts(const CublasLtPlan& plan, const cublasLtMatmulAlgo_t& algo) const;
  // `config`'s algorithm for the plan where cuBLASLt accepts it; nothing where not.
  std::optional<cublasLtMatmulAlgo_t> accepted_algo(const CublasLtPlan& plan, const CublasLtConfig& config) const;
  // configs without `among`: every combination of attributes, each checked.
  std::vector<CublasLtConfig> enumerate_configs(const CublasLtPlan& plan) const;

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
};

}  // namespace mlaserve::cuda
