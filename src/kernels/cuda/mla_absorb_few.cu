// The absorbed MLA projections for a decode step's few tokens (mla_absorb.h): the heads' weights
// (2 MB at 16 heads) are streamed once, each block's share loaded into registers before
// pdl_wait(), so the loads overlap the kernel before (cuBLASLt's batched GEMM took 2-3x as long
// at 16 heads, H200).
//   absorb_q:   block (h, 64-column slice of L): 8 threads of 8 columns x 32 groups of rows of
//               w_uk[h] (a thread holds 4 rows), reduced over the groups by shuffles then over the
//               warps in shared memory; blocks of slice 0 also copy q_pe into the latent query.
//   absorb_out: block (h, 16 rows of w_uv[h]): a warp dots 2 rows with the tokens' latents. Its
//               merging form, launched after an attention run without its combine, first merges
//               the split rows' partials into shared memory (merge_rows).
#include <cuda_bf16.h>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/bf16x8.cuh"
#include "kernels/cuda/mla_absorb.h"
#include "kernels/cuda/mla_decode_device.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kQCols = 64, kQColThreads = kQCols / 8, kQRowGroups = kThreads / kQColThreads;  // 8 x 32
constexpr int kQRowsPerThread = kMlaAbsorbFewMaxNope / kQRowGroups;                          // 4
constexpr int kOutRowsPerWarp = 2, kOutRows = kWarps * kOutRowsPerWarp;                      // 16
constexpr int kOutLoads = kMlaAbsorbFewMaxL / (32 * 8);                                      // 2 a row

template <int kTok>
__global__ void __launch_bounds__(kThreads) absorb_q_few_kernel(MlaAbsorbQParams p) {
  __shared__ float red[kWarps][kTok][kQCols];
  const int h = blockIdx.x, c8 = threadIdx.x % kQColThreads, group = threadIdx.x / kQColThreads;
  const int col = blockIdx.y * kQCols + c8 * 8;  // L % 64 == 0: every column is in
  const bf16* w = static_cast<const bf16*>(p.w_uk) + (int64_t(h) * p.nope + group) * p.L + col;
  uint4 wv[kQRowsPerThread];
#pragma unroll
  for (int i = 0; i < kQRowsPerThread; ++i) {
    const int n = group + i * kQRowGroups;
    wv[i] = n < p.nope ? *reinterpret_cast<const uint4*>(w + int64_t(i) * kQRowGroups * p.L) : make_uint4(0, 0, 0, 0);
  }
  pdl_wait_and_trigger();
  const int T = int(p.T);
  const bf16* qn = static_cast<const bf16*>(p.q_nope) + h * p.qn_st1;
  float acc[kTok][8];
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[t][j] = 0.0f;
    if (t >= T) continue;
#pragma unroll
    for (int i = 0; i < kQRowsPerThread; ++i) {
      const int n = group + i * kQRowGroups;
      const float q = n < p.nope ? __bfloat162float(qn[t * p.qn_st0 + n]) : 0.0f;
      float wf[8];
      unpack8(wv[i], wf);
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[t][j] = fmaf(q, wf[j], acc[t][j]);
    }
  }
  // The 4 row groups of a warp (lanes 8 apart), then the warps.
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < kTok; ++t)
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      float v = acc[t][j];
      v += __shfl_xor_sync(~0u, v, 8);
      v += __shfl_xor_sync(~0u, v, 16);
      if (lane < kQColThreads) red[warp][t][c8 * 8 + j] = v;
    }
  __syncthreads();
  bf16* ql = static_cast<bf16*>(p.q_latent) + h * p.ql_st1;
  for (int i = threadIdx.x; i < T * kQCols; i += kThreads) {
    const int t = i / kQCols, c = i % kQCols;
    float s = 0.0f;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) s += red[v][t][c];
    ql[t * p.ql_st0 + blockIdx.y * kQCols + c] = __float2bfloat16(s);
  }
  if (blockIdx.y == 0) {
    const bf16* pe = static_cast<const bf16*>(p.q_pe) + h * p.pe_st1;
    for (int i = threadIdx.x; i < T * p.rope; i += kThreads) {
      const int t = int(i / p.rope), r = int(i % p.rope);
      ql[t * p.ql_st0 + p.L + r] = pe[t * p.pe_st0 + r];
    }
  }
}

// Where the merging form finds the attention's output: its parameters and its plan.
struct AttentionOutput {
  MlaDecodeParams d;
  MlaDecodeSchedule s;
};

