// MLA decode attention on mma.sync (see mla_decode.h), and the combine of split jobs.
//
// Used for 16-row jobs (MT = 1); 64-row jobs (MT = 4) run on mla_decode_wgmma.cu, this kernel stays
// their fallback (MlaDecodePlan::force_mma_sync). Attention block: 8 warps, M = 16 * MT query rows,
// 64-key tiles of the paged cache brought in by cp.async into a 2-stage ring (each key row: 1152
// contiguous bytes at its slot; an FP8 cache's 576-byte rows go to a 2-stage e4m3 ring, and each
// tile is widened into one BF16 tile before use). Per tile:
//   S = Q K^T   [M, 64]: warps tiled MT (rows) x 8/MT (keys), A and B by ldmatrix from shared memory
//               (16-row jobs over an FP8 cache keep most of A, the queries, in registers)
//   softmax     row max across the key-warps through shared memory; P (bf16) to shared memory
//   O += P V    [M, 512]: each warp all M rows x 64 columns, V^T fragments by ldmatrix.trans from
//               the same tile (V is the first 512 columns of K), fp32 accumulators in registers.
// Shared rows are XOR-swizzled by 16-byte chunk (chunk ^ (row & 7)) so ldmatrix is conflict-free.
// Over a cache in pages of 64 keys (MlaDecodeParams::cache_tma), 16-row jobs over a BF16 cache take
// each tile as nine TMA boxes asked for by one thread, instead of 18 cp.async a thread with their
// address arithmetic (40% of the instructions under ncu), and zero the rows of a seq's last page
// past its last key. Their key tiles are then in the TMA's 128-byte swizzle layout (tile_offset),
// which is as conflict-free; the cp.async kernels keep rows whole (swz), which measured 4-20%
// faster for them (fewer address instructions).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mla_decode_device.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/tma.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

using namespace mla;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait;
using mma::fast_exp2;
using mma::ldsm_x4;
using mma::mma_bf16;
using mma::pack_bf16;

constexpr int kWarps = 8, kThreads = kWarps * 32;
// Combine: warps a row at most (a small batch), rows a block (a large one: a warp a row), and the
// splits whose loads a warp has in flight at once (4 measured no faster at B 1, 32k keys, and with
// its 116 registers V2-Lite's batch-8 step 1-2% slower).
constexpr int kCombineMaxWarps = 16, kCombineRows = 8, kCombineBatch = 2;

// Byte offset of 16-byte chunk c of row r in a swizzled tile of `chunks` chunks a row (a multiple of 8).
__device__ __forceinline__ uint32_t swz(int r, int c, int chunks) { return uint32_t(r * chunks + (c ^ (r & 7))) * 16; }
// ... of a key tile: whole rows (cp.async), or the TMA's blocks of 64 columns.
template <bool kTma>
__device__ __forceinline__ uint32_t kv_offset(int r, int c) {
  return kTma ? tile_offset(r, c) : swz(r, c, kChunks);
}

// ---- attention -------------------------------------------------------------------------------

template <int MT, bool kFp8>
struct Smem {
  static constexpr int M = 16 * MT, WN = kWarps / MT;
  // BF16 tiles: the 2-stage ring itself, or the one tile an FP8 stage is widened into.
  static constexpr int kTiles = kFp8 ? 1 : 2;
  static constexpr size_t q = 0;                                  // [M, 576] bf16, swizzled
  static constexpr size_t kv = q + size_t(M) * kD * 2;            // [kTiles][64, 576] bf16, swizzled
  static constexpr size_t f8 = kv + size_t(kTiles) * kBN * kD * 2;         // FP8: [2][64, 576] e4m3 ring
  static constexpr size_t p = f8 + (kFp8 ? size_t(2) * kF8TileBytes : 0);  // [M, 64] bf16, swizzled
  static constexpr size_t red = p + size_t(M) * kBN * 2;          // [WN, M] f32: row max / row sum
  static constexpr size_t alpha = red + size_t(WN) * M * 4;       // [M] f32: rescale of O this tile
  static constexpr size_t row_m = alpha + size_t(M) * 4;          // [M] f32: final row max
  static constexpr size_t row_l = row_m + size_t(M) * 4;          // [M] f32: final row sum
  static constexpr size_t bars = row_l + size_t(M) * 4;           // [2] u64: TMA: stage s landed
  static constexpr size_t bytes = bars + 2 * 8 + 1024;            // + slack to align the base to 1024 (TMA)
  static_assert(kv % 1024 == 0, "TMA boxes in the 128-byte swizzle start on 1024 bytes");
};

