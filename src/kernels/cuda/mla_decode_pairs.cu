// MLA decode attention for jobs of 64 query rows over a BF16 cache on Hopper warpgroup MMA, taking
// the keys two tiles at a time (see mla_decode.h for the plan; mla_decode_wgmma.cu has the 2-stage
// kernel, which FP8 caches use and which stays the fallback for BF16).
//
// Why pairs: with one tile at a time, one warpgroup computes S = Q K^T (the larger half of the MMAs)
// and its softmax while the other waits, and the tile after next can only be fetched once both are
// done with a ring slot. Here warpgroup 0 owns O[:, 0:256] and the first tile of each pair (in k0),
// warpgroup 1 owns O[:, 256:512] and the second (in k1); both compute an S at the same time, and one
// warpgroup's softmax overlaps the other's MMAs. Per pair, with m the running row max (both
// warpgroups hold it), which moves to a new row maximum only when that passes it by more than 2^8
// (lazy_max; else it stays), each warpgroup takes its own tile's softmax without waiting for the other:
//   wg0: S0 = Q K0^T; m0 = lazy_max(m, rowmax S0); P0 = exp(S0 - m0), to shared memory with m0;
//        O_L = O_L e^(m - m0) + P0 V0_L;
//   wg1: S1 = Q K1^T; m1 = lazy_max(m, rowmax S1); P1 = exp(S1 - m1), to shared memory with m1;
//        O_R = O_R e^(m - m1) + P1 V1_R;
// then both take the pair's maximum M = max(m0, m1) from the other's m and bring everything to it:
//   wg0: O_L = O_L e^(m0 - M) + (P1 e^(m1 - M)) V1_L;  wg1: O_R = O_R e^(m1 - M) + (P0 e^(m0 - M)) V0_R,
// multiplying the other's P in shared memory first in the rare pair where its factor is not 1 for
// some row (bar_any finds it). With the lazy maximum m0 = m1 = M in most pairs. Waiting for the other
// warpgroup's maximum before the softmax put that warpgroup's whole softmax on each pair's path (ptxas
// issued the exponentials ahead of the barrier's arrive). (The next pair's P0 cannot overwrite this
// one early: it follows the next S0, which waits for block 8's refill, issued after wg1's P0 V0_R;
// likewise P1.)
// Each warpgroup sums the probabilities it made (rescaled alike); the two sums meet at the job's end.
//
// Shared memory: Q and the two tiles (73.7 KB each, 9 blocks of 64 columns in the 128-byte swizzle
// layout wgmma reads). Nothing else fits, so P0 and P1 go into the rope block (columns 512..575) of
// their own tile, which only S reads. Each tile block has a barrier that its loads' cp.async copies
// complete (mbarrier.cuh): S waits block by block, and the last reader of a block refills it for the
// next pair right after its MMAs over it finish, so loads run a pair ahead with no block-wide wait:
//   k0 blocks 0-3: wg0 after P0 V0_L; 4-8: wg1 after P0 V0_R (block 8 then holds P0).
//   k1 blocks 0-3 and 8: wg0 after P1 V1_L (block 8 holds P1); 4-7: wg1 after P1 V1_R.
// The order follows the refills: wg1 runs P1 V1_R before P0 V0_R, and S0 takes k0's blocks 0-3 first,
// S1 k1's blocks 4-7 first (the blocks each warpgroup freed earliest). Each warpgroup stores its P
// for the other before it issues its own P V, since the other's P V wait on it.
// A pair is two tiles of one job; at a job's end (or the CTA's) the second may be absent: its keys
// are masked, and its slots load as zeros (cp.async) or keep the finite values they hold (TMA).
//
// Over a cache laid out in pages of 64 keys (MlaDecodeParams::cache_tma), a thread of the refilling
// warpgroup asks the TMA for blocks 0-3, 4-7 and 8 of a tile instead (three copies): no copy issue
// and no address arithmetic in the MMA warpgroups. A tile then also brings the rows of its page past
// the seq's last key, which nothing wrote: the warpgroup that computed S over the tile zeroes them
// in columns 0..511 (V) before any P V reads them, since 0 times a NaN is a NaN.
// Over either cache layout Q comes by the TMA where q's rows are contiguous (MlaDecodeParams::q_tma):
// three copies, one barrier each, so S starts on Q's first blocks as they land. A whole job's output
// rows leave through Q's buffer.
#include <cuda_bf16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mla_decode_device.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

using namespace mla;
using mma::cp_async16;
using mma::fast_exp2;
using mma::pack_bf16;

