// Kernels of the routed experts (see moe_experts.h for the two paths).
//
// Decode kernels: grid (blocks, active-expert slots), a block walking row tiles (one, past a
// token). Each block finds the slot's expert from the ids (a bitmask of touched experts in smem,
// no host round trip) and that expert's pairs in pair order, then its warps stream whole weight
// rows with 16-byte loads and dot them with up to kTok token rows at once, so every touched weight
// byte is read from memory once per 8 tokens.
// kTok is a template parameter: an expert has at most one pair per token, so a batch of T tokens
// runs the variant of min(8, T rounded up to a power of two), which keeps fewer accumulators.
#include <cuda_bf16.h>

#include <algorithm>
#include <cuda/atomic>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/bf16x8.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_experts.h"
#include "kernels/cuda/moe_route_warp.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/warp_reduce.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr unsigned kFull = 0xffffffffu;
constexpr int kMaxExperts = kMoeMaxExperts;  // the touched-expert bitmask has 16 words
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 2, kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kMaxTok = 8;  // token rows dotted with each weight row per pass, at most

struct PairList {
  int expert, n;
};

// What expert_pairs builds in a block's shared memory: the touched-expert mask, the slot's expert
// and pair count, and its pairs.
struct SlotPairs {
  unsigned mask[kMaxExperts / 32];
  int info[2];
  int32_t list[kMoeDecodeMaxPairs];
};

// The expert of active slot blockIdx.y (the slot-th touched expert in index order, or -1) and its
// pairs p (in increasing order) written to sp.list. Called by the whole block.
__device__ PairList expert_pairs(const MoeDecodeParams& prm, SlotPairs& sp) {
  const int32_t* ids = prm.ids;
  const int P = prm.num_tokens * prm.top_k, E = prm.num_experts, slot = blockIdx.y;
  if (threadIdx.x < kMaxExperts / 32) sp.mask[threadIdx.x] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += blockDim.x) {
    int e = ids[p];
    if (e >= 0 && e < E) atomicOr(&sp.mask[e >> 5], 1u << (e & 31));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int e = -1, left = slot;
    for (int w = 0; w < kMaxExperts / 32 && e < 0; ++w) {
      unsigned m = sp.mask[w];
      int c = __popc(m);
      if (left < c) {
        for (int q = 0; q < left; ++q) m &= m - 1;
        e = w * 32 + __ffs(m) - 1;
      } else {
        left -= c;
      }
    }
    sp.info[0] = e;
  }
  __syncthreads();
  int e = sp.info[0];
  if (e < 0) return {-1, 0};
  if (threadIdx.x < 32) {
    int lane = threadIdx.x, n = 0;
    for (int base = 0; base < P; base += 32) {
      int p = base + lane;
      bool hit = p < P && ids[p] == e;
      unsigned m = __ballot_sync(kFull, hit);
      if (hit) sp.list[n + __popc(m & ((1u << lane) - 1))] = p;
      n += __popc(m);
    }
    if (lane == 0) sp.info[1] = n;
  }
  __syncthreads();
  return {e, sp.info[1]};
}

// act[q, i] = silu(gate[i] . x[q / k]) * (up[i] . x[q / k]) over the block's row tiles i, for the n
// pairs q = pair_at(0 .. n) of one expert (gate and up: its [I, H] rows).
template <int kTok, class PairAt>
__device__ __forceinline__ void gate_up_rows(const MoeDecodeParams& p, const bf16* gw, const bf16* uw, int n,
                                             PairAt pair_at) {
  const int H = p.hidden, I = p.inter, nc = H / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  bf16* act = static_cast<bf16*>(p.act);
  const int tile_step = kTok == 1 ? int(gridDim.x) : I;  // one tile a block past a token (decode_grid)
#pragma unroll 1
  for (int tile = blockIdx.x; tile * kRowsPerBlock < I; tile += tile_step)
  for (int c0 = 0; c0 < n; c0 += kTok) {
    const int nt = min(kTok, n - c0);
    const uint4* xr[kTok];
#pragma unroll
    for (int tk = 0; tk < kTok; ++tk)
      xr[tk] = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.x) +
                                              int64_t(pair_at(c0 + min(tk, nt - 1)) / p.top_k) * p.x_ld);
    // The warp's rows side by side, so that all their loads are in flight together (a row is only
    // a few loads a lane).
    const int i0 = tile * kRowsPerBlock + warp * kRowsPerWarp;
    const uint4 *g[kRowsPerWarp], *u[kRowsPerWarp];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      int i = min(i0 + rr, I - 1);  // rows past I repeat the last one and are not stored
      g[rr] = reinterpret_cast<const uint4*>(gw + int64_t(i) * H);
      u[rr] = reinterpret_cast<const uint4*>(uw + int64_t(i) * H);
    }
    float ag[kRowsPerWarp][kTok], au[kRowsPerWarp][kTok];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int tk = 0; tk < kTok; ++tk) ag[rr][tk] = au[rr][tk] = 0.0f;
    if (i0 >= I) continue;
