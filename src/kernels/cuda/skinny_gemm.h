// out[T, N] = x[T, K] · W[N, K]^T for the few rows of a decode step (T <= 8), where a GEMM
// library's tiles leave most of the GPU idle: the weight is streamed once at memory speed.
#pragma once

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

// Whether the kernel takes these operands: T <= 8, K % 8 == 0, 16-byte aligned rows.
bool skinny_gemm_fits(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t T, int64_t K);
// x, w BF16; out BF16 or F32 (out_f32); strides in elements.
void launch_skinny_gemm(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                        int64_t T, int64_t N, int64_t K, SkinnySplit split, cudaStream_t stream);

}  // namespace mlaserve::cuda