constexpr int kThreads = 256, kM = 64, kBlocks = kD / 64;  // 9 blocks of 64 columns a row
static_assert(kBN == 64, "a tile is 64 keys");

struct Smem {
  static constexpr uint32_t q = 0;                      // [64, 576]
  static constexpr uint32_t k0 = q + kTileBytes;        // [64, 576] the pair's first tile
  static constexpr uint32_t k1 = k0 + kTileBytes;       // [64, 576] its second
  static constexpr uint32_t bars = k1 + kTileBytes;     // [2][9] u64: block b of k0 / k1 landed; then Q's 3
  static constexpr uint32_t max = bars + (2 * kBlocks + 3) * 8;  // [2][64] f32: m0, m1
  static constexpr uint32_t sum = max + 2 * kM * 4;     // [2][64] f32: each warpgroup's row sums at a job's end
  static constexpr uint32_t bytes = sum + 2 * kM * 4 + 1024;  // + slack to align the base to 1024
};
static_assert(Smem::bytes <= 227 * 1024, "shared memory of one block");

using wgmma::bar_any;
using wgmma::bar_arrive;
using wgmma::bar_sync;

// Named barriers between the warpgroups (0 is __syncthreads).
constexpr int kBarP0 = 1;     // wg0 -> wg1: P0 (against m0) is in k0's block 8, m0 in s_max
constexpr int kBarP1 = 2;     // wg1 -> wg0: P1 (against m1) is in k1's block 8, m1 in s_max
constexpr int kBarFixP0 = 3;  // wg1 alone: whether P0 needs rescaling, then that it is rescaled
constexpr int kBarFixP1 = 4;  // wg0 alone: the same for P1

// The running maximum moves only when a row's new maximum passes it by more than this (log2 units):
// probabilities up to 2^8 are exact in the sums, and most pairs then keep every factor at 1, so
// each warpgroup takes its softmax against its own maximum and hands its P over as it is.
constexpr float kLazyMax = 8.f;
__device__ __forceinline__ float lazy_max(float m, float mx) { return mx > m + kLazyMax ? mx : m; }

// Tiles `tile` and (if `two`) tile + 1 of job `job_idx`; `last` ends the job's part in this CTA.
// Only what the loads need of the job is kept (registers are short); the rest is read when used.
struct Pair {
  int job_idx, tile, kv_begin, num_keys;  // kv_begin: the job's seq's first entry in kv_indices
  bool valid, two, last;
};
struct Cursor {
  int job_idx, tile, left;  // the next tile of the CTA's run and how many remain
};
__device__ __forceinline__ Pair take_pair(const MlaDecodeParams& p, const Job* jobs, Cursor& c) {
  Pair pr{};
  pr.valid = c.left > 0;
  if (!pr.valid) return pr;
  const Job job = jobs[c.job_idx];
  pr.job_idx = c.job_idx;
  pr.tile = c.tile;
  pr.kv_begin = p.kv_start[job.seq];
  pr.num_keys = job.num_keys;
  pr.two = c.tile + 1 < job.num_tiles && c.left >= 2;
  const int n = pr.two ? 2 : 1;
  c.left -= n;
  c.tile += n;
  pr.last = c.tile == job.num_tiles || c.left == 0;
  if (c.tile == job.num_tiles) ++c.job_idx, c.tile = 0;
  return pr;
}

// P as the A fragments of P V: step ks covers keys 16 ks.. (sc in the accumulator layout of m64n64).
__device__ __forceinline__ void pack_p(const float (&sc)[32], uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    pa[j / 2][(j % 2) * 2] = pack_bf16(sc[4 * j], sc[4 * j + 1]);
    pa[j / 2][(j % 2) * 2 + 1] = pack_bf16(sc[4 * j + 2], sc[4 * j + 3]);
  }
}

// Stores P (fragments pa of this warp's 16 rows) as a K-major [64 rows, 64 keys] block in the 128-byte
// swizzle layout, for the other warpgroup's A operand. pa[k] holds keys 16 k..16 k + 15 of rows r0 and
// r0 + 8 as four 8x8 matrices (keys 16 k.. / 16 k + 8.. times rows r0 / r0 + 8): one stmatrix each k.
__device__ __forceinline__ uint32_t p_chunk_addr(uint32_t block, int tid, int k) {
  const int lane = tid % 32, row = (tid % 128) / 32 * 16 + (lane >> 3 & 1) * 8 + (lane & 7);
  return block + row * 128 + (((2 * k + (lane >> 4)) ^ (lane & 7)) * 16);
}
__device__ __forceinline__ void store_p(uint32_t block, int tid, const uint32_t (&pa)[4][4]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) mma::stsm_x4(p_chunk_addr(block, tid, k), pa[k]);
}

