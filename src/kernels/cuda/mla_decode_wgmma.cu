// MLA decode attention for jobs of 64 query rows on Hopper warpgroup MMA (see mla_decode.h for the
// plan; mla_decode.cu has the mma.sync kernel for 16-row jobs and the combine).
//
// A CTA is two warpgroups over a 2-stage ring of 64-key tiles of the paged cache (cp.async, 73.7 KB
// a tile) and its job's 64 query rows, all in the 128-byte swizzle layout that wgmma reads: a
// 576-wide row is 9 blocks of 64 columns, and block b of a tile holds 64 rows x 128 bytes. Per tile:
//   warpgroup 0: S = Q K^T [64 x 64] (both operands K-major in shared memory); online softmax in
//                registers (a warp holds whole rows of S, so warps exchange nothing); P to shared
//                memory for warpgroup 1, and as register fragments for O[:, 0:256] += P V.
//   warpgroup 1: waits on a named barrier for P and the rows' rescale, O[:, 256:512] += P V.
// The tile is read once from memory and serves as K (K-major, for S) and as V (its first 512
// columns read MN-major, for O). Each warpgroup keeps its half of O in 128 fp32 registers a thread.
// An FP8 cache's tiles (36.9 KB) come into a 2-stage e4m3 ring instead, and each is widened into
// one BF16 tile in the same layout before the warpgroups read it.
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mla_decode_device.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/wgmma.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using namespace mla;
using mma::cp_async16;
using mma::fast_exp2;
using mma::pack_bf16;

constexpr int kThreads = 256, kM = 64;
static_assert(kBN == 64 && kThreads == 4 * kBN, "4 threads load a key row");

template <bool kFp8>
struct SmemLayout {
  static constexpr uint32_t kTiles = kFp8 ? 1 : 2;           // BF16 tiles: the ring, or the widened one
  static constexpr uint32_t q = 0;                           // [64, 576]
  static constexpr uint32_t kv = q + kTileBytes;             // [kTiles][64, 576]
  static constexpr uint32_t f8 = kv + kTiles * kTileBytes;   // FP8: [2][64, 576] e4m3, rows contiguous
  static constexpr uint32_t p = f8 + (kFp8 ? 2 * kF8TileBytes : 0);  // [64, 64] bf16 probabilities
  static constexpr uint32_t alpha = p + kBlockBytes;         // [64] f32: rescale of O this tile
  static constexpr uint32_t row_l = alpha + kM * 4;          // [64] f32: final row sum
  static constexpr uint32_t row_m = row_l + kM * 4;          // [64] f32: final row max
  static constexpr uint32_t bytes = row_m + kM * 4 + 1024;   // + slack to align the base to 1024
};

constexpr int kBarP = 1;  // warpgroup 0 -> 1: P and alpha of this tile are in shared memory

