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

// This CTA's partial of a job cut between CTAs: its index in the plan's cut (the w of its record,
// read when the partial is stored rather than kept in a register) from the job's first.
__device__ __forceinline__ int partial_slot(const MlaDecodeSchedule& s, const Job& job) {
  return job.split_offset + reinterpret_cast<const int4*>(s.ctas)[blockIdx.x].w - job.first_cta;
}

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

// A job's seq: its first query token, its queries and its keys in the cache.
struct SeqPlace {
  int q0, n, len;
};
__device__ __forceinline__ SeqPlace seq_place(const MlaDecodeParams& p, const Job& job) {
  const int q0 = p.query_start[job.seq];
  return {q0, p.query_start[job.seq + 1] - q0, p.seq_lens[job.seq]};
}

// Query token of row `row` (of a seq's n * H rows, query-major) and the keys it sees.
struct RowPlace {
  int token, head, visible;
};
__device__ __forceinline__ RowPlace place_row(const MlaDecodeParams& p, const Job& job, const SeqPlace& sp, int r) {
  int rho = job.row0 + r, i = rho / p.num_heads;
  return {sp.q0 + i, rho - i * p.num_heads, sp.len - sp.n + i + 1};
}
__device__ __forceinline__ RowPlace place_row(const MlaDecodeParams& p, const Job& job, int r) {
  return place_row(p, job, seq_place(p, job), r);
}

// What a 16-row attention CTA needs of its first tile, stored by the launch right after the plan
// kernel for later launches of the same plan (MlaDecodeSchedule::first_tiles): its run of tiles,
// the first job, that job's seq and the cache slot of each of the tile's keys (-1 past the job).
struct FirstTile {
  int4 cta;
  Job job;
  SeqPlace place;
  int pad;
  int slots[kBN];
};
static_assert(sizeof(FirstTile) == kFirstTileInts * sizeof(int32_t));

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

// ---- Merging a row's split partials (the combine kernel; W_UV's few-token projection) ----------
// A warp holds a kL-wide row, a lane 16 columns: float4 i at column 4 * (lane + 32 * i).

struct SplitSums {
  float4 acc[4] = {};
  float sum = 0.f;
};

// Adds to s splits k0, k0 + step, ... below n of a row whose split k lies at o + k * split_stride
// floats, kBatch splits' loads in flight. weight(k) is split k's weight: 0 for a split whose rows saw
// no key, skipped whatever its o holds. kStream: the partials are read once and evicted first.
template <int kBatch, bool kStream, class Weight>
__device__ __forceinline__ void add_splits(SplitSums& s, const float* o, int64_t split_stride, int k0, int step, int n,
                                           Weight weight) {
  const float4* row = reinterpret_cast<const float4*>(o) + threadIdx.x % 32;
  for (; k0 < n; k0 += kBatch * step) {
    float4 v[kBatch][4];
    float wk[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int k = k0 + b * step;
      const float4* split = reinterpret_cast<const float4*>(reinterpret_cast<const float*>(row) + k * split_stride);
#pragma unroll
      for (int i = 0; i < 4; ++i)
        v[b][i] = k >= n ? make_float4(0.f, 0.f, 0.f, 0.f) : kStream ? __ldcs(split + 32 * i) : split[32 * i];
      wk[b] = k < n ? weight(k) : 0.f;
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (wk[b] == 0.f) continue;
      s.sum += wk[b];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float4 x = v[b][i];
        s.acc[i].x += wk[b] * x.x, s.acc[i].y += wk[b] * x.y, s.acc[i].z += wk[b] * x.z, s.acc[i].w += wk[b] * x.w;
      }
    }
  }
}

constexpr int kSplitSumsFloats = kL + 4;  // a warp's sums in shared memory: the row, then its weight sum

// The S warps of a row (sub: a warp's place) meet: warps 1 to S - 1 leave their sums in red
// ((S - 1) x kSplitSumsFloats), warp 0 adds them in that order. Every thread of the block calls it
// (a barrier where S > 1); `has`: the warp holds sums of a row.
__device__ __forceinline__ void fold_split_sums(SplitSums& s, float* red, int sub, int S, bool has) {
  if (S <= 1) return;
  const int lane = threadIdx.x % 32;
  if (has && sub > 0) {
    float* mine = red + (sub - 1) * kSplitSumsFloats;
#pragma unroll
    for (int i = 0; i < 4; ++i) reinterpret_cast<float4*>(mine)[lane + 32 * i] = s.acc[i];
    if (lane == 0) mine[kL] = s.sum;
  }
  __syncthreads();
  if (!has || sub > 0) return;
  for (int g = 1; g < S; ++g) {
    const float* theirs = red + (g - 1) * kSplitSumsFloats;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float4 x = reinterpret_cast<const float4*>(theirs)[lane + 32 * i];
      s.acc[i].x += x.x, s.acc[i].y += x.y, s.acc[i].z += x.z, s.acc[i].w += x.w;
    }
    s.sum += theirs[kL];
  }
}

// The merged row's 4 BF16 values at column 4 * (lane + 32 * i), packed.
__device__ __forceinline__ uint2 merged_bf16x4(const SplitSums& s, int i) {
  const float inv = s.sum > 0 ? 1.f / s.sum : 0.f;
  const __nv_bfloat162 lo = __floats2bfloat162_rn(s.acc[i].x * inv, s.acc[i].y * inv);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(s.acc[i].z * inv, s.acc[i].w * inv);
  return make_uint2(*reinterpret_cast<const uint32_t*>(&lo), *reinterpret_cast<const uint32_t*>(&hi));
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