template <int MT, bool kFp8, bool kTma>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_kernel(const __grid_constant__ MlaDecodeParams p, MlaDecodeSchedule s) {
  using SM = Smem<MT, kFp8>;
  constexpr bool kTmaLayout = kTma && !kFp8;  // BF16 tiles as the TMA writes them (an FP8 one is widened)
  constexpr int kRowBytes = kFp8 ? kD : kD * 2;
  constexpr int M = SM::M, WN = SM::WN, KW = kBN / WN, NTS = KW / 8;  // S: warp = 16 rows x KW keys
  constexpr int NTO = kL / kWarps / 8;                                // O: warp = M rows x 8 n-tiles
  static_assert(NTS == 1 || NTS % 2 == 0, "key tiling");
  extern __shared__ __align__(128) uint8_t smem_raw[];
  uint8_t* smem = kTma ? mma::align_smem_1024(smem_raw)
                       : smem_raw;
  const uint32_t sQ = mma::smem_u32(smem + SM::q), sKV = mma::smem_u32(smem + SM::kv), sP = mma::smem_u32(smem + SM::p);
  const uint32_t sF8 = mma::smem_u32(smem + SM::f8), sBars = mma::smem_u32(smem + SM::bars);
  float* s_red = reinterpret_cast<float*>(smem + SM::red);
  float* s_alpha = reinterpret_cast<float*>(smem + SM::alpha);
  float* s_row_m = reinterpret_cast<float*>(smem + SM::row_m);
  float* s_row_l = reinterpret_cast<float*>(smem + SM::row_l);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int warp_m = warp / WN, warp_n = warp % WN;
  if constexpr (kTma) {  // shared memory and parameters only: before the PDL wait, overlapping the kernel before
    if (tid == 0) {
      mbar::init(sBars, 1);
      mbar::init(sBars + 8, 1);
      wgmma::fence_async_smem();  // the barriers as the TMA sees them
      if constexpr (!kFp8) tma::prefetch_map(&p.cache_map);
    }
    __syncthreads();
  }
  // Everything but Q was written before the kernel before this one (the plan, when it ran in an
  // earlier layer; the seqs' keys and slots): with the plan settled, the first tile's loads start
  // before the PDL wait, overlapping that kernel (absorb_q), and only Q waits for it.
  if (!s.plan_settled) pdl_wait_and_trigger();
  // Settled, the CTA's first tile is read as the launch after the plan kernel stored it: one
  // dependent read, where the plan takes four (its run, its job, the job's seq, the keys' slots).
  FirstTile* first = reinterpret_cast<FirstTile*>(s.first_tiles) + blockIdx.x;
  int4 cta;
  Job job;
  SeqPlace place;
  int slot0 = -1;
  if (s.plan_settled) {
    const int4* f = reinterpret_cast<const int4*>(first);
    const int4 j0 = f[1], j1 = f[2], sp = f[3];
    cta = f[0];
    job = Job{j0.x, j0.y, j0.z, j0.w, j1.x, j1.y, j1.z, j1.w};
    place = SeqPlace{sp.x, sp.y, sp.z};
    slot0 = first->slots[tid / 4];
  } else {
    cta = reinterpret_cast<const int4*>(s.ctas)[blockIdx.x];
  }
  const int count = cta.z;
  if (count == 0) {
    if (!s.plan_settled && tid == 0) first->cta = cta;
    pdl_wait_and_trigger();  // every CTA waits before it ends (pdl.cuh); a second wait returns at once
    return;
  }
  const Job* jobs = reinterpret_cast<const Job*>(s.jobs);
  const bf16* q = static_cast<const bf16*>(p.q);
  // Scores and outputs carry the cache scale (the cache holds latent / kv_scale).
  const float scale_log2 = p.scale * p.kv_scale * 1.4426950408889634f;

  auto load_q = [&](const Job& job, const SeqPlace& place) {
    for (int idx = tid; idx < M * kChunks; idx += kThreads) {
      int r = idx / kChunks, c = idx - r * kChunks;
      bool valid = r < job.num_rows;
      const bf16* src = q;
      if (valid) {
        RowPlace rp = place_row(p, job, place, r);
        src = q + rp.token * p.q_stride_t + rp.head * p.q_stride_h + c * 8;
      }
      cp_async16(sQ + swz(r, c, kChunks), src, valid);
    }
  };
  // 4 threads a key row: the slot of this thread's key in tile `tl` of `jb` (-1 past the job's end).
  auto slot_of = [&](const Job& jb, int tl) { return key_slot(p, jb, tl * kBN + tid / 4); };
  // Each thread a quarter of its row's chunks (18 of 72 BF16, 9 of 36 FP8); rows past the job's end
  // are zero-filled so that 0-probability columns never multiply garbage.
  auto load_kv = [&](int slot, int stage) {
    if constexpr (kTma && kFp8) {  // the tile's 64 rows of 576 bytes are contiguous: one bulk copy
      if (tid == 0) {
        const uint32_t bar = sBars + stage * 8, rows = uint32_t(p.cache_rows - slot < kBN ? p.cache_rows - slot : kBN);
        mbar::arrive_expect_tx(bar, rows * kD);
        tma::bulk_load(sF8 + stage * kF8TileBytes, static_cast<const uint8_t*>(p.cache) + int64_t(slot) * kD, rows * kD,
                       bar);
      }
      return;
    } else if constexpr (kTma) {  // thread 0's slot is the tile's first key: the others follow it
      if (tid == 0) {
        const uint32_t bar = sBars + stage * 8, dst = sKV + stage * kTileBytes;
        mbar::arrive_expect_tx(bar, kTileBytes);
        const uint64_t once = evict_first_policy();  // a 16-row job reads each tile once
#pragma unroll
        for (int b = 0; b < kD / 64; ++b) tma::load_2d(dst + b * kBlockBytes, &p.cache_map, b * 64, slot, bar, once);
      }
      return;
    }
    const bool valid = slot >= 0;
    const uint8_t* src = static_cast<const uint8_t*>(p.cache) + (valid ? int64_t(slot) * kRowBytes : 0);
    if constexpr (kFp8) {
      const uint32_t dst = sF8 + stage * kF8TileBytes + (tid / 4) * kD;
#pragma unroll
      for (int c = tid % 4; c < kF8Chunks; c += 4) cp_async16(dst + c * 16, src + c * 16, valid);
    } else {
      const uint32_t dst = sKV + stage * (kBN * kD * 2);
#pragma unroll
      for (int c = tid % 4; c < kChunks; c += 4) cp_async16(dst + swz(tid / 4, c, kChunks), src + c * 16, valid);
    }
  };
  auto advance = [&](int& idx, Job& jb, int& tl) { next_tile(jobs, idx, jb, tl); };
  static_assert(kThreads == 4 * kBN, "load_kv maps 4 threads to a key");

  // Keys visible to this thread's two S rows (warp_m * 16 + g and + 8) in the current job.
  auto visible_of = [&](const Job& job, const SeqPlace& place, int r) {
    return r < job.num_rows ? place_row(p, job, place, r).visible : 0;
  };

  int job_idx = cta.x, tile = cta.y;
  if (s.plan_settled) {
    load_kv(slot0, 0);
  } else {
    job = jobs[job_idx];
    place = seq_place(p, job);
    slot0 = slot_of(job, tile);
    load_kv(slot0, 0);
    if (tid % 4 == 0) first->slots[tid / 4] = slot0;
    if (tid == 0) {
      int4* f = reinterpret_cast<int4*>(first);
      f[0] = cta;
      f[1] = make_int4(job.seq, job.row0, job.num_rows, job.num_tiles);
      f[2] = make_int4(job.num_keys, job.first_cta, job.num_splits, job.split_offset);
      f[3] = make_int4(place.q0, place.n, place.len, 0);
    }
  }
  int vis[2] = {visible_of(job, place, warp_m * 16 + g), visible_of(job, place, warp_m * 16 + g + 8)};
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};
  float acc_o[MT][NTO][4];
