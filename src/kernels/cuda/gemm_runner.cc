#include "kernels/cuda/gemm_runner.h"

namespace mlaserve::cuda {

// cuBLASLt is column-major: the row-major out[T, N] is the column-major [N, T] = W · x^T, where
// the row-major W[N, K] reads as a column-major [K, N] matrix transposed.
const CublasLtPlan& GemmRunner::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto [T, N, K, ldx, ldw, ldo, out_f32] = key;
  auto p = std::make_unique<CublasLtPlan>();
  p->describe(/*trans_a=*/true, /*trans_b=*/false);
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, K, N, ldw));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, K, T, ldx));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, T, ldo));
  MLA_CHECK(lt_.choose_algorithm(*p), "cuBLASLt has no BF16 algorithm for T={} N={} K={}", T, N, K);
  return *(plans_[key] = std::move(p));
}

void GemmRunner::bf16_nt(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                         int64_t T, int64_t N, int64_t K, cudaStream_t stream) {
  lt_.matmul(plan({T, N, K, ldx, ldw, ldo, out_f32}), w, x, out, stream);
}

}  // namespace mlaserve::cuda
