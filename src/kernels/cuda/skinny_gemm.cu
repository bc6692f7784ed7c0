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
//
// With kNorm the kernel is a block's first linear at one token with its input's RMSNorm folded in:
// W (rmsnorm(r) * g) = inv_rms(r) * W (r * g), r = x (+ residual). Each CTA first turns the row into
// the operand bf16(r * g) in shared memory (a thread 8 values, g read before the PDL wait; its first
// pass of weights too) and sums r^2, which only the last step needs: the normalization adds one
// shared-memory barrier, not a reduction, before the weights' products. The CTAs share out the
// 8-value pieces of r (a range each), which their threads store to the residual stream and, where
// asked, as normalized values once the sum is known.
#include <cuda_bf16.h>

#include <algorithm>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/bf16x8.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/skinny_common.cuh"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/warp_reduce.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 8, kRows = 16, kChunk = 32, kUnroll = 4;
static_assert(kSkinnyNormMaxK == 8 * kWarps * 32, "kNorm: a thread folds one piece of 8 values a token");

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

// kNorm's operand for 8 values of a token: r = x + residual (zeros where there is none; in fp32,
// rounded as the residual stream holds it) to `r`, ss += r^2, and bf16(r * g) returned (a product
// of two BF16 values is exact in fp32, so the BF16 multiply rounds it as fp32 math then a rounding
// would).
__device__ __forceinline__ uint4 fold_norm8(const uint4& x, const uint4& residual, const uint4& g, float& ss, uint4& r) {
  const __nv_bfloat162* xv = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* rv = reinterpret_cast<const __nv_bfloat162*>(&residual);
  const __nv_bfloat162* gv = reinterpret_cast<const __nv_bfloat162*>(&g);
  __nv_bfloat162* sum = reinterpret_cast<__nv_bfloat162*>(&r);
  uint4 o;
  __nv_bfloat162* ov = reinterpret_cast<__nv_bfloat162*>(&o);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(xv[i]), b = __bfloat1622float2(rv[i]);
    sum[i] = __floats2bfloat162_rn(a.x + b.x, a.y + b.y);
    const float2 f = __bfloat1622float2(sum[i]);
    ss = fmaf(f.x, f.x, fmaf(f.y, f.y, ss));
    ov[i] = __hmul2(sum[i], gv[i]);
  }
  return o;
}

// NT: 8-token column tiles (only NT = 1 is launched: see kSkinnyGemmMaxRows). At most 64 registers
// (4 CTAs an SM): V3's o (448 CTAs) stays one wave on 132 SMs. kNorm (see the top; T = 1): 80
// registers, 3 CTAs an SM.
template <int NT, bool OUT_F32, bool kNorm>
__global__ void __launch_bounds__(kWarps * 32, kNorm ? 3 : 4)
    skinny_gemm_kernel(const bf16* __restrict__ x, int64_t ldx, const bf16* __restrict__ w, int64_t ldw,
                       void* __restrict__ out, int64_t ldo, int T, int N, int K, SkinnySplit split, SkinnyNorm nrm) {
  __shared__ float red[kWarps][NT * 4][32];
  __shared__ float red_ss[kWarps];
  __shared__ bool last;
  __shared__ __align__(16) bf16 operand[kNorm ? kSkinnyNormMaxK : 8];
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
    xt[j] = kNorm ? operand + t4 * 8 : x + int64_t(g + 8 * j) * ldx + t4 * 8;  // kNorm: token 0 only
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
      va[u] = in && row_a ? load_weight_once(wa + k) : zero;
      vb[u] = in && row_b ? load_weight_once(wb + k) : zero;
    }
  };
  // The pass from chunk ch0 on toward L2 (before the wait, where registers would stay live).
  auto prefetch_pass = [&](int ch0) {
    for (int ch = ch0; ch < min(c_end, ch0 - warp + kWarps * kUnroll); ch += kWarps) {
      int k = ch * kChunk + t4 * 8;
      if (k < K && row_a) prefetch_l2(wa + ch * kChunk);
      if (k < K && row_b) prefetch_l2(wb + ch * kChunk);
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
  // kNorm: thread q folds piece q (values [8q, 8q + 8)); this CTA's range of pieces [p_lo, p_hi)
  // goes to the residual stream and, where asked, the normalized row.
  const int q = threadIdx.x, pieces = K / 8;
  const bool mine = q >= int(int64_t(pieces) * blockIdx.x / gridDim.x) &&
                    q < int(int64_t(pieces) * (blockIdx.x + 1) / gridDim.x);
  uint4 gv = zero, r = zero;
  auto load_norm_weight = [&] {
    if (kNorm && q < pieces) gv = reinterpret_cast<const uint4*>(nrm.weight)[q];
  };
  auto fold_norm = [&] {
    if constexpr (kNorm) {
      float ss = 0.f;
      if (q < pieces) {
        const uint4 rv = nrm.residual ? reinterpret_cast<const uint4*>(nrm.residual)[q] : zero;
        reinterpret_cast<uint4*>(operand)[q] = fold_norm8(reinterpret_cast<const uint4*>(x)[q], rv, gv, ss, r);
        if (mine && nrm.residual) reinterpret_cast<uint4*>(nrm.residual_out)[q] = r;
      }
      ss = warp_sum(ss);
      if (lane == 0) red_ss[warp] = ss;
      __syncthreads();
    }
  };
  // Weights do not depend on the previous kernel. A CTA of one pass (K <= 1024 a split) loads its
  // weights before the wait and only x after it; a longer one starts its first pass into L2 there
  // (its loop would keep these registers live, and fewer CTAs would fit an SM). kNorm, at 3 CTAs an
  // SM, loads its first pass before the wait whatever K is and starts the second into L2, so that
  // the fold's barrier delays no weight load.
  if constexpr (kNorm) {
    uint4 va[kUnroll], vb[kUnroll];
    load_weights(c_begin + warp, va, vb);
    prefetch_pass(c_begin + kWarps * kUnroll + warp);
    load_norm_weight();
    pdl_wait_and_trigger();
    fold_norm();
    load_x_and_multiply(c_begin + warp, va, vb);
    for (int ch0 = c_begin + kWarps * kUnroll + warp; ch0 < c_end; ch0 += kWarps * kUnroll) {
      load_weights(ch0, va, vb);
      load_x_and_multiply(ch0, va, vb);
    }
  } else if (c_end - c_begin <= kWarps * kUnroll) {
    uint4 va[kUnroll], vb[kUnroll];
    load_weights(c_begin + warp, va, vb);
    pdl_wait_and_trigger();
    load_x_and_multiply(c_begin + warp, va, vb);
  } else {
    prefetch_pass(c_begin + warp);
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
  // kNorm: 1 / rms of the row (every thread adds the warps' shares in the same order).
  float inv = 1.f;
  if constexpr (kNorm) {
    float v = 0;
#pragma unroll
    for (int u = 0; u < kWarps; ++u) v += red_ss[u];
    inv = rsqrtf(v / float(K) + nrm.eps);
  }
  if (kNorm && nrm.normed && mine) {
    // As rmsnorm_vec_kernel rounds it.
    float v[8], b[8];
    unpack8(r, v);
    unpack8(gv, b);
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = b[e] * (v[e] * inv);
    reinterpret_cast<uint4*>(nrm.normed)[q] = pack8(v);
  }
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
        if constexpr (kNorm) s *= inv;
        if constexpr (OUT_F32)
          static_cast<float*>(out)[int64_t(t) * ldo + row] = s;
        else
          static_cast<bf16*>(out)[int64_t(t) * ldo + row] = __float2bfloat16(s);
      }
    }
}