#pragma unroll
  for (int mi = 0; mi < MT; ++mi)
#pragma unroll
    for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;

  // 16-row jobs over an FP8 cache keep the first 24 of Q's 36 k-steps in registers (96 a thread),
  // loaded once a job: each warp otherwise reads all of Q from shared memory for every tile's S.
  // On an H100 that was 8-10% faster over an FP8 cache (which also widens each tile). A BF16
  // cache's kernel, bound by L2 and DRAM (85% / 74% under ncu), was no faster; all 36 spill.
  constexpr int kQRegSteps = MT == 1 && kFp8 ? 24 : 0;
  uint32_t qf[kQRegSteps > 0 ? kQRegSteps : 1][4];
  bool q_loaded = false;  // qf holds the current job's queries

  cp_async_commit();
  int slot_next = -1;  // this thread's slot in the tile after the current one, loaded a tile early
  if (count > 1) {
    int i1 = job_idx, t1 = tile;
    Job j1 = job;
    advance(i1, j1, t1);
    slot_next = slot_of(j1, t1);
  }
  if (s.plan_settled) pdl_wait_and_trigger();
  load_q(job, place);
  cp_async_commit();  // the loop's first wait<1> leaves only its own group (the second tile) in flight

  for (int n = 0; n < count; ++n) {
    const int stage = n & 1;
    const bool job_ends = tile + 1 == job.num_tiles || n + 1 == count;
    int next_idx = job_idx, next_tile = tile;
    Job next = job;
    int slot_after = -1;
    if (n + 1 < count) {
      advance(next_idx, next, next_tile);
      load_kv(slot_next, stage ^ 1);
      if (n + 2 < count) {
        int i2 = next_idx, t2 = next_tile;
        Job j2 = next;
        advance(i2, j2, t2);
        slot_after = slot_of(j2, t2);  // used after the S phase: its latency hides behind the MMAs
      }
    }
    cp_async_commit();
    cp_async_wait<1>();
    const int valid = job.num_keys - tile * kBN;  // keys of this tile (< 64 in a job's last one)
    if constexpr (kTma) mbar::wait(sBars + stage * 8, (n >> 1) & 1);
    if constexpr (kTmaLayout) zero_tile_rows_from(smem + SM::kv + stage * kTileBytes, valid, tid, kThreads);
    __syncthreads();
    if constexpr (kFp8) {  // the BF16 tile's last readers passed the barrier that ends the previous tile
      widen_fp8_tile(smem + SM::f8 + stage * kF8TileBytes, smem + SM::kv, tid, kThreads,
                     [](int r, int c) { return swz(r, c, kChunks); }, kTma ? valid : kBN);
      __syncthreads();
    }

    // ---- S = Q K^T for rows warp_m*16.. and keys warp_n*KW.. of this tile
    const uint32_t sK = sKV + (kFp8 ? 0 : stage * (kBN * kD * 2));
    float acc_s[NTS][4], acc_odd[4] = {0.f, 0.f, 0.f, 0.f};  // NTS == 1: odd k-steps, a second MMA chain
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[nt][e] = 0.f;
    if constexpr (NTS == 1) {
      if (kQRegSteps > 0 && !q_loaded) {
#pragma unroll
        for (int kk = 0; kk < kQRegSteps; ++kk) ldsm_x4(qf[kk], sQ + swz(lane & 15, kk * 2 + (lane >> 4), kChunks));
        q_loaded = true;
      }
#pragma unroll
      for (int kk = 0; kk < kQRegSteps; ++kk) {
        uint32_t b[2];
        mma::ldsm_x2(b, sK + kv_offset<kTmaLayout>(warp_n * KW + (lane & 7), kk * 2 + ((lane >> 3) & 1)));
        mma_bf16(kk % 2 ? acc_odd : acc_s[0], qf[kk], b[0], b[1]);
      }
#pragma unroll 4
      for (int kk = kQRegSteps; kk < kD / 16; ++kk) {
        uint32_t a[4], b[2];
        ldsm_x4(a, sQ + swz(lane & 15, kk * 2 + (lane >> 4), kChunks));
        mma::ldsm_x2(b, sK + kv_offset<kTmaLayout>(warp_n * KW + (lane & 7), kk * 2 + ((lane >> 3) & 1)));
        mma_bf16(kk % 2 ? acc_odd : acc_s[0], a, b[0], b[1]);
      }
    } else {
#pragma unroll 2
      for (int kk = 0; kk < kD / 16; ++kk) {
        uint32_t a[4];
        ldsm_x4(a, sQ + swz(warp_m * 16 + (lane & 15), kk * 2 + (lane >> 4), kChunks));
#pragma unroll
        for (int np = 0; np < NTS / 2; ++np) {
          uint32_t b[4];
          int mat = lane >> 3;
          ldsm_x4(b, sK + kv_offset<kTmaLayout>(warp_n * KW + np * 16 + (mat >> 1) * 8 + (lane & 7), kk * 2 + (mat & 1)));
          mma_bf16(acc_s[2 * np], a, b[0], b[1]);
          mma_bf16(acc_s[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
    if constexpr (NTS == 1)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc_s[0][e] += acc_odd[e];

    // The cp.async ring's prefetch; over the TMA it cost 9% at B 64 (L2 86% busy under ncu).
    if constexpr (!kTma) prefetch_row_l2(p.cache, kRowBytes, slot_after, tid % 4, 4);
    slot_next = slot_after;

    // ---- online softmax (log2 domain); c[0..1] are row g, c[2..3] row g + 8
    const int key0 = tile * kBN + warp_n * KW;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key = key0 + nt * 8 + 2 * t4 + (e & 1);
        float v = key < vis[e >> 1] ? acc_s[nt][e] * scale_log2 : -INFINITY;
        acc_s[nt][e] = v;
        mx[e >> 1] = fmaxf(mx[e >> 1], v);
      }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
      if (t4 == 0) s_red[warp_n * M + warp_m * 16 + g + 8 * h] = mx[h];
    }
    __syncthreads();
    float m_use[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = warp_m * 16 + g + 8 * h;
      float tm = -INFINITY;
#pragma unroll
      for (int w = 0; w < WN; ++w) tm = fmaxf(tm, s_red[w * M + r]);
      float m_new = fmaxf(m_run[h], tm);
      m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: keep everything 0
      float alpha = fast_exp2(m_run[h] - m_use[h]);
      m_run[h] = m_new;
      l_run[h] *= alpha;
      if (warp_n == 0 && t4 == 0) s_alpha[r] = alpha;
    }
#pragma unroll
    for (int nt = 0; nt < NTS; ++nt) {
      float p0 = fast_exp2(acc_s[nt][0] - m_use[0]), p1 = fast_exp2(acc_s[nt][1] - m_use[0]);
      float p2 = fast_exp2(acc_s[nt][2] - m_use[1]), p3 = fast_exp2(acc_s[nt][3] - m_use[1]);
      l_run[0] += p0 + p1;
      l_run[1] += p2 + p3;
      int col = warp_n * KW + nt * 8 + 2 * t4, r = warp_m * 16 + g;
      uint8_t* base = smem + SM::p;
      *reinterpret_cast<uint32_t*>(base + swz(r, col / 8, kBN / 8) + (col % 8) * 2) = pack_bf16(p0, p1);
      *reinterpret_cast<uint32_t*>(base + swz(r + 8, col / 8, kBN / 8) + (col % 8) * 2) = pack_bf16(p2, p3);
    }
    __syncthreads();

    // ---- O = O * alpha + P V for all M rows and this warp's 64 columns
#pragma unroll
    for (int mi = 0; mi < MT; ++mi) {
      float a0 = s_alpha[mi * 16 + g], a1 = s_alpha[mi * 16 + g + 8];
#pragma unroll
      for (int nt = 0; nt < NTO; ++nt) {
        acc_o[mi][nt][0] *= a0;
        acc_o[mi][nt][1] *= a0;
        acc_o[mi][nt][2] *= a1;
        acc_o[mi][nt][3] *= a1;
      }
    }
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      uint32_t b[NTO][2];
#pragma unroll
      for (int np = 0; np < NTO / 2; ++np) {
        int mat = lane >> 3, key = ks * 16 + (mat & 1) * 8 + (lane & 7);
        int chunk = warp * NTO + np * 2 + (mat >> 1);
        uint32_t t[4];
        mma::ldsm_x4_trans(t, sK + kv_offset<kTmaLayout>(key, chunk));
        b[2 * np][0] = t[0], b[2 * np][1] = t[1], b[2 * np + 1][0] = t[2], b[2 * np + 1][1] = t[3];
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi) {
        uint32_t a[4];
        ldsm_x4(a, sP + swz(mi * 16 + (lane & 15), ks * 2 + (lane >> 4), kBN / 8));
#pragma unroll
        for (int nt = 0; nt < NTO; ++nt) mma_bf16(acc_o[mi][nt], a, b[nt][0], b[nt][1]);
      }
    }

    if (job_ends) {
      // Row sums: the quad, then the key-warps through shared memory.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        if (t4 == 0) s_red[warp_n * M + warp_m * 16 + g + 8 * h] = l;
      }
      __syncthreads();
      if (warp_n == 0 && t4 == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int r = warp_m * 16 + g + 8 * h;
          float l = 0;
          for (int w = 0; w < WN; ++w) l += s_red[w * M + r];
          s_row_l[r] = l;
          s_row_m[r] = m_run[h];
        }
      }
      __syncthreads();
      const bool split = job.num_splits > 1;
      const int slot = partial_slot(s, job);
      // Row r's scale (1 / its sum, times the cache scale) and log2-sum-exp2 (for the merge).
      auto row_inv = [&](int r) { return s_row_l[r] > 0 ? p.kv_scale / s_row_l[r] : 0.f; };
      auto row_lse = [&](int r) { return s_row_l[r] > 0 ? s_row_m[r] + log2f(s_row_l[r]) : -INFINITY; };
      if (MT == 1 && split) {
        // A 16-row job's partial rows through shared memory (the tile just read is free), then out
        // in whole 16-byte pieces: each thread's fragments are 8 bytes in 16 rows.
        constexpr int kLd = kL + 8;  // floats: rows 8 banks apart
        float* stg = reinterpret_cast<float*>(smem + SM::kv + (kFp8 ? 0 : size_t(stage) * kBN * kD * 2));
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = g + 8 * h;
          const float inv = row_inv(r);
#pragma unroll
          for (int nt = 0; nt < NTO; ++nt) {
            const int col = warp * NTO * 8 + nt * 8 + 2 * t4;
            *reinterpret_cast<float2*>(stg + r * kLd + col) =
                make_float2(acc_o[0][nt][2 * h] * inv, acc_o[0][nt][2 * h + 1] * inv);
          }
          if (warp == 0 && t4 == 0 && r < job.num_rows) s.partial_lse[int64_t(slot) * M + r] = row_lse(r);
        }
        __syncthreads();
        float* dst = s.partial_o + int64_t(slot) * M * kL;
        for (int i = tid; i < job.num_rows * (kL / 4); i += kThreads) {
          const int r = i / (kL / 4), c4 = i % (kL / 4);
          reinterpret_cast<float4*>(dst + r * kL)[c4] = *reinterpret_cast<const float4*>(stg + r * kLd + 4 * c4);
        }
        if constexpr (kTmaLayout) wgmma::fence_async_smem();  // before the TMA refills the tile
      } else {
#pragma unroll
        for (int mi = 0; mi < MT; ++mi)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            int r = mi * 16 + g + 8 * h;
            if (r >= job.num_rows) continue;
            const float inv = row_inv(r);
            if (!split) {
              RowPlace rp = place_row(p, job, place, r);
              bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h;
#pragma unroll
              for (int nt = 0; nt < NTO; ++nt) {
                int col = warp * NTO * 8 + nt * 8 + 2 * t4;
                *reinterpret_cast<__nv_bfloat162*>(dst + col) =
                    __floats2bfloat162_rn(acc_o[mi][nt][2 * h] * inv, acc_o[mi][nt][2 * h + 1] * inv);
              }
            } else {
              float* dst = s.partial_o + (int64_t(slot) * M + r) * kL;
#pragma unroll
              for (int nt = 0; nt < NTO; ++nt) {
                int col = warp * NTO * 8 + nt * 8 + 2 * t4;
                *reinterpret_cast<float2*>(dst + col) =
                    make_float2(acc_o[mi][nt][2 * h] * inv, acc_o[mi][nt][2 * h + 1] * inv);
              }
              if (warp == 0 && t4 == 0) s.partial_lse[int64_t(slot) * M + r] = row_lse(r);
            }
          }
      }