#pragma unroll 2
    for (int c = lane; c < nc; c += 32) {
      uint4 wg[kRowsPerWarp], wu[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        wg[rr] = load_weight_once(g[rr] + c);
        wu[rr] = load_weight_once(u[rr] + c);
      }
#pragma unroll
      for (int tk = 0; tk < kTok; ++tk)
        if (tk < nt) {
          uint4 xv = __ldg(xr[tk] + c);
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            ag[rr][tk] = dot8(wg[rr], xv, ag[rr][tk]);
            au[rr][tk] = dot8(wu[rr], xv, au[rr][tk]);
          }
        }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int tk = 0; tk < kTok; ++tk)
        if (tk < nt) {
          float a = warp_sum(ag[rr][tk]), b = warp_sum(au[rr][tk]);
          if (lane == tk && i0 + rr < I)
            act[int64_t(pair_at(c0 + tk)) * I + i0 + rr] = __float2bfloat16(a / (1.0f + __expf(-a)) * b);
        }
  }
}

// act[p, i] = silu(gate[e][i] . x[p / k]) * (up[e][i] . x[p / k]) for the pairs p of one expert.
template <int kTok>
__global__ void __launch_bounds__(kThreads, kTok > 2 ? 2 : 4) gate_up_kernel(MoeDecodeParams p) {
  pdl_wait_and_trigger();
  __shared__ SlotPairs sp;
  PairList pl = expert_pairs(p, sp);
  if (pl.expert < 0) return;
  gate_up_rows<kTok>(p, static_cast<const bf16*>(p.gate[pl.expert]), static_cast<const bf16*>(p.up[pl.expert]), pl.n,
                     [&](int i) { return sp.list[i]; });
}

// gate_up_kernel<1> that routes its token itself (moe_route_warp.cuh, N experts a lane, in its
// first warp), so that no route launch stands between the router and the experts. At one token
// slot j (blockIdx.y) is pair j; the fused shared slots need no routing. Block (0, 0) writes the ids
// and weights for the launches after it. The expert pointer tables are read before the wait.
template <int N>
__global__ void __launch_bounds__(kThreads, 4) gate_up_routed_kernel(MoeDecodeParams p, MoeRouteParams r) {
  __shared__ const void* s_gate[kMaxExperts];
  __shared__ const void* s_up[kMaxExperts];
  __shared__ route_warp::Scratch scratch;
  __shared__ int s_expert;
  for (int e = threadIdx.x; e < p.num_experts; e += kThreads) s_gate[e] = p.gate[e], s_up[e] = p.up[e];
  const int lane = threadIdx.x % 32, slot = blockIdx.y;
  float bias[N];
  if (threadIdx.x < 32) route_warp::load_bias(r, lane, bias);
  pdl_wait_and_trigger();
  if (threadIdx.x < 32) {
    int e = r.num_experts + slot - r.top_k;
    if (slot < r.top_k) {
      int id;
      float score;
      route_warp::route_token(r, 0, lane, bias, scratch, id, score);
      if (blockIdx.x == 0 && slot == 0) route_warp::write_slots(r, 0, lane, id, score);
      e = __shfl_sync(kFull, id, slot);
    }
    if (lane == 0) s_expert = e;
  }
  __syncthreads();
  const int e = s_expert;
  if (e < 0 || e >= p.num_experts) return;
  gate_up_rows<1>(p, static_cast<const bf16*>(s_gate[e]), static_cast<const bf16*>(s_up[e]), 1,
                  [&](int) { return slot; });
}

// acc[rr][tk] += the dot of weight row w[rr] with activation row a[tk] (tokens below nt), over the
// 16-byte chunks from c0 on, every 32nd (a lane's share of the rows' nc chunks).
template <int kRows, int kTok>
__device__ __forceinline__ void dot_rows(const uint4* const (&w)[kRows], const uint4* const (&a)[kTok], int nt, int c0,
                                         int nc, float (&acc)[kRows][kTok]) {
#pragma unroll 4
  for (int c = c0; c < nc; c += 32) {
    uint4 wv[kRows];
#pragma unroll
    for (int rr = 0; rr < kRows; ++rr) wv[rr] = load_weight_once(w[rr] + c);
#pragma unroll
    for (int tk = 0; tk < kTok; ++tk)
      if (tk < nt) {
        const uint4 av = __ldg(a[tk] + c);
#pragma unroll
        for (int rr = 0; rr < kRows; ++rr) acc[rr][tk] = dot8(wv[rr], av, acc[rr][tk]);
      }
  }
}

