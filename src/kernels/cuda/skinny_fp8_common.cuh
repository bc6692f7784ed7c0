// What the two forms of the skinny FP8 GEMM (skinny_gemm_fp8.cu: x read in the loop;
// skinny_gemm_fp8_staged.cu: x staged in shared memory) share: the per-token-group quantization of
// x as fp8_quant.cu does it, and the CTA's reduction and store.
#pragma once

#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "common/dtype.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/skinny_gemm_fp8.h"

namespace mlaserve::cuda::skinny_fp8 {

namespace cg = cooperative_groups;

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8, kBlockK = 128;

// x / s from the reciprocal r = 1 / s, corrected once by the product's residual: the IEEE quotient
// but for rare last-bit cases, far below the e4m3 rounding that follows. IEEE division cost most
// of this kernel's time, and zero values (tokens past T) took its slow path in every lane.
__device__ __forceinline__ float divide(float x, float s, float r) {
  const float q = x * r;
  return fmaf(fmaf(-q, s, x), r, q);
}

// Two BF16 values (low half first) over the scale, as two e4m3 codes in the low 16 bits.
__device__ __forceinline__ uint32_t quantize_pair(uint32_t two, float s, float r) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&two));
  return __nv_cvt_float2_to_fp8x2(make_float2(divide(f.x, s, r), divide(f.y, s, r)), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float abs_max_pair(float m, uint32_t two) {
  const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&two));
  return fmaxf(m, fmaxf(fabsf(f.x), fabsf(f.y)));
}

// The CTA's sums: each warp's accumulators through shared memory (red, [kWarps][kPairs]), added
// over a row group's WK warps; with split K the cluster's partials added by its first block; then
// BF16 or F32 out.
template <int RT, int NT, int WK>
__device__ __forceinline__ void reduce_and_store(const float (&acc)[RT][NT][4], float* red, int T, int token_tile,
                                                 int cta_n0, int N, void* out, int64_t ldo, bool out_f32,
                                                 int64_t out_batch) {
  constexpr int WR = kWarps / WK;
  constexpr int kPairs = RT * NT * 4 * 32;
  constexpr int kOut = WR * kPairs;
  constexpr int kPerThread = (kOut + kWarps * 32 - 1) / (kWarps * 32);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int rt = 0; rt < RT; ++rt)
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[warp * kPairs + ((rt * NT + j) * 4 + i) * 32 + lane] = acc[rt][j][i];
  __syncthreads();
  // Sum f of the CTA is output (token f / kRows, row f % kRows): consecutive threads take
  // consecutive rows of a token, so the stores below coalesce. Its accumulator: row r = q * 16 RT +
  // rt * 16 + g' + 8 (i >= 2) of warp row group q, token 8 j + 2 t4' + (i & 1), in entry
  // (rt, j, i) of lane (g', t4'); added over the group's WK warps.
  constexpr int kRows = 16 * RT * WR;
  float sum[kPerThread];
#pragma unroll
  for (int m = 0; m < kPerThread; ++m) {
    const int f = threadIdx.x + m * kWarps * 32;
    sum[m] = 0.f;
    if (f >= kOut) continue;
    const int t = f / kRows, r = f % kRows, q = r / (16 * RT), rt = (r / 16) % RT, rr = r % 16;
    const int i = (rr >= 8 ? 2 : 0) + (t & 1), e = (rt * NT + t / 8) * 4 + i, ln = (rr % 8) * 4 + (t % 8) / 2;
#pragma unroll
    for (int v = 0; v < WK; ++v) sum[m] += red[(q * WK + v) * kPairs + e * 32 + ln];
  }
  if (gridDim.y > 1) {
    // The splits of these rows run as one cluster (gridDim.y blocks along y): each leaves its sums
    // in shared memory, and the first adds all of them in split order (the same bits every run) and
    // stores. No partials go through L2 and nothing counts arrivals.
    __syncthreads();  // every warp is done reading red
#pragma unroll
    for (int m = 0; m < kPerThread; ++m) {
      const int f = threadIdx.x + m * kWarps * 32;
      if (f < kOut) red[f] = sum[m];
    }
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    const bool first = cluster.block_rank() == 0;
    if (first) {
#pragma unroll
      for (int m = 0; m < kPerThread; ++m) {
        const int f = threadIdx.x + m * kWarps * 32;
        if (f >= kOut) continue;
        sum[m] = 0.f;
        for (int v = 0; v < int(cluster.num_blocks()); ++v) sum[m] += *cluster.map_shared_rank(red + f, v);
      }
    }
    cluster.sync();  // a block's shared memory outlives the first block's reads of it
    if (!first) return;
  }
  const int64_t out_offset = blockIdx.z * out_batch + int64_t(token_tile) * 8 * NT * ldo;
