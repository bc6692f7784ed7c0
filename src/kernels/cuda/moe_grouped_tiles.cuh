// What the grouped expert GEMM kernels (moe_grouped_gemm.cu: mma.sync, moe_grouped_gemm_wgmma.cu,
// moe_grouped_gemm_fp8.cu) share: the shared-memory tile layout and the search that gives a block
// its expert and rows.
#pragma once

#include <cstdint>

#include "kernels/cuda/moe_grouped_gemm.h"

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

}  // namespace mlaserve::cuda::moe_tiles