// y[p, r] = down[e][r] . act[p] (fp32) for the pairs p of one expert.
template <int kTok>
__global__ void __launch_bounds__(kThreads, kTok == 1 ? 6 : 0) down_kernel(MoeDecodeParams p) {
  pdl_wait_and_trigger();
  __shared__ SlotPairs sp;
  PairList pl = expert_pairs(p, sp);
  if (pl.expert < 0) return;
  const int H = p.hidden, I = p.inter, nc = I / 8;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const bf16* dw = static_cast<const bf16*>(p.down[pl.expert]);
  const bf16* act = static_cast<const bf16*>(p.act);
  const int tile_step = kTok == 1 ? int(gridDim.x) : H;  // one tile a block past a token (decode_grid)
#pragma unroll 1
  for (int tile = blockIdx.x; tile * kRowsPerBlock < H; tile += tile_step)
  for (int c0 = 0; c0 < pl.n; c0 += kTok) {
    const int nt = min(kTok, pl.n - c0);
    const uint4* ar[kTok];
#pragma unroll
    for (int tk = 0; tk < kTok; ++tk)
      ar[tk] = reinterpret_cast<const uint4*>(act + int64_t(sp.list[c0 + min(tk, nt - 1)]) * I);
    const int r0 = tile * kRowsPerBlock + warp * kRowsPerWarp;
    if (r0 >= H) continue;
    const uint4* d[kRowsPerWarp];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
      d[rr] = reinterpret_cast<const uint4*>(dw + int64_t(min(r0 + rr, H - 1)) * I);
    float acc[kRowsPerWarp][kTok] = {};
    dot_rows(d, ar, nt, lane, nc, acc);
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int tk = 0; tk < kTok; ++tk)
        if (tk < nt) {
          float a = warp_sum(acc[rr][tk]);
          if (lane == tk && r0 + rr < H) p.y[int64_t(sp.list[c0 + tk]) * H + r0 + rr] = a;
        }
  }
}

// At one token, down and the combine in one launch: out[r] = bf16(sum_j weights[j] * (down[ids[j]][r] .
// act[j])), fp32 in slot order. A block owns kOneTokenRows rows and has a warp a slot; warp j streams
// those rows of slot j's expert as down_kernel<1> does, and the block adds the slots in order, so
// the bits are those of down_kernel<1> then combine_vec_kernel. It saves the combine's launch, the y
// round trip and the blocks' search for their expert (at one token pair j is slot j).
// N > 0: the launch before routed the token (gate_up_routed_kernel<N>); the first warp routes it
// again from the logits rather than read the ids and weights written there.
constexpr int kMaxSlotWarps = 32;
constexpr int kOneTokenRows = 4;  // a warp's rows: 16 loads in flight a lane, and one wave of blocks
template <int N>
__global__ void __launch_bounds__(kMaxSlotWarps * 32)
    down_combine_one_token_kernel(MoeDecodeParams p, MoeRouteParams r, const float* weights, bf16* out) {
  __shared__ float s_y[kMaxSlotWarps][kOneTokenRows];
  __shared__ float s_w[kMaxSlotWarps];  // slot j's weight, 0 where its id is outside [0, E)
  const int H = p.hidden, nc = p.inter / 8, k = p.top_k;
  const int j = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = blockIdx.x * kOneTokenRows;
  // The routing (the route kernel's ids and weights, or the router's logits) is two launches back,
  // complete when this one starts: the experts, their weights and a lane's first 16 bytes of its
  // rows are read before the wait, the activations after it. The pointer table is read beside the
  // routing, so that a row's address is one shared load after it.
  __shared__ const void* s_down[kMaxExperts];
  __shared__ int s_id[kMaxSlotWarps];
  for (int i = threadIdx.x; i < p.num_experts; i += blockDim.x) s_down[i] = p.down[i];
  if constexpr (N > 0) {
    __shared__ route_warp::Scratch scratch;
    if (j == 0) {
      float bias[N];
      route_warp::load_bias(r, lane, bias);
      int id;
      float score;
      route_warp::route_token(r, 0, lane, bias, scratch, id, score);
      const route_warp::Slot s = route_warp::slot_of(r, lane, id, score);
      if (lane < k) s_id[lane] = s.id, s_w[lane] = s.weight;
    }
  } else {
    if (lane == 0) s_id[j] = p.ids[j], s_w[j] = weights[j];
  }
  __syncthreads();
  const int e = s_id[j];
  const bool valid = e >= 0 && e < p.num_experts;  // an id outside [0, E) adds nothing
  if (lane == 0 && !valid) s_w[j] = 0.0f;
  const uint4* dr[kOneTokenRows];
  uint4 first[kOneTokenRows];
  if (valid) {
    const uint4* d = static_cast<const uint4*>(s_down[e]);
#pragma unroll
    for (int rr = 0; rr < kOneTokenRows; ++rr) {
      dr[rr] = d + int64_t(min(r0 + rr, H - 1)) * nc;
      if (lane < nc) first[rr] = load_weight_once(dr[rr] + lane);
    }
  }
  pdl_wait_and_trigger();
  float acc[kOneTokenRows][1] = {};
  if (valid) {
    const uint4* a[1] = {static_cast<const uint4*>(p.act) + int64_t(j) * nc};
    if (lane < nc) {
      const uint4 av = __ldg(a[0] + lane);
#pragma unroll
      for (int rr = 0; rr < kOneTokenRows; ++rr) acc[rr][0] = dot8(first[rr], av, acc[rr][0]);
    }
    dot_rows(dr, a, 1, lane + 32, nc, acc);
  }
#pragma unroll
  for (int rr = 0; rr < kOneTokenRows; ++rr) {
    const float y = warp_sum(acc[rr][0]);
    if (lane == 0) s_y[j][rr] = y;
  }
  __syncthreads();
  const int row = r0 + threadIdx.x;
  if (threadIdx.x < kOneTokenRows && row < H) {
    // An invalid slot adds 0 * 0 = +0 to a sum that is never -0: the bits of leaving it out.
    float total = 0.0f;
    for (int jj = 0; jj < k; ++jj) total += s_w[jj] * s_y[jj][threadIdx.x];
    out[row] = __float2bfloat16(total);
  }
}