#pragma unroll
      for (int mi = 0; mi < MT; ++mi)
#pragma unroll
        for (int nt = 0; nt < NTO; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc_o[mi][nt][e] = 0.f;
      m_run[0] = m_run[1] = -INFINITY;
      l_run[0] = l_run[1] = 0.f;
      if (n + 1 < count) {
        // sQ is no longer read (the S phase is behind two barriers): bring the next job's queries.
        place = seq_place(p, next);
        load_q(next, place);
        cp_async_commit();
        cp_async_wait<0>();
        q_loaded = false;
        vis[0] = visible_of(next, place, warp_m * 16 + g);
        vis[1] = visible_of(next, place, warp_m * 16 + g + 8);
      }
    }
    __syncthreads();  // the stage just read is refilled next iteration; sQ / s_red settle
    job = next;
    job_idx = next_idx;
    tile = next_tile;
  }
}

// ---- combine ---------------------------------------------------------------------------------

// Merges a split row: out = sum_k w_k o_k / sum_k w_k with w_k = 2^(lse_k - max lse). A warp holds
// a whole row (4 float4 a lane), so a block's warps take several rows at once and a large batch (a
// few splits a job, thousands of rows) needs about one wave; a small batch cuts each job into up
// to one split a CTA, so `S` warps share a row there, each every S-th split with KB splits' loads in
// flight, and their sums meet in shared memory in a fixed order. (One 128-thread block a row,
// walking the splits one dependent L2 round trip at a time, took 52 us at 16 heads, B 1, 32k keys.)
// Block: RB rows x S warps, RB = max(8 / S, 1). Shared memory: [RB][S - 1][kL + 4] (a warp's sums,
// then its weight sum), then each row's weights [RB][num_ctas].
template <int MT>
__global__ void __launch_bounds__(kCombineMaxWarps * 32)
    mla_decode_combine_kernel(MlaDecodeParams p, MlaDecodeSchedule s, int S) {
  constexpr int M = 16 * MT, KB = kCombineBatch;
  extern __shared__ float combine_smem[];
  __shared__ float warp_max[kCombineMaxWarps];
  // The plan ran before the attention kernel (the kernel before this one), and the seqs' metadata
  // before both: the job and the row's place are read before the PDL wait, only the partials after.
  const int j = blockIdx.x;
  const Job job = j < *s.num_jobs ? reinterpret_cast<const Job*>(s.jobs)[j] : Job{};
  const int RB = int(blockDim.x) / 32 / S, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lr = warp / S, sg = warp % S, r = blockIdx.y * RB + lr, n = job.num_splits;
  const bool has_row = r < job.num_rows;  // warp-uniform: a warp without one still meets the barriers
  const RowPlace rp = place_row(p, job, has_row ? r : 0);
  pdl_wait_and_trigger();  // before any return: every CTA waits before it ends (pdl.cuh)
  if (n <= 1) return;
  float* red = combine_smem;
  float* w = red + RB * (S - 1) * kSplitSumsFloats + lr * s.num_ctas;
  const float* lse = s.partial_lse + int64_t(job.split_offset) * M + r;
  float mx = -INFINITY;
  if (has_row)
    for (int k = sg * 32 + lane; k < n; k += S * 32) {
      w[k] = lse[int64_t(k) * M];
      mx = fmaxf(mx, w[k]);
    }
#pragma unroll
  for (int d = 16; d > 0; d /= 2) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, d));
  if (lane == 0) warp_max[warp] = mx;
  __syncthreads();
  for (int i = 0; i < S; ++i) mx = fmaxf(mx, warp_max[lr * S + i]);
  // A split whose rows saw no key has lse -inf and weight 0: skipped below, whatever its o holds.
  if (has_row)
    for (int k = sg * 32 + lane; k < n; k += S * 32) w[k] = w[k] == -INFINITY ? 0.f : fast_exp2(w[k] - mx);
  __syncthreads();
  SplitSums sums;
  if (has_row)
    add_splits<KB, true>(sums, s.partial_o + (int64_t(job.split_offset) * M + r) * kL, int64_t(M) * kL, sg, S, n,
                         [&](int k) { return w[k]; });
  fold_split_sums(sums, red + lr * (S - 1) * kSplitSumsFloats, sg, S, has_row);
  if (!has_row || sg > 0) return;
  bf16* dst = static_cast<bf16*>(p.out) + rp.token * p.out_stride_t + rp.head * p.out_stride_h + 4 * lane;
