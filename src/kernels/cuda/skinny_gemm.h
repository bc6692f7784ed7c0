// out[T, N] = x[T, K] · W[N, K]^T for the few rows of a decode step (T <= 8), where a GEMM
// library's tiles leave most of the GPU idle: the weight is streamed once at memory speed.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

// Past 8 rows the tokens are re-read for every 16 weight rows as many bytes as the weight itself
// (measured slower than cuBLASLt at T = 16 on an H200).
constexpr int64_t kSkinnyGemmMaxRows = 8;

constexpr int kSkinnyGemmMaxSplits = 8;

// Split-K of narrow outputs: `splits` CTAs per 16 rows. With splits > 1 the kernel needs
// `partials` (skinny_gemm_partial_floats) and one zeroed counter per 16 rows, which it leaves
// zeroed again.
struct SkinnySplit {
  int splits = 1;
  float* partials = nullptr;
  int* counters = nullptr;
};
int skinny_gemm_splits(int64_t N, int64_t K, int num_sms);
size_t skinny_gemm_partial_floats(int64_t N, int splits);

// A block's first linear at one token with its input's RMSNorm folded in (skinny_gemm.cu): the
// kernel reads x (+ residual) as its row r and computes out = rmsnorm(r) * weight · W^T, one split
// only. residual_out (not aliasing residual) gets r where residual is given; normed, where given,
// gets rmsnorm(r) * weight. All BF16, K wide, 16-byte aligned.
struct SkinnyNorm {
  const __nv_bfloat16* weight = nullptr;
  float eps = 0.f;
  const __nv_bfloat16* residual = nullptr;
  __nv_bfloat16* residual_out = nullptr;
  __nv_bfloat16* normed = nullptr;
};

// Whether folding the norm pays (measured) and fits (one token, K <= kSkinnyNormMaxK, one split, one
// wave of CTAs), given skinny_gemm_fits.
constexpr int64_t kSkinnyNormMaxK = 2048;  // a piece of 8 values a thread (V2-Lite's hidden size)
bool skinny_norm_fits(int64_t T, int64_t N, int64_t K, int num_sms);

// Whether the kernel takes these operands: T <= 8, K % 8 == 0, 16-byte aligned rows.
bool skinny_gemm_fits(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t T, int64_t K);
// x, w BF16; out BF16 or F32 (out_f32); strides in elements. norm: see SkinnyNorm.
void launch_skinny_gemm(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                        int64_t T, int64_t N, int64_t K, SkinnySplit split, cudaStream_t stream,
                        const SkinnyNorm* norm = nullptr);

}  // namespace mlaserve::cuda