// Stable counting sort of the pairs by expert. Block b takes pairs [b kAlignChunk, (b + 1)
// kAlignChunk); with few enough blocks to be resident together (align_grid_kernel) it is one launch,
// else three (align_count / scan / scatter_kernel).
constexpr int kAlignThreads = 512, kAlignWarps = kAlignThreads / 32;
constexpr int kAlignChunk = 1024, kAlignSteps = kAlignChunk / kAlignThreads;
// The grid kernel's barrier: two counters at the front of the scratch.
constexpr int kAlignBarrierInts = kMoeAlignZeroedInts;
// Blocks of the one-launch sort at most (and no more than the SMs, so that all are resident).
constexpr int kAlignGridMaxBlocks = 64;
static_assert(kAlignThreads >= kMaxExperts, "one expert a thread in the scan");
// Thread e of a kAlignThreads block holds expert e's pair count (0 past E): returns its first
// sorted position (the exclusive scan over experts: shuffles within a warp, then the warp totals)
// and writes offsets[0..E] unless it is null.
__device__ int expert_offsets(int total, int E, int32_t* offsets) {
  __shared__ int32_t s_warp_total[kAlignWarps];
  const int e = threadIdx.x, lane = e % 32, warp = e / 32;
  int incl = total;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int v = __shfl_up_sync(kFull, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) s_warp_total[warp] = incl;
  __syncthreads();
  int start = incl - total;
  for (int w = 0; w < warp; ++w) start += s_warp_total[w];
  if (offsets) {
    if (E == 0 && e == 0) offsets[0] = 0;
    if (e < E) offsets[e] = start;
    if (e == E - 1) offsets[E] = start + total;
  }
  return start;
}

// The one-launch sort:
//  1. each block ranks its pairs among its own pairs of the same expert: __match_any_sync groups a
//     warp step's equal experts, then an exclusive scan per expert over the block's warp steps, in
//     pair order; it publishes its per-expert counts;
//  2. a grid barrier (every block is resident: the launch keeps the grid within the SMs);
//  3. each block sums the counts of the blocks before it and of all blocks (the offsets: one scan
//     over experts), and places its pairs.
// At 4096 pairs (H200, ncu): 6.5 us, against 12.8 for count + scan + scatter and 13.6 for one
// block walking all pairs.
__global__ void __launch_bounds__(kAlignThreads) align_grid_kernel(const int32_t* ids, int P, int E,
                                                                   int32_t* offsets, int32_t* sorted, int32_t* pos,
                                                                   int32_t* scratch) {
  pdl_wait_and_trigger();
  constexpr int kRuns = kAlignSteps * kAlignWarps;  // a warp's step: 32 consecutive pairs
  __shared__ __align__(16) uint16_t s_wc[kRuns][kMaxExperts];  // pairs of each expert a run, then the run's first rank
  __shared__ int32_t s_base[kMaxExperts];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, b = blockIdx.x, B = gridDim.x;
  // Runs past the block's pairs stay empty: they are neither cleared nor scanned.
  const int runs = min(kRuns, (min(P - b * kAlignChunk, kAlignChunk) + 31) / 32);
  for (int i = tid; i < runs * kMaxExperts / 8; i += kAlignThreads) reinterpret_cast<uint4*>(&s_wc[0][0])[i] = {};
  int ex[kAlignSteps], lower[kAlignSteps];
#pragma unroll
  for (int st = 0; st < kAlignSteps; ++st) {
    const int p = b * kAlignChunk + st * kAlignThreads + tid;
    ex[st] = p < P ? ids[p] : -1;
  }
  __syncthreads();
#pragma unroll
  for (int st = 0; st < kAlignSteps; ++st) {
    const bool valid = ex[st] >= 0 && ex[st] < E;
    if (!valid) ex[st] = -1;
    const unsigned peers = __match_any_sync(kFull, ex[st]);
    lower[st] = __popc(peers & ((1u << lane) - 1));
    if (valid && lower[st] == 0) s_wc[st * kAlignWarps + warp][ex[st]] = uint16_t(__popc(peers));
  }
  __syncthreads();
  const int e = tid;
  int mine = 0;  // the block's pairs of expert e
  if (e < E) {
    for (int r = 0; r < runs; ++r) {
      const int c = s_wc[r][e];
      s_wc[r][e] = uint16_t(mine);
      mine += c;
    }
  }
  int before = 0, total = mine;  // expert e's pairs in the blocks before this one, and in all
  if (B > 1) {
    int32_t* counts = scratch + kAlignBarrierInts;  // [B][E]
    if (e < E) counts[b * E + e] = mine;
    __syncthreads();
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> arrive(reinterpret_cast<unsigned*>(scratch)[0]);
    ::cuda::atomic_ref<unsigned, ::cuda::thread_scope_device> depart(reinterpret_cast<unsigned*>(scratch)[1]);
    if (tid == 0) {
      arrive.fetch_add(1, ::cuda::memory_order_release);  // after the block's counts (the barrier above)
      while (arrive.load(::cuda::memory_order_acquire) < unsigned(B)) __nanosleep(64);
    }
    __syncthreads();
    if (e < E) {
      total = 0;
      for (int c = 0; c < B; ++c) {
        const int n = __ldcg(counts + c * E + e);
        before += c < b ? n : 0;
        total += n;
      }
    }
    // Every block has passed the barrier once all have departed: the last one re-arms it.
    if (tid == 0 && depart.fetch_add(1, ::cuda::memory_order_relaxed) == unsigned(B) - 1) {
      arrive.store(0, ::cuda::memory_order_relaxed);
      depart.store(0, ::cuda::memory_order_relaxed);
    }
  }
  const int start = expert_offsets(total, E, b == 0 ? offsets : nullptr);
  if (e < E) s_base[e] = start + before;
  __syncthreads();
#pragma unroll
  for (int st = 0; st < kAlignSteps; ++st) {
    const int p = b * kAlignChunk + st * kAlignThreads + tid;
    if (p >= P) continue;
    int q = -1;
    if (ex[st] >= 0) {
      q = s_base[ex[st]] + s_wc[st * kAlignWarps + warp][ex[st]] + lower[st];
      sorted[q] = p;
    }
    pos[p] = q;
  }
}

