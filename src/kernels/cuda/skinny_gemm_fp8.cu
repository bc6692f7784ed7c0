// Skinny FP8 W8A8 GEMM (skinny_gemm_fp8.h) on mma.sync m16n8k32 e4m3: W rows as the 16-row A
// operand, the tokens as the 8-column B operand, so each weight byte is loaded once, 16 bytes a
// thread, and never staged in shared memory.
//
// A warp takes one 128-wide K-block at a time (the block of both the weight and the activation
// scales): it loads its rows' 128 bytes, quantizes the tokens' 128 values itself (the four lanes of
// a token hold all of them, so the group's amax is two shuffles), runs 4 MMAs a 16-row tile and
// token tile from zero, and adds that block's sum to fp32 accumulators times the activation and
// weight scales, as the CPU reference does (cpu_fp8.cc). The k_warps warps of a row group split the
// K-blocks and add their sums in shared memory; `splits` CTAs of the same rows split K further, as one
// thread-block cluster (the first adds the others' sums from their shared memory, in a fixed order).
//
// Fragment order: a dot product does not care in which order k is summed, so thread (g = lane / 4,
// t4 = lane % 4) loads bytes [16 t4, 16 t4 + 16) of each 64-byte half of a row's block, and those
// serve as fragment columns {4 t4 .. 4 t4 + 3, 16 + 4 t4 .. 16 + 4 t4 + 3} of two MMAs (the first
// and last 8 bytes), for A and B alike.
//
// With x quantized already (QX), a thread loads those 16 bytes of its tokens' rows as they are,
// and the scales of its C columns' tokens.
//
// This is the form with x in the loop (`depth` 0), the only one past 16 tokens. The staged form
// (skinny_gemm_fp8_staged.cu) keeps x in shared memory and more weight bytes in flight; the tuned
// table picks between them per shape and token count.
//
// Measured and dropped (docs/benchmarks.md): weights through a shared-memory ring, by cp.async
// (sixteenth and twenty-sixth sessions) or by TMA boxes and bulk copies with a producer warp
// (twenty-eighth); L2 prefetches ahead in the loop or of the CTA's whole slice.

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <type_traits>

#include "common/error.h"
#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"
#include "kernels/cuda/skinny_fp8_common.cuh"

