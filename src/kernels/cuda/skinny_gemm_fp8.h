// FP8 W8A8 linear for the few rows of a decode step (T <= 16): out[T, N] = x[T, K] · W[N, K]^T
// with W e4m3 in 128 x 128 blocks (one fp32 scale each) and x BF16, quantized inside the kernel per
// token per 128 channels as launch_quantize_fp8_per_token_group does (so no separate
// quantization launch, and no padding of the tokens to cuBLASLt's 16). The weight streams once.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/skinny_gemm.h"

namespace mlaserve::cuda {

constexpr int64_t kSkinnyFp8MaxRows = 16;
// Where nothing is tuned the op takes the skinny kernel up to this many tokens: with two token
// tiles (9-16) it was slower than cuBLASLt on most of DeepSeek-V3's large shapes (H200).
constexpr int64_t kSkinnyFp8DefaultMaxRows = 8;

// A launch's shape: each CTA (8 warps, splitting K in 128-wide blocks) owns 16 * row_tiles weight
// rows, and `splits` CTAs share those rows' K range (partials added by the last to finish).
struct SkinnyFp8Config {
  int row_tiles = 4;  // 1, 2 or 4
  int splits = 1;     // 1 .. kSkinnyGemmMaxSplits
  bool operator==(const SkinnyFp8Config& o) const { return row_tiles == o.row_tiles && splits == o.splits; }
};
std::string to_string(const SkinnyFp8Config& c);

// Whether the kernel takes these operands: 1 <= T <= 16, K a multiple of 128, N of 16, 16-byte
// aligned rows.
bool skinny_gemm_fp8_fits(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t T, int64_t N, int64_t K);
// Whether a configuration is one the kernel has (row_tiles 1/2/4, splits 1..8, no more splits than
// K-blocks).
bool skinny_gemm_fp8_valid(const SkinnyFp8Config& c, int64_t K);
// The configuration used where no tuned one exists (tune-fp8-gemm measures the others).
SkinnyFp8Config skinny_gemm_fp8_default(int64_t N, int64_t K, int num_sms);
// Row blocks of a launch (split-K counters needed when splits > 1) and the partial floats it needs.
int64_t skinny_gemm_fp8_blocks(int64_t N, const SkinnyFp8Config& c);
size_t skinny_gemm_fp8_partial_floats(int64_t N, int64_t T, const SkinnyFp8Config& c);

// x BF16 [T, K] (row stride ldx); w e4m3 [N, K] (row stride ldw); w_scales fp32 [N / 128, K / 128]
// with row stride ldws; out BF16 or F32 (out_f32) with row stride ldo. split.splits must equal
// c.splits; with splits > 1, split.partials holds skinny_gemm_fp8_partial_floats and
// split.counters one zeroed int per row block (left zeroed).
void launch_skinny_gemm_fp8(const void* x, int64_t ldx, const void* w, int64_t ldw, const float* w_scales,
                            int64_t ldws, void* out, int64_t ldo, bool out_f32, int64_t T, int64_t N, int64_t K,
                            const SkinnyFp8Config& c, SkinnySplit split, cudaStream_t stream);

}  // namespace mlaserve::cuda