// The same sort in three launches, for more blocks than the grid kernel takes: align_count_kernel
// counts each block's experts, align_scan_kernel turns the counts [B][E] into each block's first
// position per expert (and the offsets), and align_scatter_kernel walks each block's pairs in steps
// of kAlignThreads, placing a pair after its expert's pairs of earlier blocks, steps, warps and lanes.

__global__ void __launch_bounds__(kAlignThreads) align_count_kernel(const int32_t* ids, int P, int E,
                                                                    int32_t* counts) {
  pdl_wait_and_trigger();
  __shared__ int32_t s_hist[kMaxExperts];
  const int tid = threadIdx.x;
  for (int e = tid; e < E; e += kAlignThreads) s_hist[e] = 0;
  __syncthreads();
  const int begin = int(blockIdx.x) * kAlignChunk, end = min(P, begin + kAlignChunk);
  for (int p = begin + tid; p < end; p += kAlignThreads) {
    const int e = ids[p];
    if (e >= 0 && e < E) atomicAdd(&s_hist[e], 1);
  }
  __syncthreads();
  for (int e = tid; e < E; e += kAlignThreads) counts[int64_t(blockIdx.x) * E + e] = s_hist[e];
}

__global__ void __launch_bounds__(kAlignThreads) align_scan_kernel(int32_t* counts, int B, int E, int32_t* offsets) {
  pdl_wait_and_trigger();
  const int e = threadIdx.x;
  int total = 0;  // expert e's pairs in blocks before b, then in all
  if (e < E)
    for (int b = 0; b < B; ++b) {
      const int c = counts[int64_t(b) * E + e];
      counts[int64_t(b) * E + e] = total;
      total += c;
    }
  const int start = expert_offsets(total, E, offsets);
  if (e < E)
    for (int b = 0; b < B; ++b) counts[int64_t(b) * E + e] += start;
}

__global__ void __launch_bounds__(kAlignThreads) align_scatter_kernel(const int32_t* ids, int P, int E,
                                                                      const int32_t* first, int32_t* sorted,
                                                                      int32_t* pos) {
  pdl_wait_and_trigger();
  __shared__ int32_t s_wc[kAlignWarps][kMaxExperts];  // a step's pairs of each expert, per warp
  __shared__ int32_t s_next[kMaxExperts];             // the next position of each expert
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int i = tid; i < kAlignWarps * kMaxExperts; i += kAlignThreads) (&s_wc[0][0])[i] = 0;
  if (tid < E) s_next[tid] = first[int64_t(blockIdx.x) * E + tid];
  __syncthreads();
  const int begin = int(blockIdx.x) * kAlignChunk, end = min(P, begin + kAlignChunk);
  for (int p0 = begin; p0 < end; p0 += kAlignThreads) {
    const int p = p0 + tid, ex = p < end ? ids[p] : -1;
    const bool valid = ex >= 0 && ex < E;
    const unsigned peers = __match_any_sync(kFull, valid ? ex : -1);
    const int lower = __popc(peers & ((1u << lane) - 1));
    if (valid && lower == 0) s_wc[warp][ex] = __popc(peers);
    __syncthreads();
    if (p < end) {
      int q = -1;
      if (valid) {
        q = s_next[ex] + lower;
        for (int w = 0; w < warp; ++w) q += s_wc[w][ex];
        sorted[q] = p;
      }
      pos[p] = q;
    }
    __syncthreads();
    if (tid < E) {
      int step = 0;
      for (int w = 0; w < kAlignWarps; ++w) {
        step += s_wc[w][tid];
        s_wc[w][tid] = 0;
      }
      s_next[tid] += step;
    }
    __syncthreads();
  }
}

