#include "kernels/cuda/cublaslt.h"

namespace mlaserve::cuda {

CublasLtPlan::~CublasLtPlan() {
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (op) cublasLtMatmulDescDestroy(op);
}

void CublasLtPlan::describe(bool trans_a, bool trans_b) {
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
}

CublasLt::CublasLt(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  CUBLAS_CHECK(cublasLtCreate(&handle_));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

CublasLt::~CublasLt() {
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

bool CublasLt::choose_algorithm(CublasLtPlan& plan, uint32_t alignment) {
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes_,
                                                    sizeof(workspace_bytes_)));
  if (alignment > 0)
    for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
      CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &alignment, sizeof(alignment)));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(handle_, plan.op, plan.a, plan.b, plan.c, plan.c, pref, 1, &result,
                                              &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (found > 0) plan.algo = result.algo;
  return found > 0;
}

void CublasLt::matmul(const CublasLtPlan& p, const void* a, const void* b, void* c, cudaStream_t stream) {
  float alpha = 1.0f, beta = 0.0f;
  CUBLAS_CHECK(cublasLtMatmul(handle_, p.op, &alpha, a, p.a, b, p.b, &beta, c, p.c, c, p.c, &p.algo, workspace_,
                              workspace_bytes_, stream));
}

}  // namespace mlaserve::cuda
