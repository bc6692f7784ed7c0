// The staged form of the skinny FP8 GEMM (skinny_gemm_fp8.h, `depth` > 0): up to 16 tokens, x
// quantized into shared memory once a CTA, each warp's weights through a ring of `depth` K-blocks
// of registers. The fragment order and the sums are skinny_gemm_fp8.cu's, so a launch gives the
// bits of the register form's launch of the same rows, splits and warps.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "common/error.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/skinny_fp8_common.cuh"

namespace mlaserve::cuda {

using namespace skinny_fp8;
using mma::cp_async16;
using mma::cp_async_commit;
using mma::cp_async_wait_all;
using mma::smem_u32;

namespace {

// Bytes of shared memory the staged kernel takes for T tokens over a K range of kb K-blocks: the
// codes in rows kb * 128 + 16 apart (the 16 put a token tile's 8 rows in different banks), then
// the scales.
__host__ __device__ constexpr int64_t staged_codes_bytes(int64_t T, int64_t kb) { return T * (kb * kBlockK + 16); }
int64_t staged_smem_bytes(int64_t T, int64_t kb) { return staged_codes_bytes(T, kb) + 4 * T * kb; }

// The form for up to 8 NT tokens with the activation staged in shared memory: each CTA first has the
// first D K-blocks of its weights in flight (issued before the PDL wait, as no kernel writes
// weights), then quantizes the tokens' K range into shared memory once (or copies the codes and
// scales, QX), and each warp streams its weights through a ring of D K-blocks of registers. With x
// out of the loop, the registers that held two K-blocks of weights and x's hold D of weights; the
// quantization runs once a CTA, not once a warp; and the first loads overlap the previous kernel.
// Short K (q_b's 12 blocks) gains most: a warp has few blocks over which to hide a load's latency.
// At 9-16 tokens (NT 2) each weight fragment meets both token tiles' codes, as in the register form.
template <int RT, int NT, int WK, int D, bool QX>
__global__ void __launch_bounds__(kWarps * 32)
    skinny_fp8_staged_kernel(const void* __restrict__ x_raw, int64_t ldx, const float* __restrict__ xs,
                             int64_t xs_t, int64_t xs_g, const uint8_t* __restrict__ w, int64_t ldw,
                             const float* __restrict__ ws, int64_t ldws, void* __restrict__ out, int64_t ldo,
                             bool out_f32, int T, int N, int K, int64_t x_batch, int64_t w_batch, int64_t ws_batch,
                             int64_t out_batch) {
  constexpr int WR = kWarps / WK;
  extern __shared__ __align__(16) uint8_t staged[];
  __shared__ float red[kWarps][RT * NT * 4 * 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int wr = warp / WK, wk = warp % WK;
  w += blockIdx.z * w_batch;
  ws += blockIdx.z * ws_batch;
  const int cta_n0 = int(blockIdx.x) * 16 * RT * WR, n0 = cta_n0 + wr * 16 * RT;
  const int kblocks = K / kBlockK, z = blockIdx.y;
  const int kb_begin = int(int64_t(kblocks) * z / gridDim.y), kb_end = int(int64_t(kblocks) * (z + 1) / gridDim.y);
  const int nkb = kb_end - kb_begin, ld_s = nkb * kBlockK + 16;
  uint8_t* x_s = staged;
  float* scale_s = reinterpret_cast<float*>(staged + staged_codes_bytes(T, nkb));

  const WeightRows<RT> rows(w, ldw, ws, ldws, n0, N, g, t4);
  // This warp's K-blocks: kb_begin + wk + i WK for i < mine.
  const int mine = wk < nkb ? (nkb - wk + WK - 1) / WK : 0;
  struct Slot {
    uint4 w[RT][2][2];  // [tile][row g, g + 8][half]
    float scale[RT];
  };
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto load = [&](Slot& sl, int i) { rows.load(sl.w, sl.scale, kb_begin + wk + i * WK); };
  Slot ring[D];
#pragma unroll
  for (int d = 0; d < D; ++d)
    if (d < mine) load(ring[d], d);
  pdl_wait_and_trigger();

  // Stage x. Codes (QX) and their scales are copied, every 16-byte piece of the tokens' K range
  // asked for at once (cp.async). BF16 values are quantized a warp a group of 128 (token t, K-block
  // b of the range), 4 values a lane, with up to 8 groups a warp loaded into registers before any
  // is quantized; copying them into shared memory first was slower (twenty-ninth session).
  const int groups = T * nkb;
  if constexpr (QX) {
    const uint8_t* x = static_cast<const uint8_t*>(x_raw);
    const int pieces = nkb * (kBlockK / 16);  // a token's
    for (int i = threadIdx.x; i < T * pieces; i += kWarps * 32) {
      const int t = i / pieces, c = i % pieces;
      cp_async16(smem_u32(x_s + t * ld_s + 16 * c), x + t * ldx + kb_begin * kBlockK + 16 * c, true);
    }
    cp_async_commit();
    for (int i = threadIdx.x; i < groups; i += kWarps * 32)
      scale_s[i] = __ldg(xs + (i / nkb) * xs_t + int64_t(kb_begin + i % nkb) * xs_g);
    cp_async_wait_all();
  } else {
    const bf16* x = static_cast<const bf16*>(x_raw) + blockIdx.z * x_batch;
    for (int q0 = warp; q0 < groups; q0 += kWarps * 8) {
      uint2 v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int q = q0 + u * kWarps, t = q / max(nkb, 1), b = q % max(nkb, 1);
        v[u] = q < groups ? *reinterpret_cast<const uint2*>(x + t * ldx + (kb_begin + b) * kBlockK + 4 * lane)
                          : make_uint2(0, 0);
      }
      // The 8 groups' amax reduced side by side (each is a chain of 5 shuffles).
      float amax[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) amax[u] = abs_max_pair(abs_max_pair(0.f, v[u].x), v[u].y);
#pragma unroll
      for (int m = 1; m < 32; m *= 2)
#pragma unroll
        for (int u = 0; u < 8; ++u) amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xffffffffu, amax[u], m));
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        const int q = q0 + u * kWarps, t = q / max(nkb, 1), b = q % max(nkb, 1);
        if (q >= groups) continue;  // the same for the whole warp
        const float sc = fmaxf(amax[u], kFp8MinAmax) / kE4m3Max, r = __frcp_rn(sc);
        *reinterpret_cast<uint32_t*>(x_s + t * ld_s + b * kBlockK + 4 * lane) =
            quantize_pair(v[u].x, sc, r) | (quantize_pair(v[u].y, sc, r) << 16);
        if (lane == 0) scale_s[t * nkb + b] = sc;
      }
    }
  }
  __syncthreads();

  // Token 8 j + g's row (row A of the MMA's B operand), and whether C column c of token tile j
  // (token 8 j + 2 t4 + c) is a token.
  bool tok[NT], col_tok[NT][2];
  const uint8_t* x_row[NT];
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    tok[j] = 8 * j + g < T;
    x_row[j] = x_s + (tok[j] ? 8 * j + g : 0) * ld_s + 16 * t4;