template <bool kVec>
__global__ void gather_kernel(const bf16* x, int64_t x_ld, const int32_t* sorted, const int32_t* count, int k, int H,
                              bf16* xs) {
  pdl_wait_and_trigger();
  if (count && int(blockIdx.x) >= *count) return;  // positions past the routed pairs hold nothing
  const bf16* src = x + int64_t(sorted[blockIdx.x] / k) * x_ld;
  bf16* dst = xs + int64_t(blockIdx.x) * H;
  if (kVec) {
    for (int c = threadIdx.x; c < H / 8; c += blockDim.x)
      reinterpret_cast<uint4*>(dst)[c] = reinterpret_cast<const uint4*>(src)[c];
  } else {
    for (int c = threadIdx.x; c < H; c += blockDim.x) dst[c] = src[c];
  }
}

__device__ __forceinline__ float load_y(const float* y, int64_t i) { return y[i]; }
__device__ __forceinline__ float load_y(const bf16* y, int64_t i) { return __bfloat162float(y[i]); }

template <class Y>
__global__ void combine_kernel(const Y* y, const int32_t* pair_pos, const float* weights, int64_t w_ld, int k, int H,
                               bf16* out, int64_t out_ld) {
  pdl_wait_and_trigger();
  // One column a thread, blocks across H too: a decode step's few tokens still fill the GPU.
  const int t = blockIdx.x, c = blockIdx.y * blockDim.x + threadIdx.x;
  if (c >= H) return;
  float acc = 0.0f;
  for (int j = 0; j < k; ++j) {
    int p = t * k + j;
    int q = pair_pos ? pair_pos[p] : p;
    if (q >= 0) acc += weights[int64_t(t) * w_ld + j] * load_y(y, int64_t(q) * H + c);
  }
  out[int64_t(t) * out_ld + c] = __float2bfloat16(acc);
}

// Eight columns a thread, read and written 16 bytes at a time (H % 8 == 0, rows 16-byte aligned).
__device__ __forceinline__ void load8_y(const float* y, int64_t i, float (&v)[8]) {
  float4 a = *reinterpret_cast<const float4*>(y + i), b = *reinterpret_cast<const float4*>(y + i + 4);
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load8_y(const bf16* y, int64_t i, float (&v)[8]) {
  uint4 u = *reinterpret_cast<const uint4*>(y + i);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&u);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    float2 f = __bfloat1622float2(h[j]);
    v[2 * j] = f.x, v[2 * j + 1] = f.y;
  }
}

template <class Y>
__global__ void combine_vec_kernel(const Y* y, const int32_t* pair_pos, const float* weights, int64_t w_ld, int k,
                                   int H, bf16* out, int64_t out_ld) {
  pdl_wait_and_trigger();
  const int t = blockIdx.x, c = 8 * (blockIdx.y * blockDim.x + threadIdx.x);
  if (c >= H) return;
  float acc[8] = {};
  for (int j = 0; j < k; ++j) {
    int p = t * k + j;
    int q = pair_pos ? pair_pos[p] : p;
    if (q < 0) continue;
    float w = weights[int64_t(t) * w_ld + j], v[8];
    load8_y(y, int64_t(q) * H + c, v);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] += w * v[i];
  }
  __align__(16) __nv_bfloat162 o[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) o[i] = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
  *reinterpret_cast<uint4*>(out + int64_t(t) * out_ld + c) = *reinterpret_cast<const uint4*>(o);
}

using DecodeKernel = void (*)(MoeDecodeParams);

// Blocks of `kernel` at `threads` a block that an SM holds (cached).
int resident_per_sm(const void* kernel, int threads = kThreads) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, int> cache;
  std::lock_guard lock(mu);
  auto [it, added] = cache.try_emplace({kernel, threads}, 0);
  if (added) CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&it->second, kernel, threads, 0));
  return std::max(it->second, 1);
}

