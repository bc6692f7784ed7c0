// Skinny GEMM (skinny_gemm.h) on tensor cores: mma.sync m16n8k16 with W as the 16-row A operand
// and the tokens as the 8-column B operand, so each W element is loaded once, 16 bytes a thread.
//
// A CTA owns 16 output rows; its 8 warps split K in 32-wide chunks and add their partial sums in
// shared memory. When 16-row blocks alone give too few CTAs to keep the memory system busy (a
// narrow N), `splits` CTAs share a block's K: each writes its fp32 partial to a workspace, and the
// last to finish (an atomic counter per block, reset by that CTA for the next launch) adds them.
// Within a chunk, thread (g = lane / 4, t4 = lane % 4) loads k in
// [chunk + 8 t4, chunk + 8 t4 + 8) of W rows g and g + 8 and of token g: a dot product does not
// care in which order k is summed, so these 8 values serve as the fragment columns {2t4, 2t4+1,
// 2t4+8, 2t4+9} of two m16n8k16 steps (the first and last four), for A and B alike.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/skinny_common.cuh"
#include "kernels/cuda/skinny_gemm.h"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8, kRows = 16, kChunk = 32, kUnroll = 4;

__device__ __forceinline__ void mma_bf16(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c += W rows (g, g + 8) · token, over one chunk's 8 k of this thread.
__device__ __forceinline__ void mma_chunk(float* c, const uint4& wg, const uint4& w8, const uint4& x) {
  mma_bf16(c, wg.x, w8.x, wg.y, w8.y, x.x, x.y);
  mma_bf16(c, wg.z, w8.z, wg.w, w8.w, x.z, x.w);
}

// NT: 8-token column tiles (only NT = 1 is launched: see kSkinnyGemmMaxRows). At most 64 registers
// (4 CTAs an SM): V3's o (448 CTAs) stays one wave on 132 SMs.
template <int NT, bool OUT_F32>
__global__ void __launch_bounds__(kWarps * 32, 4) skinny_gemm_kernel(const bf16* __restrict__ x, int64_t ldx,
                                                                     const bf16* __restrict__ w, int64_t ldw,
                                                                     void* __restrict__ out, int64_t ldo, int T, int N,
                                                                     int K, SkinnySplit split) {
  __shared__ float red[kWarps][NT * 4][32];
  __shared__ bool last;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int n0 = blockIdx.x * kRows;
  const bool row_a = n0 + g < N, row_b = n0 + g + 8 < N;
  const bf16* wa = w + int64_t(n0 + g) * ldw + t4 * 8;
  const bf16* wb = wa + 8 * ldw;
  const bf16* xt[NT];
  bool tok[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    tok[j] = g + 8 * j < T;
    xt[j] = x + int64_t(g + 8 * j) * ldx + t4 * 8;
  }
  float c[NT][4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  // This CTA's share of the chunks: [c_begin, c_end).
  const int chunks = (K + kChunk - 1) / kChunk, z = blockIdx.y;
  const int c_begin = int(int64_t(chunks) * z / gridDim.y), c_end = int(int64_t(chunks) * (z + 1) / gridDim.y);
  // A pass: kUnroll chunks a warp, all their loads first so that many are in flight at once.
  auto load_weights = [&](int ch0, uint4 (&va)[kUnroll], uint4 (&vb)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int ch = ch0 + u * kWarps, k = ch * kChunk;
      bool in = ch < c_end && k + t4 * 8 < K;  // K % 8 == 0: a thread's 8 values are all in or all out
      va[u] = in && row_a ? skinny::load_stream(wa + k) : zero;
      vb[u] = in && row_b ? skinny::load_stream(wb + k) : zero;
    }
  };
  auto load_x_and_multiply = [&](int ch0, const uint4 (&va)[kUnroll], const uint4 (&vb)[kUnroll]) {
    uint4 vx[kUnroll][NT];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int ch = ch0 + u * kWarps, k = ch * kChunk;
      bool in = ch < c_end && k + t4 * 8 < K;
#pragma unroll
      for (int j = 0; j < NT; ++j) vx[u][j] = in && tok[j] ? *reinterpret_cast<const uint4*>(xt[j] + k) : zero;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int j = 0; j < NT; ++j) mma_chunk(c[j], va[u], vb[u], vx[u][j]);
  };
  // Weights do not depend on the previous kernel. A CTA of one pass (K <= 1024 a split) loads its
  // weights before the wait and only x after it; a longer one starts its first pass into L2 there
  // (its loop would keep these registers live, and fewer CTAs would fit an SM).
  if (c_end - c_begin <= kWarps * kUnroll) {
    uint4 va[kUnroll], vb[kUnroll];
    load_weights(c_begin + warp, va, vb);
    pdl_wait_and_trigger();
    load_x_and_multiply(c_begin + warp, va, vb);
  } else {
    for (int ch = c_begin + warp; ch < c_begin + kWarps * kUnroll; ch += kWarps) {
      int k = ch * kChunk + t4 * 8;
      if (k < K && row_a) prefetch_l2(wa + ch * kChunk);
      if (k < K && row_b) prefetch_l2(wb + ch * kChunk);
    }
    pdl_wait_and_trigger();
    for (int ch0 = c_begin + warp; ch0 < c_end; ch0 += kWarps * kUnroll) {
      uint4 va[kUnroll], vb[kUnroll];
      load_weights(ch0, va, vb);
      load_x_and_multiply(ch0, va, vb);
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][j * 4 + i][lane] = c[j][i];
  __syncthreads();
  if (warp != 0) return;
  float sum[NT * 4];
#pragma unroll
  for (int i = 0; i < NT * 4; ++i) {
    sum[i] = 0;
#pragma unroll
    for (int v = 0; v < kWarps; ++v) sum[i] += red[v][i][lane];
  }
  if (gridDim.y > 1) {
    // Partials: [block][split][NT * 4][32] floats. Publish ours, then count; the last adds all.
    float* part = split.partials + (int64_t(blockIdx.x) * gridDim.y) * (NT * 4 * 32);
#pragma unroll
    for (int i = 0; i < NT * 4; ++i) part[(int64_t(z) * NT * 4 + i) * 32 + lane] = sum[i];
    __threadfence();
    __syncwarp();
    if (lane == 0) last = skinny::arrive_last(split.counters + blockIdx.x, int(gridDim.y));
    __syncwarp();
    if (!last) return;
    __threadfence();
#pragma unroll
    for (int i = 0; i < NT * 4; ++i) {
      sum[i] = 0;
      for (int v = 0; v < int(gridDim.y); ++v) sum[i] += __ldcg(part + (int64_t(v) * NT * 4 + i) * 32 + lane);
    }
  }
#pragma unroll
  for (int j = 0; j < NT; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float s = sum[j * 4 + i];
      // c[j][i]: row g (i < 2) or g + 8, token 8 j + 2 t4 + (i & 1).
      int row = n0 + g + (i >= 2 ? 8 : 0), t = 8 * j + 2 * t4 + (i & 1);
      if (row < N && t < T) {
        if constexpr (OUT_F32)
          static_cast<float*>(out)[int64_t(t) * ldo + row] = s;
        else
          static_cast<bf16*>(out)[int64_t(t) * ldo + row] = __float2bfloat16(s);
      }
    }
}

template <int NT>
void launch_nt(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* out, int64_t ldo, bool out_f32, int T,
               int N, int K, SkinnySplit split, cudaStream_t stream) {
  dim3 grid((N + kRows - 1) / kRows, split.splits);
  launch_pdl(out_f32 ? skinny_gemm_kernel<NT, true> : skinny_gemm_kernel<NT, false>, grid, kWarps * 32, 0, stream, x,
             ldx, w, ldw, out, ldo, T, N, K, split);
}

}  // namespace