// Multiplies the P block that store_p wrote by mul[0] / mul[1] for rows r0 / r0 + 8 (this thread's).
__device__ __forceinline__ void rescale_p(uint32_t block, int tid, const float (&mul)[2]) {
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t addr = p_chunk_addr(block, tid, k);
    uint32_t v[4];
    mma::ldsm_x4(v, addr);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&v[i]));
      v[i] = pack_bf16(f.x * mul[i & 1], f.y * mul[i & 1]);
    }
    mma::stsm_x4(addr, v);
  }
}

// Copies block group b / 4 of a 64-row tile (blocks 0-3 or 4-7 as one box of map4, block 8 alone
// through map) from `row` of a [rows, 576] tensor into `tile`, counted on `bar`.
__device__ __forceinline__ void copy_block_group(uint32_t tile, const CUtensorMap* map, const CUtensorMap* map4,
                                                 int b, int row, uint32_t bar) {
  mbar::arrive_expect_tx(bar, (b == 8 ? 1 : 4) * kBlockBytes);
  if (b == 8)
    tma::load_2d(tile + b * kBlockBytes, map, b * 64, row, bar);
  else
    tma::load_3d(tile + b * kBlockBytes, map4, 0, row, b, bar);
}

template <bool kTma>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_pairs_kernel(const __grid_constant__ MlaDecodeParams p, MlaDecodeSchedule s) {
  extern __shared__ uint8_t smem_raw[];
  // Through an integer on purpose: mma::align_smem_1024 (LDS for s_max instead of generic
  // loads) measured 2-3% slower at 128 heads over pages of 64 and 2% faster over pages of 1, H200.
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  const uint32_t sQ = mma::smem_u32(smem + Smem::q), sK0 = mma::smem_u32(smem + Smem::k0);
  const uint32_t sK1 = mma::smem_u32(smem + Smem::k1), sBars = mma::smem_u32(smem + Smem::bars);
  const uint32_t bars0 = sBars, bars1 = sBars + kBlocks * 8, bar_q = sBars + 2 * kBlocks * 8;
  float* s_max = reinterpret_cast<float*>(smem + Smem::max);
  float* s_sum = reinterpret_cast<float*>(smem + Smem::sum);
  // The descriptor of the operand `off` bytes past `base` (8-row groups 1024 bytes apart), as base's
  // descriptor plus an offset, which ptxas hoists: four uniform instructions a wgmma, not ten.
  auto desc = [](uint32_t base, uint32_t off, uint32_t leading_bytes) {
    return wgmma::Sw128Desc(base, leading_bytes, 1024).at(off);
  };

  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int r0 = (tid % 128) / 32 * 16 + g;  // this thread's rows of S and O: r0 and r0 + 8

  // Shared memory and parameters only, so before the PDL wait: it overlaps the kernel before.
  if constexpr (kTma) {
    // A first pair's absent second tile is masked but still multiplied: it must hold finite values.
    for (uint32_t i = tid; i < kTileBytes / 16; i += kThreads)
      *reinterpret_cast<uint4*>(smem + Smem::k1 + i * 16) = make_uint4(0, 0, 0, 0);
    wgmma::fence_async_smem();  // before the TMA (async proxy) writes the same bytes
  }
  if (tid == 0) {
    // A block's barrier counts one warpgroup's cp.async arrivals, or the TMA's bytes.
    for (int b = 0; b < 2 * kBlocks; ++b) mbar::init(sBars + b * 8, kTma ? 1 : 128);
    // Q: every thread's cp.async arrivals, or (q_tma) the TMA's bytes of blocks 0-3, 4-7 and 8 on three barriers.
    if (p.q_tma) {
      for (int g = 0; g < 3; ++g) mbar::init(bar_q + g * 8, 1);
      tma::prefetch_map(&p.q_map), tma::prefetch_map(&p.q_map4);
    } else {
      mbar::init(bar_q, kThreads);
    }
    if (kTma || p.q_tma) wgmma::fence_async_smem();  // the barriers as the TMA sees them
    if constexpr (kTma) {
      tma::prefetch_map(&p.cache_map);
      tma::prefetch_map(&p.cache_map4);
    }
  }
  __syncthreads();
  // As the 16-row kernel (mla_decode.cu): with the plan settled, the first pair's tiles load before
  // the PDL wait and only Q waits for it.
  if (!s.plan_settled) pdl_wait_and_trigger();

  const int4 cta = reinterpret_cast<const int4*>(s.ctas)[blockIdx.x];
  if (cta.z == 0) {
    pdl_wait_and_trigger();  // every CTA waits before it ends (pdl.cuh); a second wait returns at once
    return;
  }
  const Job* jobs = reinterpret_cast<const Job*>(s.jobs);
  const bf16* q = static_cast<const bf16*>(p.q);
  const uint8_t* cache = static_cast<const uint8_t*>(p.cache);
  // Scores and outputs carry the cache scale (1 for BF16; kept so the two kernels agree).
  const float scale_log2 = p.scale * p.kv_scale * 1.4426950408889634f;

  // Q: three TMA copies from `row` (q_tma), or 4 threads a row, 18 of its 72 chunks each, by cp.async
  // with rows past the job's end zero-filled.
  uint32_t q_parity = 0;  // the phase of Q's barriers: one a job
  // The job's first row in q as [T * H, 576] (q_tma): its rows are consecutive there.
  auto q_row_of = [&](const Job& job) { return seq_place(p, job).q0 * p.num_heads + job.row0; };
  auto load_q = [&](const Job& job, int row) {
    if (p.q_tma) {  // rows past the job's end are other rows of q (or zeros past its end): S masks them
      if (tid == 0) {
        wgmma::fence_async_smem();  // after the generic stores of staged output rows to the same buffer
        for (int g = 0; g < 3; ++g) copy_block_group(sQ, &p.q_map, &p.q_map4, 4 * g, row, bar_q + g * 8);
      }
      return;
    }
    const int r = tid / 4;
    const bool valid = r < job.num_rows;
    const bf16* src = q;
    if (valid) {
      RowPlace rp = place_row(p, job, r);
      src = q + rp.token * p.q_stride_t + rp.head * p.q_stride_h;
    }
#pragma unroll
    for (int c = tid % 4; c < kChunks; c += 4)
      cp_async16(sQ + tile_offset(r, c), src + (valid ? c * 8 : 0), valid);
    mbar::arrive_on_copies(bar_q);
  };
  // Tile loads: a warpgroup's thread brings 16 bytes (piece) of rows lrow + 16 i of each block it loads.
  const int lrow = (tid % 128) / 8, piece = tid % 8;
  // This thread's 4 key rows of the pair's tile `second` (lrow + 16 i), as cache slots (-1 past the
  // job's keys, or for an absent tile); with the TMA only the tile's first slot (s[0]).
  struct Slots {
    int s[4];
  };
  auto slots_of = [&](const Pair& pr, int second) {
    Slots sl;
    const bool present = pr.valid && (second == 0 || pr.two);
#pragma unroll
    for (int i = 0; i < (kTma ? 1 : 4); ++i) {
      const int key = (pr.tile + second) * kBN + (kTma ? 0 : lrow + 16 * i);
      sl.s[i] = present && key < pr.num_keys ? p.kv_indices[pr.kv_begin + key] : -1;
    }
    return sl;
  };
  // Copies block b of a tile (rows at slots sl) into `tile` and arrives on the block's barrier.
  auto load_block = [&](uint32_t tile, uint32_t bars, int b, const Slots& sl) {
    if constexpr (kTma) {
      // Blocks 0-3 and 4-7 come as one TMA copy each (cache_map4), counted on the barrier of the
      // group's first block, whose S waits for it first; the other three barriers are arrived at
      // once. Block 8 comes alone. A TMA instruction holds its warp 100-200 cycles and the
      // warpgroup's next MMAs wait for its slowest warp, so the copies a warpgroup issues together
      // come from different warps. (Four blocks a copy: 1-2% faster than one, H200.)
      const int group = b / 4;  // 0: blocks 0-3, 1: 4-7, 2: 8
      const int warp = (tile == sK1 ? 1 : 0) + (group == 2 ? 2 : 0);
      if (tid % 128 == warp * 32) {
        if (sl.s[0] >= 0 && b % 4 == 0) {
          copy_block_group(tile, &p.cache_map, &p.cache_map4, b, sl.s[0], bars + b * 8);
        } else {
          mbar::arrive(bars + b * 8);  // an absent tile (nothing to wait for), or its group's copy brings it
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = lrow + 16 * i;
        const bool valid = sl.s[i] >= 0;
        const uint8_t* src = cache + (valid ? int64_t(sl.s[i]) * (kD * 2) + b * 128 + piece * 16 : 0);
        // tile_offset(r, 8 b + piece), written out: ptxas spills more registers in the loop with the call
        cp_async16(tile + b * kBlockBytes + r * 128 + ((piece ^ (r & 7)) * 16), src, valid);
      }
      mbar::arrive_on_copies(bars + b * 8);
    }
  };
  auto visible_of = [&](const Job& job, int r) { return r < job.num_rows ? place_row(p, job, r).visible : 0; };
  // TMA: zeroes V (blocks 0-7) of the rows of `tile` (tile number `t` of the pair's job) past the
  // job's keys; called by the warpgroup that computed S over it, once those MMAs are done.
  auto zero_rows_past_end = [&](uint32_t tile_smem, const Pair& pr, int t) {
    if constexpr (kTma) zero_tile_rows_from(smem + (tile_smem - sQ), pr.num_keys - t * kBN, tid % 128, 128);
  };

  // S = Q K^T over the tile at sK: four blocks from `first` (the ones refilled earliest: 0-3 of k0 by
  // wg0 after P0 V0_L, 4-7 of k1 by wg1 after its P V), then the other five. Over the TMA a block at
  // a time: wait, fence, its MMAs, commit (1-3% faster than a group's waits then its MMAs, H200);
  // over cp.async a group at a time, each group's waits behind one proxy fence. ptxas keeps the wgmma
  // pipeline across the wait loops; it reports (C7518, C7520) where a branch would make it serialize them.
  auto scores = [&](uint32_t sK, uint32_t bars, uint32_t parity, float (&sc)[32], auto first) {
    constexpr int kFirst = decltype(first)::value;
    auto block_of = [](int i) { return i < 4 ? kFirst + i : kFirst == 0 ? i : i == 8 ? 8 : i - 4; };
    auto block_mmas = [&](int i) {  // S += Q K^T over the 64 columns of block_of(i)
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint32_t off = block_of(i) * kBlockBytes + k * 32;
        wgmma::mma_m64n64k16_ss<0>(sc, desc(sQ, off, 16), desc(sK, off, 16), i > 0 || k > 0);
      }
    };
    if constexpr (kTma) {
#pragma unroll
      for (int i = 0; i < kBlocks; ++i) {
        if (p.q_tma && i % 4 == 0) mbar::wait(bar_q + block_of(i) / 4 * 8, q_parity);  // Q's blocks of this group
        mbar::wait(bars + block_of(i) * 8, parity);
        wgmma::fence();
        block_mmas(i);
        wgmma::commit();
        wgmma::fence_operand(sc);
      }
    } else {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i0 = half ? 4 : 0, i1 = half ? kBlocks : 4;
        if (p.q_tma) {  // Q's groups of these blocks
          mbar::wait(bar_q + block_of(i0) / 4 * 8, q_parity);
          if (half) mbar::wait(bar_q + 16, q_parity);
        }
        for (int i = i0; i < i1; ++i) mbar::wait(bars + block_of(i) * 8, parity);
        wgmma::fence_async_smem();  // the copies landed through the generic proxy; wgmma reads through the async one
        wgmma::fence();
#pragma unroll
        for (int i = i0; i < i1; ++i) block_mmas(i);
        wgmma::commit();
      }
    }
    wgmma::wait<0>();
    wgmma::fence_operand(sc);
  };
  // Masks the raw scores of `tile` (keys past a row's visible count, all of them if !present) to
  // -inf; returns the row maxima of rows r0 and r0 + 8 in the log2 domain (scale_log2 > 0, so the
  // maximum of the raw scores scales to the maximum of the scaled ones). Tiles every row sees whole
  // (all but a job's last in decode) skip the compares.
  auto mask_max = [&](float (&sc)[32], int tile, bool present, const int (&vis)[2], float (&mx)[2]) {
    mx[0] = mx[1] = -INFINITY;
    if (present && (tile + 1) * kBN <= min(vis[0], vis[1])) {
#pragma unroll
      for (int i = 0; i < 32; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], sc[i]);
    } else {
      const int key0 = tile * kBN + 2 * t4;
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i >> 1) & 1, key = key0 + (i / 4) * 8 + (i & 1);
        if (!(present && key < vis[h])) sc[i] = -INFINITY;
        mx[h] = fmaxf(mx[h], sc[i]);
      }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
      mx[h] *= scale_log2;
    }
  };
  // sc = 2^(sc scale_log2 - m) (0 for a row that has seen no key yet); adds the row sums to l.
  auto exponentiate = [&](float (&sc)[32], const float (&m)[2], float (&l)[2]) {
    float m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) m_use[h] = m[h] == -INFINITY ? 0.f : m[h];
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int h = (i >> 1) & 1;
      sc[i] = fast_exp2(fmaf(sc[i], scale_log2, -m_use[h]));
      l[h] += sc[i];
    }
  };
  // e^(from - to) in the log2 domain, 0 when `to` is still -inf (nothing to keep).
  auto rescale_of = [](float from, float to) { return fast_exp2(from - (to == -INFINITY ? 0.f : to)); };
  // o *= its rows' factors, skipped where the whole warp's are 1 (the running max held: most tiles
  // once a job is under way), which leaves o bit for bit as the multiply would.
  auto rescale_o = [&](float (&acc)[128], const float (&f)[2]) {
    if (__all_sync(0xffffffff, f[0] == 1.f && f[1] == 1.f)) return;
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] *= f[(i >> 1) & 1];
  };

  Cursor cursor{cta.x, cta.y, cta.z};
  Pair cur = take_pair(p, jobs, cursor);
  {
    const Slots a = slots_of(cur, 0), b = slots_of(cur, 1);
#pragma unroll
    for (int blk = 0; blk < kBlocks; ++blk) {
      // The same split as the refills below: k0 blocks 0-3 / k1 blocks 0-3 and 8 by warpgroup 0.
      if ((blk < 4) == (wg == 0)) load_block(sK0, bars0, blk, a);
      if ((blk < 4 || blk == 8) == (wg == 0)) load_block(sK1, bars1, blk, b);
    }
  }
  // Q's row read before the PDL wait too: the seq's metadata, like the plan, came before this launch.
  const int first_q_row = p.q_tma ? q_row_of(jobs[cur.job_idx]) : 0;
  if (s.plan_settled) pdl_wait_and_trigger();
  load_q(jobs[cur.job_idx], first_q_row);
  int vis[2] = {visible_of(jobs[cur.job_idx], r0), visible_of(jobs[cur.job_idx], r0 + 8)};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;

  // Settles the pair's maximum M = max(m0, m1) for rows r0, r0 + 8, given this warpgroup's maximum `own`
  // and the other's in s_max[other..]: m_run and this warpgroup's sums move to M, scale_o gets
  // e^(own - M) for its O, and the other's P (in shared memory at other_p) is multiplied by
  // e^(m_other - M) in the rare pair where that is not 1 for some row. Returns whether some factor
  // of this thread's scale_o is not 1.
  auto settle_max = [&](const float (&own)[2], int other, uint32_t other_p, int fix_bar, float (&scale_o)[2]) {
    float p_scale[2];
    bool p_moves = false, o_moves = false;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float m_other = s_max[other + r0 + 8 * h], m = fmaxf(own[h], m_other);
      scale_o[h] = rescale_of(own[h], m);
      p_scale[h] = rescale_of(m_other, m);
      p_moves |= p_scale[h] != 1.f && m_other != -INFINITY;  // a row with no keys yet has P = 0
      o_moves |= scale_o[h] != 1.f;
      m_run[h] = m;
      l_run[h] *= scale_o[h];
    }
    if (bar_any(fix_bar, 128, p_moves)) {
      rescale_p(other_p, tid, p_scale);
      wgmma::fence_async_smem();
      bar_sync(fix_bar, 128);
    }
    return o_moves;
  };

  // This warpgroup's softmax against its own maximum m_own = lazy_max(m, mx): the sums move to m_own
  // and take P = 2^(S - m_own); P goes to p_block and m_own to s_max[slot..] for the other warpgroup,
  // which `bar` tells. scale gets e^(m - m_own) for this warpgroup's O.
  auto own_softmax = [&](float (&sc)[32], const float (&mx)[2], uint32_t p_block, int slot, int bar,
                         uint32_t (&pa)[4][4], float (&m_own)[2], float (&scale)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_own[h] = lazy_max(m_run[h], mx[h]);
      scale[h] = rescale_of(m_run[h], m_own[h]);
      l_run[h] *= scale[h];
    }
    exponentiate(sc, m_own, l_run);
    pack_p(sc, pa);
    store_p(p_block, tid, pa);
    if (t4 == 0) s_max[slot + r0] = m_own[0], s_max[slot + r0 + 8] = m_own[1];
    wgmma::fence_async_smem();
    bar_arrive(bar, kThreads);
  };

  // A whole job's output rows through shared memory (Q's buffer, free once the job's last S is done:
  // the barrier before this), then 16 bytes a thread, a warp 512 contiguous bytes of a row. Stored
  // from the MMA layout, 4 bytes a thread, each 32-byte sector was written in halves by two stores:
  // 6.7 us from the last pair's end to the stores issued at 128 heads, B 64, ctx 4096 (H200).
  auto store_o_staged = [&](const Job& job, const float (&row_l)[2]) {
    constexpr uint32_t kPitch = kL * 2 + 16;  // bytes a staged row; + 16: a store's 8 rows on distinct banks
    static_assert(kM * kPitch <= kTileBytes, "staged rows fit in Q's buffer");
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float inv = row_l[h] > 0 ? p.kv_scale / row_l[h] : 0.f;
      const uint32_t row = sQ + uint32_t(r0 + 8 * h) * kPitch + uint32_t(wg * 256 + 2 * t4) * 2;
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(o[4 * j + 2 * h] * inv, o[4 * j + 2 * h + 1] * inv);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(row + 16 * j), "r"(*reinterpret_cast<const uint32_t*>(&v))
                     : "memory");
      }
    }
    __syncthreads();
    const SeqPlace sp = seq_place(p, job);
    constexpr int kRowChunks = kL * 2 / 16;  // 64 chunks of 16 bytes a row