// (blocks a slot, active-expert slots). At one token every slot has an expert, and the grid keeps
// to the blocks that are resident at once, each walking an equal number of row tiles: a second
// wave would pay each block's start (finding its expert and pairs) once more, unhidden (H200:
// V2-Lite's 704 gate/up blocks at 4 an SM made 1.33 waves). Past one token some slots are empty,
// and a grid that fits would leave their share of the SMs idle: a block a tile there.
dim3 decode_grid(const MoeDecodeParams& p, int rows, const void* kernel, int num_sms) {
  const int slots = std::min(p.num_experts, p.num_tokens * p.top_k);
  const int tiles = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  if (p.num_tokens > 1) return dim3(unsigned(tiles), unsigned(slots));
  const int fit = std::max(1, resident_per_sm(kernel) * num_sms / std::max(slots, 1));
  const int per_block = (tiles + fit - 1) / fit;
  return dim3(unsigned((tiles + per_block - 1) / per_block), unsigned(slots));
}

void check_decode(const MoeDecodeParams& p) {
  MLA_CHECK(p.num_experts <= kMaxExperts && p.num_tokens * p.top_k <= kMoeDecodeMaxPairs && p.hidden % 8 == 0 &&
                p.inter % 8 == 0 && p.x_ld % 8 == 0,
            "moe decode kernels: E={} pairs={} H={} I={} x_ld={} outside their limits", p.num_experts,
            p.num_tokens * p.top_k, p.hidden, p.inter, p.x_ld);
}

// The variant of a decode kernel for the batch's tokens (1, 2, 4 or kMaxTok a pass).
DecodeKernel variant_for(const MoeDecodeParams& p, DecodeKernel k1, DecodeKernel k2, DecodeKernel k4,
                         DecodeKernel k_max) {
  return p.num_tokens == 1 ? k1 : p.num_tokens == 2 ? k2 : p.num_tokens <= 4 ? k4 : k_max;
}

// The variant of a one-token kernel that routes with N experts a lane (moe_route_warp.cuh).
template <template <int> class Pick>
auto routed_variant(const MoeRouteParams& r) {
  return route_warp::with_experts_per_lane(r.num_experts, [](auto n) { return Pick<decltype(n)::value>::kernel; });
}
template <int N>
struct GateUpRouted {
  static constexpr auto kernel = gate_up_routed_kernel<N>;
};
template <int N>
struct DownCombineRouted {
  static constexpr auto kernel = down_combine_one_token_kernel<N>;
};

void check_routed(const MoeDecodeParams& p, const MoeRouteParams& r) {
  MLA_CHECK(p.num_tokens == 1 && r.num_tokens == 1 && r.ids == p.ids && r.top_k + r.num_fused_shared == p.top_k &&
                r.num_experts + r.num_fused_shared <= p.num_experts && moe_route_warp_fits(r),
            "moe decode kernels routing themselves: one token, the routing's ids, its {} + {} slots and experts "
            "within the {} given, and a routing the warp form takes; got T={}, k={}",
            r.top_k, r.num_fused_shared, p.num_experts, p.num_tokens, p.top_k);
}

}  // namespace

void launch_moe_decode_gate_up(const MoeDecodeParams& p, cudaStream_t s, int num_sms, const MoeRouteParams* route) {
  check_decode(p);
  if (p.num_tokens == 0) return;
  if (route) {
    check_routed(p, *route);
    const auto k = routed_variant<GateUpRouted>(*route);
    launch_pdl(k, decode_grid(p, p.inter, reinterpret_cast<const void*>(k), num_sms), kThreads, 0, s, p, *route);
    return;
  }
  const DecodeKernel k =
      variant_for(p, gate_up_kernel<1>, gate_up_kernel<2>, gate_up_kernel<4>, gate_up_kernel<kMaxTok>);
  launch_pdl(k, decode_grid(p, p.inter, reinterpret_cast<const void*>(k), num_sms), kThreads, 0, s, p);
}

void launch_moe_decode_down(const MoeDecodeParams& p, cudaStream_t s, int num_sms) {
  check_decode(p);
  if (p.num_tokens == 0) return;
  const DecodeKernel k = variant_for(p, down_kernel<1>, down_kernel<2>, down_kernel<4>, down_kernel<kMaxTok>);
  launch_pdl(k, decode_grid(p, p.hidden, reinterpret_cast<const void*>(k), num_sms), kThreads, 0, s, p);
}

bool moe_decode_down_combine_fits(const MoeDecodeParams& p, int num_sms) {
  if (p.num_tokens != 1 || p.top_k < 1 || p.top_k > kMaxSlotWarps) return false;
  // One wave of blocks: V2-Lite's 512 (H = 2048) against 528 resident on an H200 gained, V3's 1792
  // (H = 7168) lost 4% to the two launches (docs/benchmarks.md, twentieth session).
  const int blocks = (p.hidden + kOneTokenRows - 1) / kOneTokenRows;
  const int resident =
      resident_per_sm(reinterpret_cast<const void*>(down_combine_one_token_kernel<0>), 32 * p.top_k);
  return blocks <= resident * num_sms;
}