namespace mlaserve::cuda {

using namespace skinny_fp8;

static_assert(kSkinnyGemmMaxSplits <= 8, "a launch's splits are one cluster, of at most the portable 8 blocks");

namespace {

// RT: 16-row tiles a warp; NT: 8-token tiles (a CTA's tokens <= 8 NT); WK: warps on K (8 / WK on
// rows); QX: x is e4m3 with scales xs (else BF16). Grid: x = row block * token tiles + token tile,
// y = K split, z = batch.
template <int RT, int NT, int WK, bool QX>
__global__ void __launch_bounds__(kWarps * 32, 1)
    skinny_fp8_kernel(const void* __restrict__ x_raw, int64_t ldx, const float* __restrict__ xs, int64_t xs_t,
                      int64_t xs_g, const uint8_t* __restrict__ w, int64_t ldw, const float* __restrict__ ws,
                      int64_t ldws, void* __restrict__ out, int64_t ldo, bool out_f32, int T_all, int N, int K,
                      int64_t x_batch, int64_t w_batch, int64_t ws_batch, int64_t out_batch) {
  using XT = std::conditional_t<QX, uint8_t, bf16>;
  const XT* x = static_cast<const XT*>(x_raw);
  constexpr int WR = kWarps / WK;
  constexpr int kPairs = RT * NT * 4 * 32;  // (accumulator, lane) sums of one warp's rows
  __shared__ float red[kWarps][kPairs];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t4 = lane % 4;
  const int wr = warp / WK, wk = warp % WK;
  // The CTA's token tile and rows (recomputed for the epilogue rather than kept in registers).
  auto token_tile = [&] { return int(blockIdx.x) % ((T_all + 8 * NT - 1) / (8 * NT)); };
  auto cta_row0 = [&] { return int(blockIdx.x) / ((T_all + 8 * NT - 1) / (8 * NT)) * 16 * RT * WR; };
  const int T = min(8 * NT, T_all - token_tile() * 8 * NT);
  x += blockIdx.z * x_batch + int64_t(token_tile()) * 8 * NT * ldx;
  if constexpr (QX) xs += int64_t(token_tile()) * 8 * NT * xs_t;
  w += blockIdx.z * w_batch;
  ws += blockIdx.z * ws_batch;
  const int n0 = cta_row0() + wr * 16 * RT;
  const int kblocks = K / kBlockK, z = blockIdx.y;
  const int kb_begin = int(int64_t(kblocks) * z / gridDim.y), kb_end = int(int64_t(kblocks) * (z + 1) / gridDim.y);

  const WeightRows<RT> rows(w, ldw, ws, ldws, n0, N, g, t4);
  const XT* xrow[NT];
  bool tok[NT];
  bool col_tok[NT][2];  // QX: whether this thread's C column c of token tile j (token 8 j + 2 t4 + c) is a token
#pragma unroll
  for (int j = 0; j < NT; ++j) {
    tok[j] = g + 8 * j < T;
    xrow[j] = x + int64_t(tok[j] ? g + 8 * j : 0) * ldx + t4 * 16;
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      col_tok[j][c] = 8 * j + 2 * t4 + c < T;
    }
  }
  // Weights do not depend on the previous kernel: the first blocks' lines start into L2 before the
  // wait (one lane a row: a row's block is one 128-byte line).
  if (t4 == 0)
    for (int kb = kb_begin + wk; kb < min(kb_end, kb_begin + 2 * WK); kb += WK)
#pragma unroll
      for (int rt = 0; rt < RT; ++rt)
#pragma unroll
        for (int r = 0; r < 2; ++r)
          if (rows.ok[rt][r]) prefetch_l2(rows.row[rt][r] + kb * kBlockK);
  pdl_wait_and_trigger();

  // One K-block's operands: the next block's loads are issued before this one's math, so a
  // warp always has a block of weights in flight.
  struct Block {
    uint4 w[RT][2][2];            // [tile][row g, g + 8][half]
    uint4 x[NT][2][QX ? 1 : 2];   // [token tile][half][first, second 8 values (BF16)]
    float xscale[NT][QX ? 2 : 1];  // QX: [token tile][C column]
    float wscale[RT];
  };
  const uint4 zero = make_uint4(0, 0, 0, 0);
  auto load = [&](Block& bl, int kb) {
    const int k0 = kb * kBlockK;
    rows.load(bl.w, bl.wscale, kb);
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int u = 0; u < (QX ? 1 : 2); ++u)
          bl.x[j][h][u] = tok[j] ? *reinterpret_cast<const uint4*>(xrow[j] + k0 + 64 * h + 8 * u) : zero;
    if constexpr (QX)
#pragma unroll
      for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int c = 0; c < 2; ++c)
          bl.xscale[j][c] = col_tok[j][c] ? __ldg(xs + (8 * j + 2 * t4 + c) * xs_t + int64_t(kb) * xs_g) : 0.f;
  };

  float acc[RT][NT][4] = {};
  Block cur;
  if (kb_begin + wk < kb_end) load(cur, kb_begin + wk);
  for (int kb = kb_begin + wk; kb < kb_end; kb += WK) {
    Block next;
    if (kb + WK < kb_end) load(next, kb + WK);

    // The tokens' group of 128: amax over the four lanes of a token, scale, e4m3 codes (or, QX,
    // the codes and scales as loaded).
    uint4 xq[NT][2];  // [token tile][half]
    float col_scale[NT][2];  // the scales of this thread's C columns: tokens 2 t4 and 2 t4 + 1
    if constexpr (QX) {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) xq[j][h] = cur.x[j][h][0];
        col_scale[j][0] = cur.xscale[j][0], col_scale[j][1] = cur.xscale[j][1];
      }
    } else {
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float amax = 0.f;
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int u = 0; u < 2; ++u) {
            const uint4 v = cur.x[j][h][u];
            amax = abs_max_pair(abs_max_pair(abs_max_pair(abs_max_pair(amax, v.x), v.y), v.z), v.w);
          }
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
        const float s = fmaxf(amax, kFp8MinAmax) / kE4m3Max, r = __frcp_rn(s);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const uint4 lo = cur.x[j][h][0], hi = cur.x[j][h][1];  // the first and second 8 values
          xq[j][h] = make_uint4(quantize_pair(lo.x, s, r) | (quantize_pair(lo.y, s, r) << 16),
                                quantize_pair(lo.z, s, r) | (quantize_pair(lo.w, s, r) << 16),
                                quantize_pair(hi.x, s, r) | (quantize_pair(hi.y, s, r) << 16),
                                quantize_pair(hi.z, s, r) | (quantize_pair(hi.w, s, r) << 16));
        }
        col_scale[j][0] = __shfl_sync(0xffffffffu, s, 8 * t4);
        col_scale[j][1] = __shfl_sync(0xffffffffu, s, 8 * t4 + 4);
      }
    }

