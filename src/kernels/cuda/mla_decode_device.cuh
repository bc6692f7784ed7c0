// What the MLA decode kernels share on the device (mla_decode.h has the method): the job record the
// plan writes, where a job's row lives in q and out, and the combine of split jobs.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda::mla {

using bf16 = __nv_bfloat16;

constexpr int kD = kMlaKvDim, kL = kMlaLatentDim, kBN = kMlaBlockKeys;
constexpr int kChunks = kD / 8;  // 16-byte chunks per cache row: 72

struct Job {
  int seq, row0, num_rows, num_tiles, num_keys, first_cta, num_splits, split_offset;
};
static_assert(sizeof(Job) == 8 * sizeof(int32_t));

// The 64-row wgmma kernels keep Q and key tiles in the 128-byte swizzle layout that wgmma reads: a
// 576-wide row is 9 blocks of 64 columns, and block b of a tile holds 64 rows x 128 bytes.
constexpr uint32_t kBlockBytes = 64 * 128;
constexpr uint32_t kTileBytes = kChunks / 8 * kBlockBytes;  // 9 blocks: 73728
// Byte offset of 16-byte chunk c (of 72) of row r (of 64) in a tile or in Q.
__device__ __forceinline__ uint32_t tile_offset(int r, int c) {
  return uint32_t(c >> 3) * kBlockBytes + uint32_t(r) * 128 + uint32_t((c & 7) ^ (r & 7)) * 16;
}

// Zeroes V (blocks 0-7) of the rows from `valid` on of a TMA-written tile: over pages of 64 keys a
// seq's last tile brings rows of its page that nothing wrote, and 0 times a NaN is a NaN. Thread
// `part` of `parts` (all of them call); the fence orders the stores before later async-proxy use.
__device__ __forceinline__ void zero_tile_rows_from(uint8_t* tile, int valid, int part, int parts) {
  if (valid >= kBN) return;
  for (int i = part; i < (kBN - valid) * 64; i += parts) {
    const int r = valid + i / 64, b = (i / 8) % 8, c = i % 8;
    *reinterpret_cast<uint4*>(tile + b * kBlockBytes + r * 128 + c * 16) = make_uint4(0, 0, 0, 0);
  }
  wgmma::fence_async_smem();
}

// Query token of row `row` (of a seq's n * H rows, query-major) and the keys it sees.
struct RowPlace {
  int token, head, visible;
};
__device__ __forceinline__ RowPlace place_row(const MlaDecodeParams& p, const Job& job, int r) {
  int rho = job.row0 + r, i = rho / p.num_heads;
  int q0 = p.query_start[job.seq], n = p.query_start[job.seq + 1] - q0;
  return {q0 + i, rho - i * p.num_heads, p.seq_lens[job.seq] - n + i + 1};
}

// Cache slot of key `key` of the job's seq, or -1 past its keys.
__device__ __forceinline__ int key_slot(const MlaDecodeParams& p, const Job& jb, int key) {
  return key < jb.num_keys ? p.kv_indices[p.kv_start[jb.seq] + key] : -1;
}

// The tile after (idx, jb, tl) in a CTA's run of tiles.
__device__ __forceinline__ void next_tile(const Job* jobs, int& idx, Job& jb, int& tl) {
  if (++tl == jb.num_tiles) jb = jobs[++idx], tl = 0;
}

// Part `part` of `parts` threads sharing a cache row brings it toward L2 (the 128-byte lines the
// row of row_bytes touches): the tile after next, ahead of its cp.async, doubles the bytes in flight
// without the shared memory of a third stage (prefetching a tile further ahead measured slower).
// slot < 0: nothing.
__device__ __forceinline__ void prefetch_row_l2(const void* cache, int row_bytes, int slot, int part, int parts) {
  if (slot < 0) return;
  const uintptr_t row = reinterpret_cast<uintptr_t>(cache) + uintptr_t(slot) * uintptr_t(row_bytes);
  const uintptr_t first = row & ~uintptr_t(127), last = (row + row_bytes - 1) & ~uintptr_t(127);
  for (uintptr_t l = first + uintptr_t(part) * 128; l <= last; l += uintptr_t(parts) * 128)
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(l));
}