// Row t of merged (kMlaLatentDim wide) gets the attention output of token t, head h: a split row's
// partials merged as the combine kernel merges them (weights 2^(lse_k - max lse)), and stored to
// p.latent too by the blocks of column slice 0; any other row is read from p.latent, where the
// attention kernel wrote it. The block's warps share the tokens: S = kWarps / kTok warps a token,
// each taking every S-th split with kSplitLoads splits' loads in flight, a lane 16 columns, their
// sums met in shared memory (red, S - 1 warps' [kL + 4] a token) in a fixed order. jr[t] = (job,
// row in it). Every thread calls it (it has block barriers).
constexpr int kSplitLoads = 4;

template <int kTok>
__device__ void merge_rows(const MlaAbsorbOutParams& p, const AttentionOutput& a, int h, const int2* jr,
                           bf16 (*merged)[kMlaLatentDim], float* red) {
  constexpr int kL = kMlaLatentDim, S = kWarps / kTok;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = warp / S, sub = warp % S;
  const int M = 16 * a.s.m_tiles;
  const bool has = t < p.T && jr[t].x >= 0;
  const mla::Job jb = has ? reinterpret_cast<const mla::Job*>(a.s.jobs)[jr[t].x] : mla::Job{};
  const int n = jb.num_splits, r = jr[t].y;
  bf16* lat = static_cast<bf16*>(const_cast<void*>(p.latent)) + t * p.lat_st0 + h * p.lat_st1;
  mla::SplitSums sums;
  if (has && n <= 1 && sub == 0) {
    // The attention kernel wrote the row: 16 columns a lane.
#pragma unroll
    for (int i = 0; i < 2; ++i)
      *reinterpret_cast<uint4*>(&merged[t][8 * (lane + 32 * i)]) =
          *reinterpret_cast<const uint4*>(lat + 8 * (lane + 32 * i));
  } else if (has && n > 1) {
    const float* lse = a.s.partial_lse + int64_t(jb.split_offset) * M + r;
    float mx = -INFINITY;
    for (int k = lane; k < n; k += 32) mx = fmaxf(mx, lse[int64_t(k) * M]);
#pragma unroll
    for (int d = 16; d > 0; d /= 2) mx = fmaxf(mx, __shfl_xor_sync(~0u, mx, d));
    // Several blocks (column slices) read each partial: it stays in L2.
    mla::add_splits<kSplitLoads, false>(sums, a.s.partial_o + (int64_t(jb.split_offset) * M + r) * kL,
                                        int64_t(M) * kL, sub, S, n, [&](int k) {
                                          const float l = lse[int64_t(k) * M];
                                          return l == -INFINITY ? 0.f : mma::fast_exp2(l - mx);
                                        });
  }
  mla::fold_split_sums(sums, red + t * (S - 1) * mla::kSplitSumsFloats, sub, S, has && n > 1);
  if (!has || n <= 1 || sub > 0) return;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int c = 4 * (lane + 32 * i);
    const uint2 v = mla::merged_bf16x4(sums, i);
    *reinterpret_cast<uint2*>(&merged[t][c]) = v;
    if (blockIdx.y == 0) *reinterpret_cast<uint2*>(lat + c) = v;
  }
}

// kMerge: the attention's split rows come unmerged (AttentionOutput), merged here into shared
// memory first; otherwise a.d is unused and the latents are p.latent.
template <int kTok, bool kMerge>
__global__ void __launch_bounds__(kThreads) absorb_out_few_kernel(MlaAbsorbOutParams p, AttentionOutput a) {
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int v0 = blockIdx.y * kOutRows + warp * kOutRowsPerWarp, chunks = int(p.L / 8);
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.w_uv) + int64_t(h) * p.V * p.L);
  __shared__ __align__(16) bf16 merged[kMerge ? kTok : 1][kMlaLatentDim];
  __shared__ __align__(16) float red[kMerge && kTok < kWarps ? kWarps - kTok : 1][mla::kSplitSumsFloats];
  __shared__ int2 where[kTok];
  const int T = int(p.T);
  if (kMerge && int(threadIdx.x) < T) {
    // The plan ran two or more launches back (before the attention kernel): its jobs are read
    // before the wait. Token t's seq, then the job holding row (t's query in the seq, h).
    const int t = threadIdx.x;
    int seq = 0;
    while (a.d.query_start[seq + 1] <= t) ++seq;
    const int rho = (t - a.d.query_start[seq]) * a.d.num_heads + h, jobs = *a.s.num_jobs;
    const mla::Job* job = reinterpret_cast<const mla::Job*>(a.s.jobs);
    int2 jr{-1, 0};
    for (int j = 0; j < jobs && jr.x < 0; ++j)
      if (job[j].seq == seq && rho >= job[j].row0 && rho < job[j].row0 + job[j].num_rows) jr = {j, rho - job[j].row0};
    where[t] = jr;
  }
  uint4 wv[kOutRowsPerWarp][kOutLoads];
