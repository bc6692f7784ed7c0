// What the grouped expert GEMM kernels (moe_grouped_gemm.cu: mma.sync, moe_grouped_gemm_wgmma.cu,
// moe_grouped_gemm_fp8.cu, moe_grouped_gemm_fp8_wgmma.cu) share: the shared-memory tile layout, the
// search that gives a block its expert and rows, and what an FP8 block streams.
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"

namespace mlaserve::cuda::moe_tiles {

// Tiles are K-slices 64 BF16 (128 bytes) wide: row r's 16-byte chunk c sits at chunk c ^ (r % 8).
// ldmatrix then touches 8 distinct bank groups per phase, and it is the 128-byte swizzle layout
// that wgmma's descriptors read (wgmma.cuh).
constexpr int kBK = 64;

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, kBK] tile.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

// The expert and first row of row tile `tile` (kBM rows of one expert), from the tile counts'
// prefix sum: thread t holds experts 2t and 2t + 1, a warp-shuffle scan per warp, then the warp
// totals. Every thread of the block calls it; false when the tile is past the last expert's rows.
template <int kBM, int kThreads>
__device__ bool find_tile(const int32_t* offsets, int E, int tile, int& expert, int& row0, int& row_end) {
  static_assert(2 * kThreads >= kMoeGroupedMaxExperts, "two experts a thread");
  constexpr int kWarps = kThreads / 32;
  __shared__ int s_warp[kWarps];
  __shared__ int s_hit[3];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid == 0) s_hit[0] = -1;
  int begin[2] = {0, 0}, end[2] = {0, 0}, n_tiles[2] = {0, 0};
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    int e = 2 * tid + j;
    if (e < E) {
      begin[j] = offsets[e];
      end[j] = offsets[e + 1];
      n_tiles[j] = (end[j] - begin[j] + kBM - 1) / kBM;
    }
  }
  int mine = n_tiles[0] + n_tiles[1], incl = mine;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += s_warp[w];
  int first = before + incl - mine;  // the first tile of expert 2 tid
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    if (2 * tid + j < E && tile >= first && tile < first + n_tiles[j]) {
      s_hit[0] = 2 * tid + j;
      s_hit[1] = begin[j] + (tile - first) * kBM;
      s_hit[2] = end[j];
    }
    first += n_tiles[j];
  }
  __syncthreads();
  expert = s_hit[0];
  row0 = s_hit[1];
  row_end = s_hit[2];
  return expert >= 0;
}

// Row tiles the grid must cover: at most max_rows / kBM full ones plus one partial per expert.
inline int64_t max_row_tiles(int64_t max_rows, int64_t num_experts, int kBM) {
  return (max_rows + kBM - 1) / kBM + (num_experts < max_rows ? num_experts : max_rows);
}

// What an FP8 block streams: K-blocks [kb_begin, kb_end) (its grid.z range) of each of its
// column tiles of 128 (grid.x), n_tile_first and the next ones, steps = tiles x K-blocks in all;
// and where a tile's weights and weight scales lie for its expert (w_hi's rows from n_split on).
struct Fp8BlockSpan {
  static constexpr int kTileN = 128, kBlockK = 128;
  int kb_begin, kb_end, k_tiles, n_tile_first, steps;
  const uint8_t *w_lo, *w_hi;
  const float *s_lo, *s_hi;
  // Byte strides of the expert's weights: between a block's rows, and from K-block to K-block.
  int32_t row_stride, kb_stride;  // 32-bit: K < 2^20 (a K-block's offset is then below 2^27)

  __device__ Fp8BlockSpan(const MoeFp8GemmParams& p, int expert) {
    const int KB = p.K / kBlockK, splits = p.launch.k_splits;
    kb_begin = int(blockIdx.z) * KB / splits, kb_end = (int(blockIdx.z) + 1) * KB / splits;
    k_tiles = kb_end - kb_begin;
    n_tile_first = int(blockIdx.x) * p.launch.n_tiles_per_block;
    steps = min(p.launch.n_tiles_per_block, p.N / kTileN - n_tile_first) * k_tiles;
    w_lo = static_cast<const uint8_t*>(p.w[expert]);
    w_hi = p.w_hi ? static_cast<const uint8_t*>(p.w_hi[expert]) : nullptr;
    s_lo = p.w_scale[expert];
    s_hi = p.w_hi ? p.w_hi_scale[expert] : nullptr;
    const bool tiled = expert < p.tiled_experts;
    row_stride = tiled ? kBlockK : p.K;
    kb_stride = tiled ? kTileN * kBlockK : kBlockK;
  }
  // Weight row 0 of the column tile from column n0 (its K-block 0: row r of K-block kb lies at
  // w + kb * kb_stride + r * row_stride), and its row of block scales. A column tile's 128 rows
  // span 128 K bytes in either layout.
  struct Tile {
    const uint8_t* w;
    const float* scale;
  };
  __device__ Tile tile(const MoeFp8GemmParams& p, int n0) const {
    const bool hi = w_hi != nullptr && n0 >= p.n_split;
    const int row0 = hi ? n0 - p.n_split : n0;
    return {(hi ? w_hi : w_lo) + int64_t(row0) * p.K, (hi ? s_hi : s_lo) + int64_t(row0 / kTileN) * p.ld_w_scale};
  }
};

}  // namespace mlaserve::cuda::moe_tiles