#pragma unroll
  for (int i = 0; i < 4; ++i) *reinterpret_cast<uint2*>(dst + 128 * i) = merged_bf16x4(sums, i);
}

template <int MT, bool kFp8, bool kTma>
void run_mma_sync(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  constexpr size_t smem = Smem<MT, kFp8>::bytes;
  static_assert(smem <= 227 * 1024, "shared memory of one block");
  static bool configured = false;  // per device in practice: one GPU per process here
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<MT, kFp8, kTma>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(smem)));
    configured = true;
  }
  launch_pdl(mla_decode_kernel<MT, kFp8, kTma>, s.num_ctas, kThreads, smem, stream, p, s);
}

// Pages of 64 keys serve 16-row jobs (TMA boxes of a BF16 cache, bulk copies of an FP8 one); 64-row
// jobs take them on the paired kernel (BF16).
template <int MT>
void run_mma_sync(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  if (p.cache_fp8 && MT == 1 && p.cache_tma)
    run_mma_sync<MT, true, MT == 1>(p, s, stream);
  else if (p.cache_fp8)
    run_mma_sync<MT, true, false>(p, s, stream);
  else if (MT == 1 && p.cache_tma)
    run_mma_sync<MT, false, MT == 1>(p, s, stream);
  else
    run_mma_sync<MT, false, false>(p, s, stream);
}

}  // namespace