// Writes the 256 columns from col0 of rows r0 and r0 + 8 of a 64-row job's O (a warpgroup's m64n256
// accumulators), divided by the row sums l (log2-domain row maxima m): into out, or for a job cut
// between CTAs as partial `slot` with its log2-sum-exp (written where write_lse).
__device__ __forceinline__ void store_o_rows(const MlaDecodeParams& p, const MlaDecodeSchedule& s, const Job& job,
                                             int slot, const float (&o)[128], int r0, int col0, const float (&l)[2],
                                             const float (&m)[2], bool write_lse) {
  constexpr int kRows = 64;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = r0 + 8 * h;
    if (r >= job.num_rows) continue;
    const float inv = l[h] > 0 ? p.kv_scale / l[h] : 0.f;
    if (job.num_splits == 1) {
      RowPlace rp = place_row(p, job, r);
      bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h + col0;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<__nv_bfloat162*>(dst + 8 * j) =
            __floats2bfloat162_rn(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
    } else {
      float* dst = s.partial_o + (int64_t(slot) * kRows + r) * kL + col0;
#pragma unroll
      for (int j = 0; j < 32; ++j)
        *reinterpret_cast<float2*>(dst + 8 * j) = make_float2(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
      if (write_lse) s.partial_lse[int64_t(slot) * kRows + r] = l[h] > 0 ? m[h] + log2f(l[h]) : -INFINITY;
    }
  }
}

// ---- FP8 cache: e4m3 rows of 576 bytes (36 chunks of 16), staged as they are ------------------

constexpr int kF8Chunks = kD / 16;
constexpr int kF8TileBytes = kBN * kD;  // a staged tile: [64][576] bytes, rows contiguous

// Widens a staged e4m3 tile (src) into the BF16 tile at dst, where 16-byte chunk c (of 72) of row r
// lies at byte offset dst_offset(r, c). Every e4m3 value is a BF16 value: nothing rounds. Rows from
// rows_valid on become zeros (a page's rows past the seq's end, staged as they were).
template <class Offset>
__device__ __forceinline__ void widen_fp8_tile(const uint8_t* src, uint8_t* dst, int tid, int threads,
                                               Offset dst_offset, int rows_valid = kBN) {
  for (int i = tid; i < kBN * kF8Chunks; i += threads) {
    const int r = i / kF8Chunks, c = i - r * kF8Chunks;
    const uint4 v = r < rows_valid ? *reinterpret_cast<const uint4*>(src + i * 16) : make_uint4(0, 0, 0, 0);
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
    uint4 lo, hi;
    lo.x = fp8::e4m3x2_to_bf16x2(w[0] & 0xffff), lo.y = fp8::e4m3x2_to_bf16x2(w[0] >> 16);
    lo.z = fp8::e4m3x2_to_bf16x2(w[1] & 0xffff), lo.w = fp8::e4m3x2_to_bf16x2(w[1] >> 16);
    hi.x = fp8::e4m3x2_to_bf16x2(w[2] & 0xffff), hi.y = fp8::e4m3x2_to_bf16x2(w[2] >> 16);
    hi.z = fp8::e4m3x2_to_bf16x2(w[3] & 0xffff), hi.w = fp8::e4m3x2_to_bf16x2(w[3] >> 16);
    *reinterpret_cast<uint4*>(dst + dst_offset(r, 2 * c)) = lo;
    *reinterpret_cast<uint4*>(dst + dst_offset(r, 2 * c + 1)) = hi;
  }
}

// Merges the partials of jobs cut between CTAs (rows per job = 16 * s.m_tiles); mla_decode.cu.
void launch_mla_decode_combine(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);
// The attention kernels of 64-row jobs on Hopper warpgroup MMA: one tile at a time in a 2-stage ring
// (mla_decode_wgmma.cu; BF16 or FP8 caches), or two tiles at a time, one a warpgroup
// (mla_decode_pairs.cu; BF16 caches).
void launch_mla_decode_wgmma(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);
void launch_mla_decode_pairs(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);

}  // namespace mlaserve::cuda::mla