#pragma unroll
    for (int rt = 0; rt < RT; ++rt)
#pragma unroll
      for (int j = 0; j < NT; ++j) {
        float d[4] = {0.f, 0.f, 0.f, 0.f};
        mma_kblock(d, cur.w[rt], xq[j]);
        // d: rows g (0, 1) and g + 8 (2, 3), tokens 2 t4 (0, 2) and 2 t4 + 1 (1, 3).
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[rt][j][i] += d[i] * (cur.wscale[rt] * col_scale[j][i & 1]);
      }
    cur = next;
  }

  reduce_and_store<RT, NT, WK>(acc, &red[0][0], T, token_tile(), cta_row0(), N, out, ldo, out_f32, out_batch);
}

int64_t token_tiles(int64_t T) { return T <= 8 ? 1 : (T + 15) / 16; }

template <int RT, int NT, int WK, bool QX>
void launch_tiles(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  dim3 grid(unsigned(row_blocks * token_tiles(p.T)), unsigned(splits), unsigned(p.batch));
  launch_pdl_clusters(skinny_fp8_kernel<RT, NT, WK, QX>, grid, dim3(1, splits, 1), kWarps * 32, 0, stream, p.x, p.ldx,
                      p.x_scales, p.xs_t, p.xs_g, static_cast<const uint8_t*>(p.w), p.ldw, p.w_scales, p.ldws, p.out,
                      p.ldo, p.out_f32, int(p.T), int(p.N), int(p.K), p.x_batch, p.w_batch, p.ws_batch, p.out_batch);
}

template <int RT, int WK, bool QX>
void launch_tokens(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  if (p.T <= 8)
    launch_tiles<RT, 1, WK, QX>(p, row_blocks, splits, stream);
  else
    launch_tiles<RT, 2, WK, QX>(p, row_blocks, splits, stream);
}

template <int RT, int WK>
void launch_inputs(const SkinnyFp8Problem& p, int64_t row_blocks, int splits, cudaStream_t stream) {
  if (p.x_scales)
    launch_tokens<RT, WK, true>(p, row_blocks, splits, stream);
  else
    launch_tokens<RT, WK, false>(p, row_blocks, splits, stream);
}

template <int WK>
void launch_rows(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, int64_t row_blocks, cudaStream_t stream) {
  switch (c.row_tiles) {
    case 1: launch_inputs<1, WK>(p, row_blocks, c.splits, stream); break;
    case 2: launch_inputs<2, WK>(p, row_blocks, c.splits, stream); break;
    default: launch_inputs<4, WK>(p, row_blocks, c.splits, stream); break;
  }
}

}  // namespace

std::string to_string(const SkinnyFp8Config& c) {
  return c.depth ? fmt::format("row_tiles={} splits={} k_warps={} depth={}", c.row_tiles, c.splits, c.k_warps, c.depth)
                 : fmt::format("row_tiles={} splits={} k_warps={}", c.row_tiles, c.splits, c.k_warps);
}

