// Grouped expert GEMM (moe_grouped_gemm.h) on Hopper warpgroup MMA, for experts with many rows
// (prefill): a block computes 128 rows of one expert against 256 weight rows, K in slices of 64
// through a 4-stage cp.async ring that all 256 threads fill. Each of the two warpgroups multiplies
// its 64 rows by the 256 weight rows with m64n256k16 from shared memory (128-byte swizzle, as the
// ring stores them), and keeps one slice's MMAs in flight while the next slices load.
//
// The 256 weight rows of a tile are weight rows n0 .. n0 + 255 for a plain product (w_hi unused),
// or, with the silu-and-mul epilogue, 128 gate rows and the same 128 up rows: each thread then
// holds gate and up of the same output column in its accumulators and writes silu(gate) * up.
// With a_rows the tile's rows are read from the tokens in place, so the gather copy is skipped.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_grouped_tiles.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using moe_tiles::kBK;
using moe_tiles::swz;

constexpr int kBM = 128, kBN = 256, kStages = 4, kThreads = 256;
constexpr int kAElems = kBM * kBK, kBElems = kBN * kBK, kAcc = kBN / 2;
constexpr size_t kSmemBytes = size_t(kStages) * (kAElems + kBElems) * sizeof(bf16) + 1024;  // + alignment slack

