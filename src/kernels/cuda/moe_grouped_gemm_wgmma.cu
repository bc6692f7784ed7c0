// Grouped expert GEMM (moe_grouped_gemm.h) on Hopper warpgroup MMA, for experts with many rows
// (prefill): a block computes 128 rows of one expert against 256 weight rows, K in slices of 64
// through a 4-stage ring in the 128-byte swizzle layout wgmma reads. The block is warp-specialized:
// a loader warpgroup fills the ring with cp.async (each slot has a `full` mbarrier its copies
// complete and an `empty` one the MMA warpgroups arrive on), and two MMA warpgroups each multiply
// 64 of the rows by the 256 weight rows with m64n256k16, keeping one slice's MMAs in flight.
// Nothing waits on a block-wide barrier, and the loader runs two slices ahead of the MMAs. The
// loader keeps few registers and gives the rest to the MMA warpgroups.
//
// The 256 weight rows of a tile are weight rows n0 .. n0 + 255 for a plain product (w_hi unused),
// or, with the silu-and-mul epilogue, 128 gate rows and the same 128 up rows: each thread then
// holds gate and up of the same output column in its accumulators and writes silu(gate) * up.
// With a_rows the tile's rows are read from the tokens in place, so the gather copy is skipped.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mbarrier.cuh"
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

constexpr int kBM = 128, kBN = 256, kStages = 4, kThreads = 384;  // loader + 2 MMA warpgroups
constexpr int kLoaderRegs = 88, kMmaRegs = 208;  // setmaxnreg split, loader / MMA warpgroups
static_assert(wgmma::regs_split_fits(2, kLoaderRegs, kMmaRegs), "MMA registers over the loader's");
constexpr int kAElems = kBM * kBK, kBElems = kBN * kBK, kAcc = kBN / 2;
constexpr size_t kRingBytes = size_t(kStages) * (kAElems + kBElems) * sizeof(bf16);
constexpr size_t kSmemBytes = kRingBytes + 2 * kStages * 8 + 1024;  // + full and empty barriers, alignment slack

