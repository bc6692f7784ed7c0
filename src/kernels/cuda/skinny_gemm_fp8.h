// FP8 W8A8 linear for the few rows of a decode step: out[T, N] = x[T, K] · W[N, K]^T with W e4m3 in
// 128 x 128 blocks (one fp32 scale each) and x BF16, quantized inside the kernel per token per 128
// channels as launch_quantize_fp8_per_token_group does (so no separate quantization launch, and no
// padding of the tokens to cuBLASLt's 16), or x quantized already by the kernel that made it. The
// weight streams once. Up to 16 tokens a second form stages x in shared memory first
// (SkinnyFp8Config::depth).
//
// Batched (grid z), it is also the FP8 BMM of the absorbed MLA projections: one such product a
// head, the heads' weights, scales, inputs and outputs at fixed strides. Past 16 tokens the tokens
// run in tiles of 16 (CTAs of one weight tile side by side, so the weight comes from HBM once and
// from L2 after).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/skinny_gemm.h"

namespace mlaserve::cuda {

// Tokens a CTA takes (more run in tiles of this many).
constexpr int64_t kSkinnyFp8MaxRows = 16;
// Where nothing is tuned the linear takes the skinny kernel up to this many tokens: with two token
// tiles (9-16) it was slower than cuBLASLt on most of DeepSeek-V3's large shapes (H200).
constexpr int64_t kSkinnyFp8DefaultMaxRows = 8;

// A launch's shape. A CTA has 8 warps: k_warps of them split the K-blocks (128 wide) of the same
// rows, and 8 / k_warps take rows of their own, 16 * row_tiles each; `splits` CTAs share those rows'
// K range (partials added by the last to finish). Long K wants all 8 warps on K; short K (the
// absorbed products' 128 or 512) wants the warps on rows.
struct SkinnyFp8Config {
  int row_tiles = 4;  // 1, 2 or 4
  int splits = 1;     // 1 .. kSkinnyGemmMaxSplits
  int k_warps = 8;    // 1, 2, 4 or 8
  // 0: x read in the loop as weights are (any tokens). 2-4 (up to 16 tokens): x staged in shared
  // memory first, and each warp's weights through a ring of this many K-blocks (row_tiles 1 or 2;
  // 4 takes 2).
  int depth = 0;
  bool operator==(const SkinnyFp8Config& o) const {
    return row_tiles == o.row_tiles && splits == o.splits && k_warps == o.k_warps && depth == o.depth;
  }
};
std::string to_string(const SkinnyFp8Config& c);

// One launch's operands. Batch b (< batch) reads x + b * x_batch, w + b * w_batch (bytes),
// w_scales + b * ws_batch and writes out + b * out_batch (elements of their types).
struct SkinnyFp8Problem {
  const void* x;  // BF16 [T, K], or e4m3 [T, K] quantized already (x_scales set); row stride ldx
  int64_t ldx;
  const void* w;  // e4m3 [N, K], row stride ldw
  int64_t ldw;
  const float* w_scales;  // [N / 128, K / 128], row stride ldws
  int64_t ldws;
  void* out;  // BF16 or F32 (out_f32) [T, N], row stride ldo
  int64_t ldo;
  bool out_f32;
  int64_t T, N, K;
  int64_t batch = 1, x_batch = 0, w_batch = 0, ws_batch = 0, out_batch = 0;
  // x's per-token-group scales when x comes quantized (one batch only): scale (t, kb) at
  // x_scales[t * xs_t + kb * xs_g]. The kernel then reads half the activation bytes and skips the
  // quantization (which every CTA of a row block repeats otherwise).
  const float* x_scales = nullptr;
  int64_t xs_t = 0, xs_g = 0;
};

// Whether the kernel takes these operands: T >= 1, K a multiple of 128, N of 16, 16-byte aligned
// rows and batches; a quantized x in one batch.
bool skinny_gemm_fp8_fits(const SkinnyFp8Problem& p);
// Whether a configuration is one the kernel has (row_tiles 1/2/4, k_warps 1/2/4/8, splits 1..8, no
// more splits than K-blocks; depth 0, or 2-4 with row_tiles 1-2, 2 with 4).
bool skinny_gemm_fp8_valid(const SkinnyFp8Config& c, int64_t K);
// Whether the staged form (depth > 0) takes these operands: up to 16 tokens whose K range a split
// fits shared memory.
bool skinny_gemm_fp8_staged_fits(int64_t T, int64_t K, const SkinnyFp8Config& c);
// The configuration used where no tuned one exists (tune-fp8-gemm measures the others).
SkinnyFp8Config skinny_gemm_fp8_default(int64_t N, int64_t K, int64_t T, int64_t batch, int num_sms);
void launch_skinny_gemm_fp8(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, cudaStream_t stream);

}  // namespace mlaserve::cuda
