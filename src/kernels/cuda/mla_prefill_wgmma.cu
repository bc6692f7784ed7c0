// MLA prefill attention on Hopper warpgroup MMA (sm_90a), warp-specialized.
//
// One block = (128 query rows, head, seq), three warpgroups:
// - a loader: cp.async of the Q tile once, then key and value tiles of 128 keys into two stages.
//   K and V of a stage have each a `full` mbarrier their copies complete and an `empty` one the MMA
//   warpgroups arrive on when done with them: K is free once S is, V only after the next tile's S
//   (P·V runs a tile late), so K of tile t + 2 loads while tile t + 1 is computed. No block-wide
//   barrier. The loader gives most of its registers to the others (setmaxnreg).
// - two MMA warpgroups of 64 query rows each. Per key tile: S = Q·K^T (wgmma, both operands in
//   shared memory), then the previous tile's O += P·V (P from registers) is issued right behind it,
//   so the softmax of this tile (mask, row max, exp2) runs while the tensor cores do that P·V.
//   With kPingPong the two warpgroups take turns issuing their MMAs (named barriers), so one's
//   softmax overlaps the other's MMAs instead of both doing softmax at once.
//
// Shared tiles are 64-column blocks of 128-byte rows in the 128-byte swizzle (wgmma.cuh): Q and K
// rows (192 = nope 128 + rope 64) are three blocks, V rows (128) two. S's K-major operands start
// 32 bytes into a block per K step; V is P·V's MN-major B operand.
#include <cuda_bf16.h>

#include <type_traits>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mbarrier.cuh"
#include "kernels/cuda/mla_prefill.h"
#include "kernels/cuda/mla_prefill_tile.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using mma::cp_async16;
using mma::fast_exp2;
using mma::pack_bf16;
using mma::smem_u32;

constexpr int kBM = 128, kBN = 128;  // query rows, keys a tile
constexpr int kThreads = 384;        // loader + 2 MMA warpgroups
constexpr int kLoaderRegs = 64, kMmaRegs = 216;  // setmaxnreg split, loader / MMA warpgroups
static_assert(wgmma::regs_split_fits(2, kLoaderRegs, kMmaRegs), "MMA registers over the loader's");
constexpr int kBlockBytes = 128 * 128;           // one 64-column block of 128 rows
constexpr int kQBytes = 3 * kBlockBytes, kKBytes = 3 * kBlockBytes, kVBytes = 2 * kBlockBytes;
constexpr int kStageBytes = kKBytes + kVBytes;
constexpr int kSmem = kQBytes + 2 * kStageBytes + 9 * 8;  // + mbarriers: full and empty of K[2], V[2]; Q

// One loader thread's share of a 128-row tile part of kChunks 16-byte chunks a row (16: 128
// columns, two blocks; 8: 64 columns, one block): chunk tid % kChunks of every kStep-th row from
// tid / kChunks. Each copy then costs a pointer step and a compare; rows from `valid_rows` on are
// zero-filled (`safe` is any readable row).
template <int kChunks>
__device__ __forceinline__ void load_part(uint32_t dst, const bf16* src, int64_t ld, const bf16* safe,
                                          int valid_rows, int tid) {
  constexpr int kStep = 128 / kChunks;
  const int c = tid % kChunks, r = tid / kChunks;
  dst += (c >> 3) * kBlockBytes + r * 128 + (((c & 7) ^ (r & 7)) << 4);  // r + kStep j keeps r % 8
  src += r * ld + c * 8;
  safe += c * 8;
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const bool ok = r + kStep * j < valid_rows;
    cp_async16(dst + j * kStep * 128, ok ? src + j * kStep * ld : safe, ok);
  }
}

