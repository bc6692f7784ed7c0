#include "kernels/cuda/gemm_runner.h"

namespace mlaserve::cuda {

struct GemmRunner::Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo;
};

GemmRunner::GemmRunner(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

GemmRunner::~GemmRunner() {
  for (auto& [key, p] : plans_) {
    cublasLtMatrixLayoutDestroy(p->a);
    cublasLtMatrixLayoutDestroy(p->b);
    cublasLtMatrixLayoutDestroy(p->c);
    cublasLtMatmulDescDestroy(p->op);
    delete p;
  }
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// cuBLASLt is column-major: the row-major out[T, N] is the column-major [N, T] = W · x^T, where
// the row-major W[N, K] reads as a column-major [K, N] matrix transposed.
GemmRunner::Plan& GemmRunner::plan(const Key& key) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  auto [T, N, K, ldx, ldw, ldo, out_f32] = key;
  auto p = new Plan;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t transa = CUBLAS_OP_T, transb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &transa, sizeof(transa)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &transb, sizeof(transb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, K, N, ldw));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, K, T, ldx));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, T, ldo));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  MLA_CHECK(found > 0, "cuBLASLt has no BF16 algorithm for T={} N={} K={}", T, N, K);
  p->algo = result.algo;
  plans_[key] = p;
  return *p;
}

void GemmRunner::bf16_nt(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                         int64_t T, int64_t N, int64_t K, cudaStream_t stream) {
  Plan& p = plan({T, N, K, ldx, ldw, ldo, out_f32});
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, w, p.a, x, p.b, &beta, out, p.c, out, p.c, &p.algo, workspace_,
                              workspace_bytes_, stream));
}

}  // namespace mlaserve::cuda