#pragma unroll
  for (int r = 0; r < kOutRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < kOutLoads; ++i) {
      const int c = lane + 32 * i;
      wv[r][i] = v0 + r < p.V && c < chunks ? w[int64_t(v0 + r) * chunks + c] : make_uint4(0, 0, 0, 0);
    }
  pdl_wait_and_trigger();
  const bf16* lat = static_cast<const bf16*>(p.latent) + h * p.lat_st1;
  int64_t lat_st0 = p.lat_st0;
  if constexpr (kMerge) {
    __syncthreads();  // where[]
    merge_rows<kTok>(p, a, h, where, merged, &red[0][0]);
    __syncthreads();
    lat = &merged[0][0], lat_st0 = kMlaLatentDim;
  }
  bf16* out = static_cast<bf16*>(p.out) + h * p.o_st1;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t >= T) break;
    float acc[kOutRowsPerWarp] = {};
#pragma unroll
    for (int i = 0; i < kOutLoads; ++i) {
      const int c = lane + 32 * i;
      if (c >= chunks) continue;
      const uint4 x = *reinterpret_cast<const uint4*>(lat + t * lat_st0 + c * 8);
#pragma unroll
      for (int r = 0; r < kOutRowsPerWarp; ++r) acc[r] = dot8(wv[r][i], x, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < kOutRowsPerWarp; ++r) {
      float s = acc[r];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(~0u, s, o);
      if (lane == 0 && v0 + r < p.V) out[t * p.o_st0 + v0 + r] = __float2bfloat16(s);
    }
  }
}

// The variant of kTok tokens a pass for T <= kMlaAbsorbFewMaxTokens.
template <class... A>
void launch_variant(void (*k1)(A...), void (*k2)(A...), void (*k4)(A...), void (*k8)(A...), dim3 grid, int64_t T,
                    cudaStream_t s, const A&... args) {
  launch_pdl(T == 1 ? k1 : T == 2 ? k2 : T <= 4 ? k4 : k8, grid, kThreads, 0, s, args...);
}

template <bool kMerge>
void launch_absorb_out(const MlaAbsorbOutParams& p, const AttentionOutput& a, cudaStream_t stream) {
  launch_variant(absorb_out_few_kernel<1, kMerge>, absorb_out_few_kernel<2, kMerge>, absorb_out_few_kernel<4, kMerge>,
                 absorb_out_few_kernel<8, kMerge>, dim3(unsigned(p.H), unsigned((p.V + kOutRows - 1) / kOutRows)),
                 p.T, stream, p, a);
}

bool absorb_out_few_fits(const MlaAbsorbOutParams& p) {
  return p.T >= 1 && p.T <= kMlaAbsorbFewMaxTokens && p.H <= kMlaAbsorbFewMaxHeads && p.L <= kMlaAbsorbFewMaxL &&
         p.L % 8 == 0 && aligned16(p.w_uv) && aligned16(p.latent) && p.lat_st0 % 8 == 0 && p.lat_st1 % 8 == 0;
}

}  // namespace

bool launch_mla_absorb_q_few(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.T < 1 || p.T > kMlaAbsorbFewMaxTokens || p.H > kMlaAbsorbFewMaxHeads || p.nope > kMlaAbsorbFewMaxNope ||
      p.L % kQCols != 0 || !aligned16(p.w_uk))
    return false;
  launch_variant(absorb_q_few_kernel<1>, absorb_q_few_kernel<2>, absorb_q_few_kernel<4>, absorb_q_few_kernel<8>,
                 dim3(unsigned(p.H), unsigned(p.L / kQCols)), p.T, stream, p);
  return true;
}

bool launch_mla_absorb_out_few(const MlaAbsorbOutParams& p, cudaStream_t stream) {
  if (!absorb_out_few_fits(p)) return false;
  launch_absorb_out<false>(p, AttentionOutput{}, stream);
  return true;
}

bool mla_absorb_out_merge_fits(const MlaAbsorbOutParams& p) {
  return absorb_out_few_fits(p) && p.L == kMlaLatentDim;
}

void launch_mla_absorb_out_merge(const MlaAbsorbOutParams& p, const MlaDecodeParams& d, const MlaDecodeSchedule& s,
                                 cudaStream_t stream) {
  launch_absorb_out<true>(p, AttentionOutput{d, s}, stream);
}

}  // namespace mlaserve::cuda