#pragma unroll 4
    for (int c = tid; c < kM * kRowChunks; c += kThreads) {
      const int r = c / kRowChunks, k = c % kRowChunks;
      if (r >= job.num_rows) break;  // rows past the job's end are the highest c
      uint4 v;
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                   : "r"(sQ + uint32_t(r) * kPitch + uint32_t(k) * 16)
                   : "memory");
      const RowPlace rp = place_row(p, job, sp, r);
      bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h;
      reinterpret_cast<uint4*>(dst)[k] = v;
    }
    __syncthreads();  // every staged row read before the next job's Q lands in the buffer
  };

  for (uint32_t parity = 0; cur.valid; parity ^= 1) {
    const Pair nxt = take_pair(p, jobs, cursor);
    const Slots next_first = slots_of(nxt, 0), next_second = slots_of(nxt, 1);  // read early: used after the MMAs
    // The next pair's blocks [b0, b1) of its first tile (k0) or its second (k1), once this pair is done with them.
    auto refill = [&](bool second, int b0, int b1) {
      if (!nxt.valid) return;
#pragma unroll
      for (int blk = b0; blk < b1; ++blk)
        load_block(second ? sK1 : sK0, second ? bars1 : bars0, blk, second ? next_second : next_first);
    };
    if (!p.q_tma) mbar::wait(bar_q, q_parity);
    float sc[32];
    uint32_t pa[4][4];
    if (wg == 0) {
      // ---- S0, its softmax against m0 = lazy_max(m, rowmax S0), P0 and m0 for wg1, O_L = O_L e^(m - m0) + P0 V0_L
      scores(sK0, bars0, parity, sc, std::integral_constant<int, 0>{});
      zero_rows_past_end(sK0, cur, cur.tile);
      float mx[2], scale0[2], m0[2];
      mask_max(sc, cur.tile, true, vis, mx);
      own_softmax(sc, mx, sK0 + 8 * kBlockBytes, 0, kBarP0, pa, m0, scale0);
      rescale_o(o, scale0);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_rs<1>(o, pa[ks], desc(sK0, ks * 16 * 128, kBlockBytes), true);
      wgmma::commit();

      // ---- The pair's maximum M = max(m0, m1): P1 (against m1) times e^(m1 - M) in shared memory where
      // m0 > m1, then O_L = O_L e^(m0 - M) + P1 V1_L. Nothing touches o until the wait, so that ptxas
      // keeps it in flight.
      bar_sync(kBarP1, kThreads);
      float scale_o[2];
      settle_max(m0, kM, sK1 + 8 * kBlockBytes, kBarFixP1, scale_o);
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      refill(false, 0, 4);
      rescale_o(o, scale_o);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_ss<1>(o, desc(sK1 + 8 * kBlockBytes, ks * 32, 16), desc(sK1, ks * 16 * 128, kBlockBytes),
                                    true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      refill(true, 0, 4);
      refill(true, 8, 9);
    } else {
      // ---- S1 and its softmax against m1 = lazy_max(m, rowmax S1), without waiting for m0; P1 and m1 for
      // wg0, O_R = O_R e^(m - m1) + P1 V1_R; then with M = max(m0, m1): O_R = O_R e^(m1 - M) +
      // (P0 e^(m0 - M)) V0_R, multiplying wg0's P0 in shared memory first where m1 > m0.
      scores(sK1, bars1, parity, sc, std::integral_constant<int, 4>{});
      if (cur.two) zero_rows_past_end(sK1, cur, cur.tile + 1);
      float mx[2], scale1[2], m1[2];
      mask_max(sc, cur.tile + 1, cur.two, vis, mx);
      own_softmax(sc, mx, sK1 + 8 * kBlockBytes, kM, kBarP1, pa, m1, scale1);
      rescale_o(o, scale1);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_rs<1>(o, pa[ks], desc(sK1 + 4 * kBlockBytes, ks * 16 * 128, kBlockBytes), true);
      wgmma::commit();
      bar_sync(kBarP0, kThreads);
      float scale_o[2];
      const bool o_moves = settle_max(m1, 0, sK0 + 8 * kBlockBytes, kBarFixP0, scale_o);
      // O_R takes e^(m1 - M) once P1 V1_R is done. Over the TMA wg1 waits for it every pair and at once
      // refills k1's blocks 4-7 (a few cheap copy requests; the next S1 takes those blocks first). Over
      // cp.async it waits only where O_R must be rescaled (rare), so that P0 V0_R queues behind P1 V1_R
      // before the warpgroup spends its time issuing copies (2-4% faster over cp.async, none over the TMA).
      if constexpr (kTma) {
        wgmma::wait<0>();
        wgmma::fence_operand(o);
        refill(true, 4, 8);
        rescale_o(o, scale_o);
      } else if (bar_any(kBarFixP0, 128, o_moves)) {
        wgmma::wait<0>();
        wgmma::fence_operand(o);
        rescale_o(o, scale_o);
      }
      wgmma::fence();  // here, not in the branches above: ptxas serializes the MMAs otherwise (C7520)
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_ss<1>(o, desc(sK0 + 8 * kBlockBytes, ks * 32, 16),
                                    desc(sK0 + 4 * kBlockBytes, ks * 16 * 128, kBlockBytes), true);
      wgmma::commit();
      if constexpr (!kTma) {
        wgmma::wait<1>();
        refill(true, 4, 8);
      }
      wgmma::wait<0>();
      wgmma::fence_operand(o);
      refill(false, 4, 9);
    }

    if (cur.last) {
      const Job job = jobs[cur.job_idx];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        if (t4 == 0) s_sum[wg * kM + r0 + 8 * h] = l;
      }
      __syncthreads();
      const float row_l[2] = {s_sum[r0] + s_sum[kM + r0], s_sum[r0 + 8] + s_sum[kM + r0 + 8]};
      const bool out_rows_aligned =  // read here, not kept through the loop (a register less)
          (reinterpret_cast<uintptr_t>(p.out) | uintptr_t(p.out_stride_t) * 2 | uintptr_t(p.out_stride_h) * 2) % 16 == 0;
      if (job.num_splits == 1 && out_rows_aligned)
        store_o_staged(job, row_l);
      else
        store_o_rows(p, s, job, partial_slot(s, job), o, r0, wg * 256 + 2 * t4, row_l, m_run, wg == 0 && t4 == 0);
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] = 0.f;
      m_run[0] = m_run[1] = -INFINITY;
      l_run[0] = l_run[1] = 0.f;
      if (nxt.valid) {  // every S of the job is done (the barrier above): Q is free for the next job
        const Job next_job = jobs[nxt.job_idx];
        load_q(next_job, p.q_tma ? q_row_of(next_job) : 0);
        q_parity ^= 1;
        vis[0] = visible_of(next_job, r0);
        vis[1] = visible_of(next_job, r0 + 8);
      }
      __syncthreads();  // s_sum is read before the next job's end writes it
    }
    cur = nxt;
  }
}

}  // namespace

void mla::launch_mla_decode_pairs(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  MLA_CHECK(!p.cache_fp8, "mla_decode: the paired kernel reads a BF16 cache");
  static bool configured = false;  // per device in practice: one GPU per process here
  if (!configured) {
    for (auto* kernel : {mla_decode_pairs_kernel<false>, mla_decode_pairs_kernel<true>})
      CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Smem::bytes)));
    configured = true;
  }
  if (p.cache_tma)
    launch_pdl(mla_decode_pairs_kernel<true>, s.num_ctas, kThreads, Smem::bytes, stream, p, s);
  else
    launch_pdl(mla_decode_pairs_kernel<false>, s.num_ctas, kThreads, Smem::bytes, stream, p, s);
}

}  // namespace mlaserve::cuda