template <int NT>
void launch_nt(const bf16* x, int64_t ldx, const bf16* w, int64_t ldw, void* out, int64_t ldo, bool out_f32, int T,
               int N, int K, SkinnySplit split, const SkinnyNorm* norm, cudaStream_t stream) {
  dim3 grid((N + kRows - 1) / kRows, split.splits);
  if (norm)
    launch_pdl(out_f32 ? skinny_gemm_kernel<NT, true, true> : skinny_gemm_kernel<NT, false, true>, grid, kWarps * 32,
               0, stream, x, ldx, w, ldw, out, ldo, T, N, K, split, *norm);
  else
    launch_pdl(out_f32 ? skinny_gemm_kernel<NT, true, false> : skinny_gemm_kernel<NT, false, false>, grid,
               kWarps * 32, 0, stream, x, ldx, w, ldw, out, ldo, T, N, K, split, SkinnyNorm{});
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

bool skinny_norm_fits(int64_t T, int64_t N, int64_t K, int num_sms) {
  // One token: an earlier form that folded up to 8 rows made V2-Lite's batch-8 step 1-3% slower
  // (H200). One wave of CTAs (3 an SM): past it the fold is repeated more than the norm's launch is
  // worth (V3's q_b, 1536 CTAs, was 25 us a layer slower).
  const int64_t blocks = (N + kRows - 1) / kRows;
  return T == 1 && K <= kSkinnyNormMaxK && skinny_gemm_splits(N, K, num_sms) == 1 && blocks <= 3 * int64_t(num_sms);
}

size_t skinny_gemm_partial_floats(int64_t N, int splits) {
  return splits > 1 ? size_t((N + kRows - 1) / kRows) * size_t(splits) * 4 * 32 : 0;
}

void launch_skinny_gemm(const void* x, int64_t ldx, const void* w, int64_t ldw, void* out, int64_t ldo, bool out_f32,
                        int64_t T, int64_t N, int64_t K, SkinnySplit split, cudaStream_t stream,
                        const SkinnyNorm* norm) {
  auto xb = static_cast<const bf16*>(x);
  auto wb = static_cast<const bf16*>(w);
  MLA_CHECK(T <= kSkinnyGemmMaxRows, "skinny GEMM: {} rows", T);
  MLA_CHECK(!norm || (split.splits == 1 && T == 1 && K <= kSkinnyNormMaxK), "skinny GEMM: no folded norm at T {} K {}",
            T, K);
  launch_nt<1>(xb, ldx, wb, ldw, out, ldo, out_f32, int(T), int(N), int(K), split, norm, stream);
}

}  // namespace mlaserve::cuda
