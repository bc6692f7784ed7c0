// What every cuBLASLt user here shares: a handle with its workspace, and a matmul plan (the
// description, operand layouts and the algorithm the heuristic chose) that destroys itself.
// Runners keep plans per shape, so the heuristic runs once per shape.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/cuda_check.h"

namespace mlaserve::cuda {

struct CublasLtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // d = c
  cublasLtMatmulAlgo_t algo{};

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
  // c = a · b (with the plan's transposes), alpha 1, beta 0.
  void matmul(const CublasLtPlan& plan, const void* a, const void* b, void* c, cudaStream_t stream);

 private:
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_;
};

}  // namespace mlaserve::cuda