void launch_moe_decode_down_combine(const MoeDecodeParams& p, const float* weights, void* out, cudaStream_t s,
                                    const MoeRouteParams* route) {
  check_decode(p);
  MLA_CHECK(p.num_tokens == 1 && p.top_k >= 1 && p.top_k <= kMaxSlotWarps,
            "moe decode down+combine: T={} k={} outside its limits", p.num_tokens, p.top_k);
  if (route) check_routed(p, *route);
  const auto k = route ? routed_variant<DownCombineRouted>(*route) : down_combine_one_token_kernel<0>;
  launch_pdl(k, (p.hidden + kOneTokenRows - 1) / kOneTokenRows, 32 * p.top_k, 0, s, p,
             route ? *route : MoeRouteParams{}, weights, static_cast<bf16*>(out));
}

int64_t moe_align_scratch_ints(int32_t num_pairs, int32_t num_experts) {
  return kAlignBarrierInts + int64_t(std::max(1, (num_pairs + kAlignChunk - 1) / kAlignChunk)) * num_experts;
}

void launch_moe_align(const int32_t* ids, int32_t num_pairs, int32_t num_experts, int32_t* offsets,
                      int32_t* sorted_pairs, int32_t* pair_pos, cudaStream_t s, int32_t* scratch, int num_sms) {
  MLA_CHECK(num_experts <= kMaxExperts, "moe align: {} experts, at most {}", num_experts, kMaxExperts);
  MLA_CHECK(scratch != nullptr, "moe align: no scratch");
  const int blocks = std::max(1, (num_pairs + kAlignChunk - 1) / kAlignChunk);
  if (blocks <= std::min(kAlignGridMaxBlocks, num_sms)) {
    launch_pdl(align_grid_kernel, blocks, kAlignThreads, 0, s, ids, num_pairs, num_experts, offsets, sorted_pairs,
               pair_pos, scratch);
    return;
  }
  int32_t* counts = scratch + kAlignBarrierInts;
  launch_pdl(align_count_kernel, blocks, kAlignThreads, 0, s, ids, num_pairs, num_experts, counts);
  launch_pdl(align_scan_kernel, 1, kAlignThreads, 0, s, counts, blocks, num_experts, offsets);
  launch_pdl(align_scatter_kernel, blocks, kAlignThreads, 0, s, ids, num_pairs, num_experts,
             static_cast<const int32_t*>(counts), sorted_pairs, pair_pos);
}

void launch_moe_gather(const void* x, int64_t x_ld, const int32_t* sorted_pairs, int32_t num_pairs, int32_t top_k,
                       int32_t hidden, void* xs, cudaStream_t s, const int32_t* routed) {
  if (num_pairs == 0) return;
  bool vec = hidden % 8 == 0 && x_ld % 8 == 0 && aligned16(x) && aligned16(xs);
  auto xb = static_cast<const bf16*>(x);
  auto ob = static_cast<bf16*>(xs);
  if (vec)
    launch_pdl(gather_kernel<true>, num_pairs, 256, 0, s, xb, x_ld, sorted_pairs, routed, top_k, hidden, ob);
  else
    launch_pdl(gather_kernel<false>, num_pairs, 256, 0, s, xb, x_ld, sorted_pairs, routed, top_k, hidden, ob);
}

void launch_moe_combine(const void* y, bool y_f32, const int32_t* pair_pos, const float* weights, int64_t w_ld,
                        int32_t num_tokens, int32_t top_k, int32_t hidden, void* out, int64_t out_ld, cudaStream_t s) {
  if (num_tokens == 0) return;
  auto ob = static_cast<bf16*>(out);
  if (hidden % 8 == 0 && out_ld % 8 == 0 && aligned16(out) && aligned16(y)) {
    // Small batches (decode) get 32-thread blocks, so their few tokens still spread over many SMs.
    const int vecs = hidden / 8, threads = num_tokens < 128 ? 32 : vecs >= 128 ? 128 : 32 * ((vecs + 31) / 32);
    dim3 grid(unsigned(num_tokens), unsigned((vecs + threads - 1) / threads));
    if (y_f32)
      launch_pdl(combine_vec_kernel<float>, grid, threads, 0, s, static_cast<const float*>(y), pair_pos, weights, w_ld,
                 top_k, hidden, ob, out_ld);
    else
      launch_pdl(combine_vec_kernel<bf16>, grid, threads, 0, s, static_cast<const bf16*>(y), pair_pos, weights, w_ld,
                 top_k, hidden, ob, out_ld);
    return;
  }
  int threads = hidden >= 256 ? 256 : 32 * ((hidden + 31) / 32);
  dim3 grid(unsigned(num_tokens), unsigned((hidden + threads - 1) / threads));
  if (y_f32)
    launch_pdl(combine_kernel<float>, grid, threads, 0, s, static_cast<const float*>(y), pair_pos, weights, w_ld, top_k,
               hidden, ob, out_ld);
  else
    launch_pdl(combine_kernel<bf16>, grid, threads, 0, s, static_cast<const bf16*>(y), pair_pos, weights, w_ld, top_k,
               hidden, ob, out_ld);
}

}  // namespace mlaserve::cuda