bool skinny_gemm_fp8_fits(const SkinnyFp8Problem& p) {
  const bool batches_aligned = p.batch == 1 || (p.x_batch % 8 == 0 && p.w_batch % 16 == 0);
  // 16 bytes of x: 8 BF16 values or 16 e4m3 codes.
  const bool x_ok = p.x_scales ? p.batch == 1 && p.ldx % 16 == 0 : p.ldx % 8 == 0;
  return p.T >= 1 && p.K % kBlockK == 0 && p.N % 16 == 0 && p.N > 0 && p.batch >= 1 && p.batch < 65536 && x_ok &&
         p.ldw % 16 == 0 && aligned16(p.x) && aligned16(p.w) && batches_aligned &&
         p.K < (int64_t(1) << 31) && p.N < (int64_t(1) << 31) && p.T < (int64_t(1) << 31) &&
         (p.N / 16 + 1) * token_tiles(p.T) < (int64_t(1) << 31);
}

bool skinny_gemm_fp8_valid(const SkinnyFp8Config& c, int64_t K) {
  return (c.row_tiles == 1 || c.row_tiles == 2 || c.row_tiles == 4) &&
         (c.k_warps == 1 || c.k_warps == 2 || c.k_warps == 4 || c.k_warps == 8) && c.splits >= 1 &&
         c.splits <= kSkinnyGemmMaxSplits && c.splits <= K / kBlockK &&
         (c.depth == 0 || (c.row_tiles < 4 && c.depth >= 2 && c.depth <= 4) || (c.row_tiles == 4 && c.depth == 2));
}

SkinnyFp8Config skinny_gemm_fp8_default(int64_t N, int64_t K, int64_t T, int64_t batch, int num_sms) {
  const int64_t kblocks = K / kBlockK, tiles = token_tiles(T) * batch;
  SkinnyFp8Config c;
  // Warps on K while each keeps at least two K-blocks to stream; the rest take rows.
  while (c.k_warps > 1 && kblocks < 2 * c.k_warps) c.k_warps /= 2;
  // What tune-fp8-gemm found on an H200 (configs/tuning) for the linears: 64-row warps wherever
  // their CTAs still give three SMs in four a CTA (one wave beats 1.7 waves of 32-row ones), else
  // 32 rows (16 where even those leave SMs idle); then split K while the CTAs fit twice into the
  // SMs and every warp keeps at least a K-block a split.
  c.row_tiles = row_blocks(N, c) * tiles * 4 >= int64_t(num_sms) * 3 ? 4 : 2;
  if (c.row_tiles == 2 && row_blocks(N, c) * tiles < num_sms / 2) c.row_tiles = 1;
  // Fewer rows a CTA while half or more of them would lie past N (the absorbed products: 128 a head).
  while (c.row_tiles > 1 && 16 * c.row_tiles * (kWarps / c.k_warps) >= 2 * N) c.row_tiles /= 2;
  const int64_t blocks = row_blocks(N, c) * tiles;
  while (c.splits < kSkinnyGemmMaxSplits && blocks * c.splits * 2 <= num_sms && kblocks >= 2 * c.splits * c.k_warps)
    c.splits *= 2;
  return c;
}

void launch_skinny_gemm_fp8(const SkinnyFp8Problem& p, const SkinnyFp8Config& c, cudaStream_t stream) {
  MLA_CHECK(skinny_gemm_fp8_fits(p) && skinny_gemm_fp8_valid(c, p.K),
            "skinny FP8 GEMM: T={} N={} K={} batch {} with {} is not a launch it has", p.T, p.N, p.K, p.batch,
            to_string(c));
  const int64_t rb = row_blocks(p.N, c);
  if (c.depth) {
    launch_staged(p, c, rb, stream);
    return;
  }
  switch (c.k_warps) {
    case 1: launch_rows<1>(p, c, rb, stream); break;
    case 2: launch_rows<2>(p, c, rb, stream); break;
    case 4: launch_rows<4>(p, c, rb, stream); break;
    default: launch_rows<8>(p, c, rb, stream); break;
  }
}

}  // namespace mlaserve::cuda