#pragma unroll
    for (int c = 0; c < 2; ++c) col_tok[j][c] = 8 * j + 2 * t4 + c < T;
  }
  float acc[RT][NT][4] = {};
  auto step = [&](const Slot& sl, int i) {
    const int b = wk + i * WK;  // K-block in the range
    uint4 xq[NT][2];
    float col_scale[NT][2];
#pragma unroll
    for (int j = 0; j < NT; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h)
        xq[j][h] = tok[j] ? *reinterpret_cast<const uint4*>(x_row[j] + b * kBlockK + 64 * h) : zero;
#pragma unroll
      for (int c = 0; c < 2; ++c) col_scale[j][c] = col_tok[j][c] ? scale_s[(8 * j + 2 * t4 + c) * nkb + b] : 0.f;
    }
#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma_kblock(d, sl.w[rt], xq[j]);
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[rt][j][e] += d[e] * (sl.scale[rt] * col_scale[j][e & 1]);
      }
  };
  // Slot d holds block i0 + d: used, then refilled with block i0 + d + D.
  for (int i0 = 0; i0 < mine; i0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      if (i0 + d >= mine) break;
      step(ring[d], i0 + d);
      if (i0 + d + D < mine) load(ring[d], i0 + d + D);
    }
  }

  reduce_and_store<RT, NT, WK>(acc, &red[0][0], T, 0, cta_n0, N, out, ldo, out_f32, out_batch);
}

