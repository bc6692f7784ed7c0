// The absorbed MLA projections for a decode step's few tokens (mla_absorb.h): the heads' weights
// (2 MB at 16 heads) are streamed once, each block's share loaded into registers before
// pdl_wait(), so the loads overlap the kernel before (cuBLASLt's batched GEMM took 2-3x as long
// at 16 heads, H200).
//   absorb_q:   block (h, 64-column slice of L): 8 threads of 8 columns x 32 groups of rows of
//               w_uk[h] (a thread holds 4 rows), reduced over the groups by shuffles then over the
//               warps in shared memory; blocks of slice 0 also copy q_pe into the latent query.
//   absorb_out: block (h, 16 rows of w_uv[h]): a warp dots 2 rows with the tokens' latents.
#include <cuda_bf16.h>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/bf16x8.cuh"
#include "kernels/cuda/mla_absorb.h"
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

template <int kTok>
__global__ void __launch_bounds__(kThreads) absorb_out_few_kernel(MlaAbsorbOutParams p) {
  const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int v0 = blockIdx.y * kOutRows + warp * kOutRowsPerWarp, chunks = int(p.L / 8);
  const uint4* w = reinterpret_cast<const uint4*>(static_cast<const bf16*>(p.w_uv) + int64_t(h) * p.V * p.L);
  uint4 wv[kOutRowsPerWarp][kOutLoads];
#pragma unroll
  for (int r = 0; r < kOutRowsPerWarp; ++r)
#pragma unroll
    for (int i = 0; i < kOutLoads; ++i) {
      const int c = lane + 32 * i;
      wv[r][i] = v0 + r < p.V && c < chunks ? w[int64_t(v0 + r) * chunks + c] : make_uint4(0, 0, 0, 0);
    }
  pdl_wait_and_trigger();
  const int T = int(p.T);
  const bf16* lat = static_cast<const bf16*>(p.latent) + h * p.lat_st1;
  bf16* out = static_cast<bf16*>(p.out) + h * p.o_st1;
#pragma unroll
  for (int t = 0; t < kTok; ++t) {
    if (t >= T) break;
    float acc[kOutRowsPerWarp] = {};
#pragma unroll
    for (int i = 0; i < kOutLoads; ++i) {
      const int c = lane + 32 * i;
      if (c >= chunks) continue;
      const uint4 x = *reinterpret_cast<const uint4*>(lat + t * p.lat_st0 + c * 8);
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
template <class P>
void launch_variant(void (*k1)(P), void (*k2)(P), void (*k4)(P), void (*k8)(P), dim3 grid, const P& p,
                    cudaStream_t s) {
  launch_pdl(p.T == 1 ? k1 : p.T == 2 ? k2 : p.T <= 4 ? k4 : k8, grid, kThreads, 0, s, p);
}

}  // namespace

bool launch_mla_absorb_q_few(const MlaAbsorbQParams& p, cudaStream_t stream) {
  if (p.T < 1 || p.T > kMlaAbsorbFewMaxTokens || p.H > kMlaAbsorbFewMaxHeads || p.nope > kMlaAbsorbFewMaxNope ||
      p.L % kQCols != 0 || !aligned16(p.w_uk))
    return false;
  launch_variant(absorb_q_few_kernel<1>, absorb_q_few_kernel<2>, absorb_q_few_kernel<4>, absorb_q_few_kernel<8>,
                 dim3(unsigned(p.H), unsigned(p.L / kQCols)), p, stream);
  return true;
}

bool launch_mla_absorb_out_few(const MlaAbsorbOutParams& p, cudaStream_t stream) {
  if (p.T < 1 || p.T > kMlaAbsorbFewMaxTokens || p.H > kMlaAbsorbFewMaxHeads || p.L > kMlaAbsorbFewMaxL ||
      p.L % 8 != 0 || !aligned16(p.w_uv) || !aligned16(p.latent) || p.lat_st0 % 8 != 0 || p.lat_st1 % 8 != 0)
    return false;
  launch_variant(absorb_out_few_kernel<1>, absorb_out_few_kernel<2>, absorb_out_few_kernel<4>,
                 absorb_out_few_kernel<8>, dim3(unsigned(p.H), unsigned((p.V + kOutRows - 1) / kOutRows)), p, stream);
  return true;
}

}  // namespace mlaserve::cuda