#pragma unroll
  for (int m = 0; m < kPerThread; ++m) {
    const int f = threadIdx.x + m * kWarps * 32;
    const int t = f / kRows, row = cta_n0 + f % kRows;
    if (f >= kOut || row >= N || t >= T) continue;
    const int64_t o = out_offset + int64_t(t) * ldo + row;
    if (out_f32)
      static_cast<float*>(out)[o] = sum[m];
    else
      static_cast<bf16*>(out)[o] = __float2bfloat16(sum[m]);
  }
}

// A warp's RT 16-row tiles of the weight, as thread (g = lane / 4, t4 = lane % 4) reads them:
// rows g and g + 8 of each tile from byte 16 t4 (rows past N read as zeros), and each tile's row
// of block scales.
template <int RT>
struct WeightRows {
  const uint8_t* row[RT][2];
  bool ok[RT][2];
  const float* scales[RT];

  __device__ __forceinline__ WeightRows(const uint8_t* w, int64_t ldw, const float* ws, int64_t ldws, int n0, int N,
                                        int g, int t4) {
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int n = n0 + rt * 16 + g + 8 * r;
        ok[rt][r] = n < N;
        row[rt][r] = w + int64_t(ok[rt][r] ? n : 0) * ldw + t4 * 16;
      }
      scales[rt] = ws + int64_t(min(n0 + rt * 16, N - 1) / 128) * ldws;
    }
  }
  // K-block kb: the thread's 16 bytes of each 64-byte half of its rows, [tile][row g, g + 8][half],
  // and the tiles' scales.
  __device__ __forceinline__ void load(uint4 (&dst)[RT][2][2], float (&scale)[RT], int kb) const {
    const uint4 zero = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          dst[rt][r][h] = ok[rt][r] ? load_weight_once(row[rt][r] + kb * kBlockK + 64 * h) : zero;
      scale[rt] = __ldg(scales[rt] + kb);
    }
  }
};

// One 16-row tile's K-block (rows g and g + 8, [row][half] as WeightRows::load gives them) against
// one token tile's codes of the same K-block ([half], 16 bytes each): four m16n8k32 MMAs into d.
__device__ __forceinline__ void mma_kblock(float (&d)[4], const uint4 (&w)[2][2], const uint4 (&x)[2]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint4 a = w[0][h], b = w[1][h];
    mma::mma_e4m3(d, {a.x, b.x, a.y, b.y}, x[h].x, x[h].y);
    mma::mma_e4m3(d, {a.z, b.z, a.w, b.w}, x[h].z, x[h].w);
  }
}

// Rows a CTA takes.
inline int64_t row_blocks(int64_t N, const SkinnyFp8Config& c) {
  const int64_t rows = 16 * c.row_tiles * (kWarps / c.k_warps);
  return (N + rows - 1) / rows;
}

// The staged form's launch (skinny_gemm_fp8_staged.cu), for launch_skinny_gemm_fp8.
void launch_staged(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, int64_t row_blocks, cudaStream_t stream);

}  // namespace mlaserve::cuda::skinny_fp8