void mla::launch_mla_decode_combine(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  // Warps a row: about a quarter of the splits a job can average (num_ctas over the jobs a batch of
  // this shape can have, at least half of max_jobs): 16 for a batch of one, 1 for a large batch.
  // The grid depends on the shape only.
  const int64_t splits = 2 * int64_t(s.num_ctas) / std::max(s.max_jobs, 1) + 1;
  int S = 1;
  while (S < kCombineMaxWarps && 4 * S < splits) S *= 2;
  const int warps = std::max(S, kCombineRows), rows = warps / S, M = 16 * s.m_tiles;
  const size_t smem = (size_t(rows) * (S - 1) * kSplitSumsFloats + size_t(rows) * s.num_ctas) * sizeof(float);
  MLA_CHECK(smem <= 48 * 1024, "mla_decode combine: {} CTAs' weights do not fit in shared memory", s.num_ctas);
  const dim3 grid(unsigned(s.max_jobs), unsigned((M + rows - 1) / rows)), block(32 * warps);
  if (s.m_tiles == 4)
    launch_pdl(mla_decode_combine_kernel<4>, grid, block, smem, stream, p, s, S);
  else
    launch_pdl(mla_decode_combine_kernel<1>, grid, block, smem, stream, p, s, S);
}

void launch_mla_decode_run(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream,
                           bool combine) {
  if (s.m_tiles == 4 && s.wgmma && s.pairs && !p.cache_fp8)
    mla::launch_mla_decode_pairs(p, s, stream);
  else if (s.m_tiles == 4 && s.wgmma)
    mla::launch_mla_decode_wgmma(p, s, stream);
  else if (s.m_tiles == 4)
    run_mma_sync<4>(p, s, stream);
  else
    run_mma_sync<1>(p, s, stream);
  if (combine) mla::launch_mla_decode_combine(p, s, stream);
}

}  // namespace mlaserve::cuda