template <bool kPingPong>
__global__ void __launch_bounds__(kThreads, 1) mla_prefill_wgmma_kernel(const MlaPrefillParams p) {
  pdl_wait_and_trigger();
  MlaPrefillTile tl;
  if (!mla_prefill_tile<kBM, kBN>(p, tl)) return;
  const int head = tl.head, q0 = tl.q0, m0 = tl.m0, rows = tl.rows, k_base = tl.k_base;
  const int prefix = tl.prefix, kv_end = tl.kv_end, num_tiles = tl.num_tiles;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sQ = smem_u32(smem_raw);
  const uint32_t sStage = sQ + kQBytes;  // stage s: K at sStage + s * kStageBytes, V after it
  const uint32_t bars = sStage + 2 * kStageBytes;
  // Stage s's barrier of each kind at kind + 8 s.
  const uint32_t full_k = bars, full_v = bars + 16, empty_k = bars + 32, empty_v = bars + 48, bar_q = bars + 64;
  if (threadIdx.x == 0) {
    for (int s = 0; s < 2; ++s) {
      mbar::init(full_k + 8 * s, 128);
      mbar::init(full_v + 8 * s, 128);
      mbar::init(empty_k + 8 * s, 256);
      mbar::init(empty_v + 8 * s, 256);
    }
    mbar::init(bar_q, 128);
  }
  __syncthreads();

  if (threadIdx.x < 128) {  // loader
    wgmma::regs_dec<kLoaderRegs>();
    const int tid = threadIdx.x;
    const bf16* qg = static_cast<const bf16*>(p.q) + int64_t(q0 + m0) * p.q_st0 + int64_t(head) * p.q_st1;
    load_part<16>(sQ, qg, p.q_st0, qg, rows, tid);
    load_part<8>(sQ + 2 * kBlockBytes, qg + kMlaNope, p.q_st0, qg + kMlaNope, rows, tid);
    mbar::arrive_on_copies(bar_q);
    // K rows are [k_nope of the head | k_pe], V rows the head's v; keys from kv_start[seq].
    const bf16* kv_first = static_cast<const bf16*>(p.kv) + int64_t(k_base) * p.kv_st0 + int64_t(head) * p.kv_st1;
    const bf16* pe_first = static_cast<const bf16*>(p.k_pe) + int64_t(k_base) * p.kpe_st0;
    for (int t = 0; t < num_tiles; ++t) {
      const int s = t & 1, n0 = t * kBN, valid = kv_end - n0;
      const uint32_t parity = ((t >> 1) + 1) & 1;  // the phase of tile t - 2
      const uint32_t sK = sStage + s * kStageBytes, sV = sK + kKBytes;
      const bf16* kv_rows = kv_first + int64_t(n0) * p.kv_st0;
      if (t >= 2) mbar::wait(empty_k + 8 * s, parity);
      load_part<16>(sK, kv_rows, p.kv_st0, kv_first, valid, tid);
      load_part<8>(sK + 2 * kBlockBytes, pe_first + int64_t(n0) * p.kpe_st0, p.kpe_st0, pe_first, valid, tid);
      mbar::arrive_on_copies(full_k + 8 * s);
      if (t >= 2) mbar::wait(empty_v + 8 * s, parity);
      load_part<16>(sV, kv_rows + kMlaNope, p.kv_st0, kv_first + kMlaNope, valid, tid);
      mbar::arrive_on_copies(full_v + 8 * s);
    }
    mma::cp_async_wait_all();
    return;
  }

  wgmma::regs_inc<kMmaRegs>();
  const int wg = threadIdx.x / 128 - 1;  // MMA warpgroup: query rows 64 wg .. 64 wg + 63 of the tile
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int row0 = wg * 64;
  const float sl2 = p.scale * 1.4426950408889634f;  // scores in log2 units
  float o[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) o[i] = 0.0f;
  float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
  uint32_t pa[kBN / 16][4];  // P of the previous tile as A fragments, one per 16 keys

  auto issue_pv = [&](int stage) {
    const uint32_t sV = sStage + stage * kStageBytes + kKBytes;
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks)
      wgmma::mma_m64n128k16_rs<1>(o, pa[ks], wgmma::desc_sw128(sV + ks * 16 * 128, kBlockBytes, 1024), true);
    wgmma::commit();
  };

  // Turns alternate: warpgroup 0 goes first; each passes the turn after issuing its MMAs.
  const int my_turn = 1 + wg, other_turn = 2 - wg;
  if (kPingPong && wg == 1) wgmma::bar_arrive(1, 256);

  // One key tile; kWithPv: the previous tile's P·V is issued behind S (every tile but the first,
  // peeled so that no branch decides which MMAs are in flight: ptxas then serializes them all).
  auto tile = [&](int t, auto with_pv) {
    constexpr bool kWithPv = decltype(with_pv)::value;
    const int s = t & 1;
    mbar::wait(full_k + 8 * s, (t >> 1) & 1);
    // V of the previous tile, waited for here: a wait with MMAs in flight makes ptxas serialize them.
    if constexpr (kWithPv) mbar::wait(full_v + 8 * (s ^ 1), ((t - 1) >> 1) & 1);
    wgmma::fence_async_smem();  // the copies landed through the generic proxy; wgmma reads through the async one
    if (kPingPong) wgmma::bar_sync(my_turn, 256);
    wgmma::fence();
    float sc[64];
    const uint32_t sK = sStage + s * kStageBytes;
#pragma unroll
    for (int kk = 0; kk < 12; ++kk) {
      const uint32_t off = (kk >> 2) * kBlockBytes + (kk & 3) * 32;
      wgmma::mma_m64n128k16_ss<0>(sc, wgmma::desc_sw128(sQ + row0 * 128 + off, 16, 1024),
                                  wgmma::desc_sw128(sK + off, 16, 1024), kk > 0);
    }
    wgmma::commit();
    if constexpr (kWithPv) issue_pv(s ^ 1);
    if (kPingPong) wgmma::bar_arrive(other_turn, 256);
    wgmma::wait<kWithPv ? 1 : 0>();
    wgmma::fence_operand(sc);
    mbar::arrive(empty_k + 8 * s);

    // Causal mask: key > prefix + row is hidden; only tiles reaching past this warpgroup's first query.
    const int n0 = t * kBN;
    if (n0 + kBN - 1 > prefix + m0 + row0) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          int row = m0 + row0 + warp * 16 + (lane >> 2) + (e >= 2 ? 8 : 0);
          int key = n0 + 8 * j + 2 * (lane & 3) + (e & 1);
          if (key > prefix + row) sc[4 * j + e] = -INFINITY;
        }
    }

    // Online softmax over this thread's rows g and g + 8 (a row's 4 owners are one quad of lanes).
    // The running max moves only when a score passes it by more than kLazy, so p <= 2^kLazy and
    // most tiles skip the rescale of O (the branch is warp-uniform).
    constexpr float kLazy = 8.0f;
    float cand[2];
    bool need = false;
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 16; ++j) mx = fmaxf(mx, fmaxf(sc[4 * j + 2 * hh], sc[4 * j + 2 * hh + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
      cand[hh] = mx * sl2;
      need |= cand[hh] > m_run[hh] + kLazy;
    }
    const bool rescale = __any_sync(0xffffffff, need);
    float corr[2] = {1.0f, 1.0f};
    if (rescale) {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        float m_new = fmaxf(m_run[hh], cand[hh]);
        corr[hh] = m_new == -INFINITY ? 1.0f : fast_exp2(m_run[hh] - m_new);
        m_run[hh] = m_new;
        l_run[hh] *= corr[hh];
      }
    }
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float base = m_run[hh] == -INFINITY ? 0.0f : m_run[hh];
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float pv = fast_exp2(fmaf(sc[4 * j + 2 * hh + e], sl2, -base));
          sc[4 * j + 2 * hh + e] = pv;
          sum += pv;
        }
      l_run[hh] += sum;
    }

    // The previous P·V is done: its stage goes back to the loader, O and P may be written.
    wgmma::wait<0>();
    wgmma::fence_operand(o);
    if constexpr (kWithPv) mbar::arrive(empty_v + 8 * (s ^ 1));
    if (rescale) {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        o[4 * j] *= corr[0];
        o[4 * j + 1] *= corr[0];
        o[4 * j + 2] *= corr[1];
        o[4 * j + 3] *= corr[1];
      }
    }
    // S's accumulator layout is the A fragment layout: keys 16 ks .. 16 ks + 15 of rows g, g + 8.