// The staged form's shared memory stays under this (two CTAs of the largest still fit an SM).
constexpr int64_t kStagedMaxSmem = 96 * 1024;

template <int RT, int NT, int WK, int D, bool QX>
void launch_form(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  auto* kernel = skinny_fp8_staged_kernel<RT, NT, WK, D, QX>;
  static const bool sized = [&] {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStagedMaxSmem)));
    return true;
  }();
  (void)sized;
  const int64_t range = (p.K / kBlockK + splits - 1) / splits;
  dim3 grid(unsigned(row_blocks), unsigned(splits), unsigned(p.batch));
  launch_pdl_clusters(kernel, grid, dim3(1, splits, 1), kWarps * 32, size_t(staged_smem_bytes(p.T, range)), stream,
                      p.x, p.ldx, p.x_scales, p.xs_t, p.xs_g, static_cast<const uint8_t*>(p.w), p.ldw, p.w_scales,
                      p.ldws, p.out, p.ldo, p.out_f32, int(p.T), int(p.N), int(p.K), p.x_batch, p.w_batch, p.ws_batch,
                      p.out_batch);
}

template <int RT, int WK, int D, bool QX>
void launch_staged_tokens(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  if constexpr (RT < 4) {
    if (p.T > 8) return launch_form<RT, 2, WK, D, QX>(p, row_blocks, splits, stream);
  }
  launch_form<RT, 1, WK, D, QX>(p, row_blocks, splits, stream);
}

template <int RT, int WK, int D>
void launch_staged_inputs(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  if (p.x_scales)
    launch_staged_tokens<RT, WK, D, true>(p, row_blocks, splits, stream);
  else
    launch_staged_tokens<RT, WK, D, false>(p, row_blocks, splits, stream);
}

template <int WK>
void launch_staged_rows(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, int64_t rb, cudaStream_t stream) {
  switch (c.row_tiles * 8 + c.depth) {
    case 8 + 2: launch_staged_inputs<1, WK, 2>(p, rb, c.splits, stream); break;
    case 8 + 3: launch_staged_inputs<1, WK, 3>(p, rb, c.splits, stream); break;
    case 8 + 4: launch_staged_inputs<1, WK, 4>(p, rb, c.splits, stream); break;
    case 16 + 2: launch_staged_inputs<2, WK, 2>(p, rb, c.splits, stream); break;
    case 16 + 3: launch_staged_inputs<2, WK, 3>(p, rb, c.splits, stream); break;
    case 16 + 4: launch_staged_inputs<2, WK, 4>(p, rb, c.splits, stream); break;
    default: launch_staged_inputs<4, WK, 2>(p, rb, c.splits, stream); break;
  }
}

}  // namespace

bool skinny_gemm_fp8_staged_fits(int64_t T, int64_t K, const SkinnyFp8Config& c) {
  const int64_t range = (K / kBlockK + c.splits - 1) / c.splits;
  // Four 16-row tiles a warp over two token tiles spill (ptxas, 52-208 bytes a thread).
  return (T <= 8 || (T <= kSkinnyFp8MaxRows && c.row_tiles < 4)) && staged_smem_bytes(T, range) <= kStagedMaxSmem;
}

namespace skinny_fp8 {

void launch_staged(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, int64_t rb, cudaStream_t stream) {
  MLA_CHECK(skinny_gemm_fp8_staged_fits(p.T, p.K, c),
            "skinny FP8 GEMM: T={} K={} with {} stages more than {} tokens or {} bytes of x", p.T, p.K, to_string(c),
            kSkinnyFp8MaxRows, kStagedMaxSmem);
  switch (c.k_warps) {
    case 1: launch_staged_rows<1>(p, c, rb, stream); break;
    case 2: launch_staged_rows<2>(p, c, rb, stream); break;
    case 4: launch_staged_rows<4>(p, c, rb, stream); break;
    default: launch_staged_rows<8>(p, c, rb, stream); break;
  }
}

}  // namespace skinny_fp8

}  // namespace mlaserve::cuda