bool skinny_gemm_fits(const void* x, int64_t ldx, const void* w, int64_t ldw, int64_t T, int64_t K) {
  return T >= 1 && T <= kSkinnyGemmMaxRows && K % 8 == 0 && ldx % 8 == 0 && ldw % 8 == 0 && aligned16(x) &&
         aligned16(w) && K < (int64_t(1) << 31);
}

int skinny_gemm_splits(int64_t N, int64_t K, int num_sms) {
  int64_t blocks = (N + kRows - 1) / kRows, chunks = (K + kChunk - 1) / kChunk;
  // Two CTAs per SM in all, while every split keeps at least three chunks per warp; below 128
  // chunks (K < 4096) one pass costs less than the partials' round trip (H200, bench_kernels
  // --only skinny: V2-Lite's K = 2048 linears 10-25% faster unsplit, V3's K = 7168 ones faster split).
  if (chunks < 128) return 1;
  int64_t splits = std::min<int64_t>((2 * num_sms + blocks - 1) / blocks, chunks / (3 * kWarps));
  return int(std::clamp<int64_t>(splits, 1, kSkinnyGemmMaxSplits));
}

size_t skinny_gemm_partial_floats(int64_t N, int splits) {
  return splits > 1 ? size_t((N + kRows - 1) / kRows) * size_t(splits) * 4 * 32 : 0;
}

void launch_skinny_gemm(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                        int64_t T, int64_t N, int64_t K, SkinnySplit split, cudaStream_t stream) {
  auto xb = static_cast<const bf16*>(x);
  auto wb = static_cast<const bf16*>(w);
  MLA_CHECK(T <= kSkinnyGemmMaxRows, "skinny GEMM: {} rows", T);
  launch_nt<1>(xb, ldx, wb, ldw, out, ldo, out_f32, int(T), int(N), int(K), split, stream);
}

}  // namespace mlaserve::cuda
