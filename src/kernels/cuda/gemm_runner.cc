#include "kernels/cuda/gemm_runner.h"

#include <spdlog/spdlog.h>

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
  p->cd_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  MLA_CHECK(lt_.choose_algorithm(*p), "cuBLASLt has no BF16 algorithm for T={} N={} K={}", T, N, K);
  return *(plans_[key] = std::move(p));
}

void GemmRunner::bf16_nt(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                         int64_t T, int64_t N, int64_t K, cudaStream_t stream) {
  lt_.matmul(plan({T, N, K, ldx, ldw, ldo, out_f32}), w, x, out, stream);
}

void GemmRunner::set_fp8_scales(CublasLtPlan& p, const float* x_scales, const float* w_scales) {
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)));
}

// The same column-major reading with e4m3 operands and cuBLASLt's block-scaling modes (CUDA 12.9+,
// Hopper): 128x128 blocks on A (the weight), 128-wide vectors along K on B (the activations). The
// weight's scales are read as stored ([N/128, K/128]); the activations' token-contiguous (measured:
// the other layouts give wrong products). The heuristic's first choice is its only one for these
// modes (CUDA 13.0, V3's shapes at 1024 and 4096 tokens: docs/benchmarks.md, twenty-eighth session);
// tune-fp8-gemm chooses among the configurations cuBLASLt accepts beside it (fp8_configs).
CublasLtPlan& GemmRunner::fp8_plan(const Key& key, const CublasLtConfig& config, const float* x_scales,
                                   const float* w_scales) {
  auto it = fp8_plans_.find({key, config});
  if (it != fp8_plans_.end()) return *it->second;
  auto [T, N, K, ldx, ldw, ldo, out_f32] = key;
  auto p = std::make_unique<CublasLtPlan>();
  p->describe(/*trans_a=*/true, /*trans_b=*/false);
  int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b)));
  set_fp8_scales(*p, x_scales, w_scales);  // the heuristic wants them set
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_8F_E4M3, K, N, ldw));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_8F_E4M3, K, T, ldx));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, T, ldo));
  p->ab_type = CUDA_R_8F_E4M3, p->cd_type = out_f32 ? CUDA_R_32F : CUDA_R_16BF;
  if (config.heuristic() || !lt_.use_config(*p, config)) {
    if (!config.heuristic())
      spdlog::warn("FP8 GEMM T={} N={} K={}: cuBLASLt rejects the tuned {}; using its heuristic's pick", T, N, K,
                   to_string(config));
    MLA_CHECK(lt_.choose_algorithm(*p), "cuBLASLt has no block-scaled FP8 algorithm for T={} N={} K={}", T, N, K);
  }
  return *(fp8_plans_[{key, config}] = std::move(p));
}

std::vector<CublasLtConfig> GemmRunner::fp8_configs(const float* x_scales, int64_t ldx, const float* w_scales,
                                                    int64_t ldw, int64_t ldo, bool out_f32, int64_t T, int64_t N,
                                                    int64_t K, const std::vector<CublasLtConfig>* among) {
  return lt_.configs(fp8_plan({T, N, K, ldx, ldw, ldo, out_f32}, {}, x_scales, w_scales), among);
}

void GemmRunner::fp8_block_nt(const void* x, int64_t ldx, const float* x_scales, const void* w, int64_t ldw,
                              const float* w_scales, void* out, int64_t ldo, bool out_f32, int64_t T, int64_t N,
                              int64_t K, cudaStream_t stream, const CublasLtConfig& config) {
  CublasLtPlan& p = fp8_plan({T, N, K, ldx, ldw, ldo, out_f32}, config, x_scales, w_scales);
  // The scale pointers change per call; a graph captures the ones set here.
  set_fp8_scales(p, x_scales, w_scales);
  lt_.matmul(p, w, x, out, stream);
}

}  // namespace mlaserve::cuda