template <bool kFp8>
__global__ void __launch_bounds__(kThreads, 1) mla_decode_wgmma_kernel(MlaDecodeParams p, MlaDecodeSchedule s) {
  using Smem = SmemLayout<kFp8>;
  constexpr int kRowBytes = kFp8 ? kD : kD * 2;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = mma::align_smem_1024(smem_raw);
  const uint32_t sQ = mma::smem_u32(smem + Smem::q), sKV = mma::smem_u32(smem + Smem::kv);
  const uint32_t sP = mma::smem_u32(smem + Smem::p), sF8 = mma::smem_u32(smem + Smem::f8);
  float* s_alpha = reinterpret_cast<float*>(smem + Smem::alpha);
  float* s_row_l = reinterpret_cast<float*>(smem + Smem::row_l);
  float* s_row_m = reinterpret_cast<float*>(smem + Smem::row_m);

  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32, g = lane / 4, t4 = lane % 4;
  const int r0 = (tid % 128) / 32 * 16 + g;  // this thread's rows of S and O: r0 and r0 + 8
  // As the 16-row kernel (mla_decode.cu): with the plan settled, the first tile loads before the
  // PDL wait and only Q waits for it.
  if (!s.plan_settled) pdl_wait_and_trigger();
  const int4 cta = reinterpret_cast<const int4*>(s.ctas)[blockIdx.x];
  const int count = cta.z;
  if (count == 0) {
    pdl_wait_and_trigger();  // every CTA waits before it ends (pdl.cuh); a second wait returns at once
    return;
  }
  const Job* jobs = reinterpret_cast<const Job*>(s.jobs);
  const bf16* q = static_cast<const bf16*>(p.q);
  // Scores and outputs carry the cache scale (the cache holds latent / kv_scale).
  const float scale_log2 = p.scale * p.kv_scale * 1.4426950408889634f;

  // 4 threads a row (query row or key row), 18 of its 72 chunks each; rows past the job's end
  // are zero-filled, so that 0-probability columns never multiply garbage.
  auto load_q = [&](const Job& job) {
    const int r = tid / 4;
    const bool valid = r < job.num_rows;
    const bf16* src = q;
    if (valid) {
      RowPlace rp = place_row(p, job, r);
      src = q + rp.token * p.q_stride_t + rp.head * p.q_stride_h;
    }
#pragma unroll
    for (int c = tid % 4; c < kChunks; c += 4) cp_async16(sQ + tile_offset(r, c), src + (valid ? c * 8 : 0), valid);
  };
  auto load_kv = [&](int slot, int stage) {
    const bool valid = slot >= 0;
    const uint8_t* src = static_cast<const uint8_t*>(p.cache) + (valid ? int64_t(slot) * kRowBytes : 0);
    if constexpr (kFp8) {  // 9 of the row's 36 chunks
      const uint32_t dst = sF8 + stage * kF8TileBytes + (tid / 4) * kD;
#pragma unroll
      for (int c = tid % 4; c < kF8Chunks; c += 4) cp_async16(dst + c * 16, src + (valid ? c * 16 : 0), valid);
    } else {
      const uint32_t dst = sKV + stage * kTileBytes;
#pragma unroll
      for (int c = tid % 4; c < kChunks; c += 4)
        cp_async16(dst + tile_offset(tid / 4, c), src + (valid ? c * 16 : 0), valid);
    }
  };
  auto slot_of = [&](const Job& jb, int tl) { return key_slot(p, jb, tl * kBN + tid / 4); };
  auto visible_of = [&](const Job& job, int r) { return r < job.num_rows ? place_row(p, job, r).visible : 0; };

  int job_idx = cta.x, tile = cta.y;
  Job job = jobs[job_idx];
  int vis[2] = {visible_of(job, r0), visible_of(job, r0 + 8)};  // warpgroup 0 only
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.f, 0.f};  // warpgroup 0 only
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.f;

  load_kv(slot_of(job, tile), 0);
  if (s.plan_settled) pdl_wait_and_trigger();
  load_q(job);
  mma::cp_async_commit();
  int slot_next = -1;  // this thread's slot in the tile after the current one, loaded a tile early
  if (count > 1) {
    int i1 = job_idx, t1 = tile;
    Job j1 = job;
    next_tile(jobs, i1, j1, t1);
    slot_next = slot_of(j1, t1);
  }

  for (int n = 0; n < count; ++n) {
    const int stage = n & 1;
    const bool job_ends = tile + 1 == job.num_tiles || n + 1 == count;
    int next_idx = job_idx, next_tile_idx = tile;
    Job next = job;
    int slot_after = -1;
    if (n + 1 < count) {
      next_tile(jobs, next_idx, next, next_tile_idx);
      load_kv(slot_next, stage ^ 1);
      if (n + 2 < count) {
        int i2 = next_idx, t2 = next_tile_idx;
        Job j2 = next;
        next_tile(jobs, i2, j2, t2);
        slot_after = slot_of(j2, t2);
      }
    }
    mma::cp_async_commit();
    mma::cp_async_wait<1>();
    if constexpr (kFp8) {  // the BF16 tile's last readers passed the barrier that ends the previous tile
      __syncthreads();
      widen_fp8_tile(smem + Smem::f8 + stage * kF8TileBytes, smem + Smem::kv, tid, kThreads, tile_offset);
    }
    wgmma::fence_async_smem();
    __syncthreads();

    const uint32_t sK = sKV + (kFp8 ? 0 : stage * kTileBytes);
    if (wg == 0) {
      // ---- S = Q K^T: 36 steps of K = 16, 4 in each 128-byte block
      float sc[32];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kD / 16; ++kk) {
        const uint32_t off = (kk / 4) * kBlockBytes + (kk % 4) * 32;
        wgmma::mma_m64n64k16_ss<0>(sc, wgmma::desc_sw128(sQ + off, 16, 1024), wgmma::desc_sw128(sK + off, 16, 1024),
                                   kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(sc);
      prefetch_row_l2(p.cache, kRowBytes, slot_after, tid % 4, 4);  // keys 0..31 of the tile after next

      // ---- online softmax (log2 domain): sc[4j + e] is row r0 (e < 2) or r0 + 8, key 8j + 2 t4 + e % 2
      const int key0 = tile * kBN + 2 * t4;
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int h = (i >> 1) & 1, key = key0 + (i / 4) * 8 + (i & 1);
        sc[i] = key < vis[h] ? sc[i] * scale_log2 : -INFINITY;
        mx[h] = fmaxf(mx[h], sc[i]);
      }
      float alpha[2], m_use[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 1));
        mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffff, mx[h], 2));
        const float m_new = fmaxf(m_run[h], mx[h]);
        m_use[h] = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet: keep everything 0
        alpha[h] = fast_exp2(m_run[h] - m_use[h]);
        m_run[h] = m_new;
        l_run[h] *= alpha[h];
      }
      if (t4 == 0) s_alpha[r0] = alpha[0], s_alpha[r0 + 8] = alpha[1];
      // P as A fragments: step ks covers keys 16 ks.. = column blocks 2 ks and 2 ks + 1.
      uint32_t pa[4][4];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float p0 = fast_exp2(sc[4 * j] - m_use[0]), p1 = fast_exp2(sc[4 * j + 1] - m_use[0]);
        const float p2 = fast_exp2(sc[4 * j + 2] - m_use[1]), p3 = fast_exp2(sc[4 * j + 3] - m_use[1]);
        l_run[0] += p0 + p1;
        l_run[1] += p2 + p3;
        pa[j / 2][(j % 2) * 2] = pack_bf16(p0, p1);
        pa[j / 2][(j % 2) * 2 + 1] = pack_bf16(p2, p3);
        // The same to shared memory: [64 rows, 64 keys] K-major, one swizzled block.
        const int rb = r0 * 128 + t4 * 4;
        *reinterpret_cast<uint32_t*>(smem + Smem::p + rb + ((j ^ (r0 & 7)) * 16)) = pa[j / 2][(j % 2) * 2];
        *reinterpret_cast<uint32_t*>(smem + Smem::p + rb + 8 * 128 + ((j ^ (r0 & 7)) * 16)) =
            pa[j / 2][(j % 2) * 2 + 1];
      }
      wgmma::fence_async_smem();
      wgmma::bar_arrive(kBarP, kThreads);

      // ---- O[:, 0:256] = O * alpha + P V
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_rs<1>(o, pa[ks], wgmma::desc_sw128(sK + ks * 16 * 128, kBlockBytes, 1024), true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(o);
    } else {
      prefetch_row_l2(p.cache, kRowBytes, slot_after, tid % 4, 4);  // keys 32..63 of the tile after next
      wgmma::bar_sync(kBarP, kThreads);
      const float a0 = s_alpha[r0], a1 = s_alpha[r0 + 8];
      // ---- O[:, 256:512] = O * alpha + P V
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] *= (i >> 1) & 1 ? a1 : a0;
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < kBN / 16; ++ks)
        wgmma::mma_m64n256k16_ss<1>(o, wgmma::desc_sw128(sP + ks * 32, 16, 1024),
                                    wgmma::desc_sw128(sK + 4 * kBlockBytes + ks * 16 * 128, kBlockBytes, 1024), true);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operand(o);
    }
    slot_next = slot_after;

    if (job_ends) {
      if (wg == 0) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float l = l_run[h];
          l += __shfl_xor_sync(0xffffffff, l, 1);
          l += __shfl_xor_sync(0xffffffff, l, 2);
          if (t4 == 0) s_row_l[r0 + 8 * h] = l, s_row_m[r0 + 8 * h] = m_run[h];
        }
      }
      __syncthreads();
      const float row_l[2] = {s_row_l[r0], s_row_l[r0 + 8]}, row_m[2] = {s_row_m[r0], s_row_m[r0 + 8]};
      store_o_rows(p, s, job, partial_slot(s, job), o, r0, wg * 256 + 2 * t4, row_l, row_m, wg == 0 && t4 == 0);
