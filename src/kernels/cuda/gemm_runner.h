// BF16 GEMMs through cuBLASLt: out[T, N] = x[T, K] · W[N, K]^T with fp32 accumulation. The
// heuristic's algorithm is looked up once per (T, N, K, strides) and cached.
#pragma once

#include <map>
#include <tuple>

#include <memory>

#include "kernels/cuda/cublaslt.h"

namespace mlaserve::cuda {

class GemmRunner {
 public:
  explicit GemmRunner(size_t workspace_bytes = 32u << 20) : lt_(workspace_bytes) {}
  // Row-major operands; ld* are row strides in elements. out may be BF16 or F32 (out_f32).
  void bf16_nt(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
               int64_t T, int64_t N, int64_t K, cudaStream_t stream);

 private:
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool>;
  const CublasLtPlan& plan(const Key& key);

  CublasLt lt_;
  std::map<Key, std::unique_ptr<CublasLtPlan>> plans_;
};

}  // namespace mlaserve::cuda