// Output columns a block writes.
__host__ __device__ constexpr int out_cols(bool silu_and_mul) { return silu_and_mul ? kBN / 2 : kBN; }

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// One block an SM: 4 stages of 48 KB. (128-wide tiles at two blocks an SM, which overlap one's
// epilogue with the other's loop, ran 13-17% slower at V2-Lite's 4096-token prefill.)
template <bool kSiluAndMul>
__global__ void __launch_bounds__(kThreads, 1) moe_grouped_gemm_wgmma_kernel(MoeGroupedGemmParams p) {
  pdl_wait_and_trigger();
  int expert, row0, row_end;
  if (!moe_tiles::find_tile<kBM, kThreads>(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end)) return;
  extern __shared__ uint8_t smem_raw[];
  // The swizzle atoms must be 1024-aligned; find_tile's static shared memory comes first.
  bf16* sa = reinterpret_cast<bf16*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  bf16* sb = sa + kStages * kAElems;

  const int n0 = int(blockIdx.x) * out_cols(kSiluAndMul);
  const bf16* a = static_cast<const bf16*>(p.a);
  const bf16* w_lo = static_cast<const bf16*>(p.w[expert]);
  const bf16* w_hi = p.w_hi ? static_cast<const bf16*>(p.w_hi[expert]) : nullptr;
  const int K = p.K, tid = threadIdx.x, wg = tid / 128;

  // This thread's rows in the tile: row tid / 8 + 32 j, chunk tid % 8. Their sources are fixed for
  // the whole K loop, so they are resolved once.
  constexpr int kBLoads = kBN * 8 / kThreads, kALoads = kBM * 8 / kThreads;
  const int chunk = tid % 8;
  const bf16* b_src[kBLoads];
#pragma unroll
  for (int j = 0; j < kBLoads; ++j) {
    const int r = tid / 8 + 32 * j;
    // silu-and-mul: gate rows, then up rows, of output columns n0 ..
    const int n = n0 + (kSiluAndMul ? r % (kBN / 2) : r);
    const bf16* w = kSiluAndMul && r >= kBN / 2 ? w_hi : w_lo;
    b_src[j] = n < p.N ? w + int64_t(n) * K + chunk * 8 : nullptr;
  }
  const bf16* a_src[kALoads];
#pragma unroll
  for (int j = 0; j < kALoads; ++j) {
    const int r = row0 + tid / 8 + 32 * j;
    const int64_t src_row = p.a_rows ? int64_t(p.a_rows[min(r, row_end - 1)] / p.a_rows_div) : int64_t(r);
    a_src[j] = r < row_end ? a + src_row * p.lda + chunk * 8 : nullptr;
  }
  auto load_stage = [&](int stage, int kt) {
    const bool k_ok = kt * kBK + chunk * 8 < K;
#pragma unroll
    for (int j = 0; j < kALoads; ++j) {
      bool ok = k_ok && a_src[j];
      mma::cp_async16(mma::smem_u32(sa + stage * kAElems + swz(tid / 8 + 32 * j, chunk)),
                      ok ? a_src[j] + kt * kBK : a, ok);
    }
#pragma unroll
    for (int j = 0; j < kBLoads; ++j) {
      bool ok = k_ok && b_src[j];
      mma::cp_async16(mma::smem_u32(sb + stage * kBElems + swz(tid / 8 + 32 * j, chunk)),
                      ok ? b_src[j] + kt * kBK : w_lo, ok);
    }
  };

  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  const int k_tiles = (K + kBK - 1) / kBK;
  // Ring: slice kt is in slot kt % kStages. The kStages - 2 slices after kt are loading while kt is
  // multiplied and kt - 1's MMAs may still run, so the slot refilled at step kt is kt - 2's.
#pragma unroll
  for (int s = 0; s < kStages - 2; ++s) {
    if (s < k_tiles) load_stage(s, s);
    mma::cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    mma::cp_async_wait<kStages - 3>();
    wgmma::fence_async_smem();
    __syncthreads();  // slice kt is in for all threads; both warpgroups are done with slice kt - 2
    if (kt + kStages - 2 < k_tiles) load_stage((kt + kStages - 2) % kStages, kt + kStages - 2);
    mma::cp_async_commit();
    const uint32_t ta = mma::smem_u32(sa + (kt % kStages) * kAElems + wg * 64 * kBK);
    const uint32_t tb = mma::smem_u32(sb + (kt % kStages) * kBElems);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma::mma_m64n256k16_ss<0>(acc, wgmma::desc_sw128(ta + kk * 32, 16, 1024),
                                  wgmma::desc_sw128(tb + kk * 32, 16, 1024), true);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(acc);
  }
  wgmma::wait<0>();
  wgmma::fence_operand(acc);
  mma::cp_async_wait<0>();

  // acc[4j + e]: row 16 (warp % 4) + lane / 4 (+ 8 for e >= 2) of this warpgroup's 64, column
  // 8j + 2 (lane % 4) + e % 2 of the kBN.
  bf16* c = static_cast<bf16*>(p.c);
  const int lane = tid % 32, warp = (tid / 32) % 4;
  constexpr int kUp = kBN / 16;  // silu-and-mul: up of column group j is group j + kUp
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = row0 + wg * 64 + warp * 16 + lane / 4 + 8 * h;
    if (r >= row_end) continue;
    bf16* row = c + int64_t(r) * p.ldc;
#pragma unroll
    for (int j = 0; j < out_cols(kSiluAndMul) / 8; ++j) {
      const int col = n0 + 8 * j + 2 * (lane % 4);
      if (col >= p.N) continue;
      float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
      if (kSiluAndMul) {  // as silu_and_mul on the BF16 products
        float g0 = round_bf16(v0), g1 = round_bf16(v1);
        float u0 = round_bf16(acc[4 * (j + kUp) + 2 * h]), u1 = round_bf16(acc[4 * (j + kUp) + 2 * h + 1]);
        v0 = g0 / (1.0f + __expf(-g0)) * u0;
        v1 = g1 / (1.0f + __expf(-g1)) * u1;
      }
      if (col + 1 < p.N)
        *reinterpret_cast<uint32_t*>(row + col) = mma::pack_bf16(v0, v1);
      else
        row[col] = __float2bfloat16(v0);
    }
  }
}

template <bool kSiluAndMul>
void launch(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(moe_grouped_gemm_wgmma_kernel<kSiluAndMul>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    configured = true;
  }
  const int cols = out_cols(kSiluAndMul);
  dim3 grid(unsigned((p.N + cols - 1) / cols), unsigned(moe_tiles::max_row_tiles(p.max_rows, p.num_experts, kBM)));
  launch_pdl(moe_grouped_gemm_wgmma_kernel<kSiluAndMul>, grid, kThreads, kSmemBytes, stream, p);
}

}  // namespace

void launch_moe_grouped_gemm_wgmma(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  if (p.silu_and_mul)
    launch<true>(p, stream);
  else
    launch<false>(p, stream);
}

}  // namespace mlaserve::cuda