#pragma unroll
      for (int i = 0; i < 128; ++i) o[i] = 0.f;
      m_run[0] = m_run[1] = -INFINITY;
      l_run[0] = l_run[1] = 0.f;
      if (n + 1 < count) {
        // Q is no longer read (every S of this job is complete): bring the next job's queries.
        load_q(next);
        mma::cp_async_commit();
        mma::cp_async_wait<0>();
        wgmma::fence_async_smem();
        vis[0] = visible_of(next, r0);
        vis[1] = visible_of(next, r0 + 8);
      }
    }
    __syncthreads();  // the stage just read is refilled next iteration; sP, s_alpha, s_row_* settle
    job = next;
    job_idx = next_idx;
    tile = next_tile_idx;
  }
}

}  // namespace

namespace {

template <bool kFp8>
void run_wgmma(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  constexpr uint32_t smem = SmemLayout<kFp8>::bytes;
  static_assert(smem <= 227 * 1024, "shared memory of one block");
  static bool configured = false;  // per device in practice: one GPU per process here
  if (!configured) {
    CUDA_CHECK(
        cudaFuncSetAttribute(mla_decode_wgmma_kernel<kFp8>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    configured = true;
  }
  launch_pdl(mla_decode_wgmma_kernel<kFp8>, s.num_ctas, kThreads, smem, stream, p, s);
}

}  // namespace

void mla::launch_mla_decode_wgmma(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream) {
  if (p.cache_fp8)
    run_wgmma<true>(p, s, stream);
  else
    run_wgmma<false>(p, s, stream);
}

}  // namespace mlaserve::cuda
