// What the MLA decode kernels share on the device (mla_decode.h has the method): the job record the
// plan writes, where a job's row lives in q and out, and the combine of split jobs.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/mla_decode.h"

namespace mlaserve::cuda::mla {

using bf16 = __nv_bfloat16;

constexpr int kD = kMlaKvDim, kL = kMlaLatentDim, kBN = kMlaBlockKeys;
constexpr int kChunks = kD / 8;  // 16-byte chunks per cache row: 72

struct Job {
  int seq, row0, num_rows, num_tiles, num_keys, first_cta, num_splits, split_offset;
};
static_assert(sizeof(Job) == 8 * sizeof(int32_t));

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

// Part `part` of `parts` threads sharing a cache row brings it toward L2 (a row is 9 lines of 128
// bytes): the tile after next, ahead of its cp.async, doubles the bytes in flight without the
// shared memory of a third stage (prefetching a tile further ahead measured slower). slot < 0: nothing.
__device__ __forceinline__ void prefetch_row_l2(const bf16* cache, int slot, int part, int parts) {
  if (slot < 0) return;
  const char* row = reinterpret_cast<const char*>(cache + int64_t(slot) * kD);
  for (int l = part; l < kD * 2 / 128; l += parts) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + l * 128));
}

// Merges the partials of jobs cut between CTAs (rows per job = 16 * s.m_tiles); mla_decode.cu.
void launch_mla_decode_combine(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);
// The attention kernel of 64-row jobs on Hopper warpgroup MMA; mla_decode_wgmma.cu.
void launch_mla_decode_wgmma(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);

}  // namespace mlaserve::cuda::mla
