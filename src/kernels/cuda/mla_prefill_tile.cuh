// What both MLA prefill kernels (mla_prefill.cu, mla_prefill_wgmma.cu) derive from a block's
// coordinates: grid (query tiles, heads, seqs), with the late (longest) query tiles first.
#pragma once

#include "kernels/cuda/mla_prefill.h"

namespace mlaserve::cuda {

struct MlaPrefillTile {
  int seq, head;
  int q0;          // the seq's first query row in T
  int m0, rows;    // the tile's first query of the seq and its query count
  int k_base;      // the seq's first key row in S
  int prefix;      // cached keys before the seq's first query: query i sits at prefix + i
  int kv_end;      // keys [0, kv_end) are seen by some query of the tile
  int num_tiles;   // key tiles of kBN covering them
};

// False when the block's query tile lies past its seq's queries (the grid is sized for the longest).
template <int kBM, int kBN>
__device__ __forceinline__ bool mla_prefill_tile(const MlaPrefillParams& p, MlaPrefillTile& t) {
  t.seq = blockIdx.z;
  t.head = blockIdx.y;
  t.q0 = p.query_start[t.seq];
  const int nq = p.query_start[t.seq + 1] - t.q0;
  t.m0 = (gridDim.x - 1 - blockIdx.x) * kBM;
  if (t.m0 >= nq) return false;
  t.k_base = p.kv_start[t.seq];
  t.prefix = p.seq_lens[t.seq] - nq;
  t.rows = min(kBM, nq - t.m0);
  t.kv_end = t.prefix + t.m0 + t.rows;
  t.num_tiles = (t.kv_end + kBN - 1) / kBN;
  return true;
}

}  // namespace mlaserve::cuda