// Output columns a block writes.
__host__ __device__ constexpr int out_cols(bool silu_and_mul) { return silu_and_mul ? kBN / 2 : kBN; }

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// One block an SM: 4 stages of 48 KB. (128-wide tiles at two blocks an SM, which overlap one's
// epilogue with the other's loop, ran 13-17% slower at V2-Lite's 4096-token prefill; a persistent
// form, each block walking tiles b, b + grid, ..., ran 19% slower.)
template <bool kSiluAndMul>
__global__ void __launch_bounds__(kThreads, 1) moe_grouped_gemm_wgmma_kernel(MoeGroupedGemmParams p) {
  pdl_wait_and_trigger();
  int expert, row0, row_end;
  if (!moe_tiles::find_tile<kBM, kThreads>(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end)) return;
  extern __shared__ uint8_t smem_raw[];
  // The swizzle atoms must be 1024-aligned; find_tile's static shared memory comes first.
  bf16* sa = reinterpret_cast<bf16*>(mma::align_smem_1024(smem_raw));
  bf16* sb = sa + kStages * kAElems;
  const uint32_t full = mma::smem_u32(sa) + uint32_t(kRingBytes), empty = full + 8 * kStages;  // slot s at + 8 s
  const int tid = threadIdx.x;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar::init(full + 8 * s, 128);
      mbar::init(empty + 8 * s, 256);
    }
  }
  __syncthreads();

  const int n0 = int(blockIdx.x) * out_cols(kSiluAndMul);
  const int K = p.K, k_tiles = (K + kBK - 1) / kBK;
  if (tid < 128) {  // loader: chunk tid % 8 of rows tid / 8 + 16 j of both tiles
    wgmma::regs_dec<kLoaderRegs>();
    const bf16* a = static_cast<const bf16*>(p.a);
    const int chunk = tid % 8, rr = tid / 8;
    constexpr int kALoads = kBM / 16, kBLoads = kBN / 16;
    const bf16* w_lo = static_cast<const bf16*>(p.w[expert]);
    const bf16* w_hi = p.w_hi ? static_cast<const bf16*>(p.w_hi[expert]) : w_lo;
    int a_row[kALoads];  // source rows of tile rows rr + 16 j, -1 past the expert's rows
#pragma unroll
    for (int j = 0; j < kALoads; ++j) {
      const int r = row0 + rr + 16 * j;
      a_row[j] = r >= row_end ? -1 : p.a_rows ? p.a_rows[r] / p.a_rows_div : r;
    }
    for (int kt = 0; kt < k_tiles; ++kt) {
      const int s = kt % kStages;
      if (kt >= kStages) mbar::wait(empty + 8 * s, ((kt / kStages) + 1) & 1);  // the slot's previous use
      const int k = kt * kBK + chunk * 8;
      const bool k_ok = k < K;
      const uint32_t ta = mma::smem_u32(sa + s * kAElems + moe_tiles::swz(rr, chunk));
      const uint32_t tb = mma::smem_u32(sb + s * kBElems + moe_tiles::swz(rr, chunk));
#pragma unroll
      for (int j = 0; j < kALoads; ++j) {  // row rr + 16 j keeps rr's swizzle
        const bool ok = k_ok && a_row[j] >= 0;
        mma::cp_async16(ta + j * 16 * kBK * 2, ok ? a + int64_t(a_row[j]) * p.lda + k : a, ok);
      }
#pragma unroll
      for (int j = 0; j < kBLoads; ++j) {
        // silu-and-mul: gate rows (w_lo), then up rows (w_hi), of output columns n0 ..
        const bool hi = kSiluAndMul && j >= kBLoads / 2;
        const int n = n0 + rr + 16 * (hi ? j - kBLoads / 2 : j);
        const bool ok = k_ok && n < p.N;
        mma::cp_async16(tb + j * 16 * kBK * 2, ok ? (hi ? w_hi : w_lo) + int64_t(n) * K + k : w_lo, ok);
      }
      mbar::arrive_on_copies(full + 8 * s);
    }
    mma::cp_async_wait<0>();
    return;
  }

  wgmma::regs_inc<kMmaRegs>();
  const int wg = tid / 128 - 1;  // MMA warpgroup: rows 64 wg .. 64 wg + 63 of the tile
  const int lane = tid % 32, warp = (tid / 32) % 4;
  float acc[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  // One slice's MMAs stay in flight while the next slice is waited for and issued; a slot goes
  // back to the loader once the MMAs that read it are done.
  for (int kt = 0; kt < k_tiles; ++kt) {
    const int s = kt % kStages;
    mbar::wait(full + 8 * s, (kt / kStages) & 1);
    wgmma::fence_async_smem();  // the copies landed through the generic proxy; wgmma reads through the async one
    const uint32_t ta = mma::smem_u32(sa + s * kAElems + wg * 64 * kBK);
    const uint32_t tb = mma::smem_u32(sb + s * kBElems);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk)
      wgmma::mma_m64n256k16_ss<0>(acc, wgmma::desc_sw128(ta + kk * 32, 16, 1024),
                                  wgmma::desc_sw128(tb + kk * 32, 16, 1024), true);
    wgmma::commit();
    wgmma::wait<1>();
    wgmma::fence_operand(acc);
    if (kt > 0) mbar::arrive(empty + 8 * ((kt - 1) % kStages));
  }
  wgmma::wait<0>();
  wgmma::fence_operand(acc);

  // acc[4j + e]: row 16 (warp % 4) + lane / 4 (+ 8 for e >= 2) of this warpgroup's 64, column
  // 8j + 2 (lane % 4) + e % 2 of the kBN.
  bf16* c = static_cast<bf16*>(p.c);
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