#pragma unroll
    for (int ks = 0; ks < kBN / 16; ++ks) {
      pa[ks][0] = pack_bf16(sc[8 * ks], sc[8 * ks + 1]);
      pa[ks][1] = pack_bf16(sc[8 * ks + 2], sc[8 * ks + 3]);
      pa[ks][2] = pack_bf16(sc[8 * ks + 4], sc[8 * ks + 5]);
      pa[ks][3] = pack_bf16(sc[8 * ks + 6], sc[8 * ks + 7]);
    }
  };
  mbar::wait(bar_q, 0);
  tile(0, std::false_type{});
  for (int t = 1; t < num_tiles; ++t) tile(t, std::true_type{});
  const int last = num_tiles - 1;
  mbar::wait(full_v + 8 * (last & 1), (last >> 1) & 1);
  // Warpgroup 1 passed one turn more than warpgroup 0 took: take it, so no arrival is left over.
  if (kPingPong && wg == 0) wgmma::bar_sync(my_turn, 256);
  wgmma::fence();
  issue_pv(last & 1);
  wgmma::wait<0>();
  wgmma::fence_operand(o);

  // O / l, rows of this tile only.
#pragma unroll
  for (int hh = 0; hh < 2; ++hh) {
    float l = l_run[hh];
    l += __shfl_xor_sync(0xffffffff, l, 1);
    l += __shfl_xor_sync(0xffffffff, l, 2);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    const int r = row0 + warp * 16 + (lane >> 2) + hh * 8;
    if (r < rows) {
      bf16* out = static_cast<bf16*>(p.out) + int64_t(q0 + m0 + r) * p.o_st0 + int64_t(head) * p.o_st1 +
                  (lane & 3) * 2;
#pragma unroll
      for (int j = 0; j < 16; ++j)
        *reinterpret_cast<uint32_t*>(out + 8 * j) = pack_bf16(o[4 * j + 2 * hh] * inv, o[4 * j + 2 * hh + 1] * inv);
    }
  }
}

template <bool kPingPong>
void launch(const MlaPrefillParams& p, cudaStream_t stream) {
  auto kernel = mla_prefill_wgmma_kernel<kPingPong>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  dim3 grid((p.max_queries + kBM - 1) / kBM, p.num_heads, p.num_seqs);
  launch_pdl(kernel, grid, kThreads, kSmem, stream, p);
}

}  // namespace

void launch_mla_prefill_wgmma(const MlaPrefillParams& p, bool ping_pong, cudaStream_t stream) {
  if (ping_pong) {
    launch<true>(p, stream);
  } else {
    launch<false>(p, stream);
  }
}

}  // namespace mlaserve::cuda
