// Grouped expert GEMM (moe_grouped_gemm.h) on mma.sync m16n8k16 for experts with few rows, BF16 in,
// fp32 accumulation.
//
// Tiles: a block computes 32 rows x 128 columns of one expert (8 warps as 1 x 8 of 32 x 16), K in
// steps of 64 through a 3-stage cp.async ring in the swizzled layout of moe_grouped_tiles.cuh. A
// bigger tile of an expert with a handful of rows would spend its time multiplying zero rows.
//
// Schedule (both kernels): grid.y enumerates row tiles over all experts in order; an expert of n
// rows owns ceil(n / rows a tile) of them. The grid is sized from an upper bound (max_rows / rows
// + experts), and each block finds its expert by a prefix sum of the tile counts in shared memory;
// blocks past the last tile exit at once. Rows of a tile past its expert's end are zero-filled
// and not stored.
#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_grouped_tiles.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/read_once.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

using moe_tiles::kBK;
using moe_tiles::swz;

constexpr int kBM = 32, kBN = 128, kStages = 3;
constexpr int kWarps = 8, kThreads = kWarps * 32;
// Warp w computes all kBM rows x columns [16 w, 16 w + 16): mi m16 tiles by ni n8 tiles.
constexpr int kMi = kBM / 16, kNi = kBN / kWarps / 8, kWarpCols = kBN / kWarps;
constexpr int kAElems = kBM * kBK, kBElems = kBN * kBK;  // one stage's tiles
constexpr size_t kSmemBytes = size_t(kStages) * (kAElems + kBElems) * sizeof(bf16);
static_assert(kNi % 2 == 0, "B fragments load two n8 tiles at once");

// Three blocks an SM (the shared memory of three rings).
__global__ void __launch_bounds__(kThreads, 3) moe_grouped_gemm_kernel(MoeGroupedGemmParams p) {
  pdl_wait_and_trigger();
  extern __shared__ __align__(128) uint8_t smem[];
  int expert, row0, row_end;
  if (!moe_tiles::find_tile<kBM, kThreads>(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end)) return;
  const int n0 = int(blockIdx.x) * kBN;
  const bool hi = p.w_hi != nullptr && n0 >= p.n_split;
  const bf16* w = static_cast<const bf16*>(hi ? p.w_hi[expert] : p.w[expert]);
  const int w_row0 = hi ? n0 - p.n_split : n0;                 // first weight row of this tile
  const int w_rows = hi ? p.N - p.n_split : (p.w_hi ? p.n_split : p.N);
  const bf16* a = static_cast<const bf16*>(p.a);
  const int K = p.K, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  bf16* sa = reinterpret_cast<bf16*>(smem);
  bf16* sb = sa + kStages * kAElems;
  // A stage is kBM * 8 chunks of A and kBN * 8 of B; chunk i = tid + 256 j is row i / 8, chunk i % 8.
  // Each expert's weight rows are read once a launch at these few rows an expert.
  const uint64_t w_policy = evict_first_policy();
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
#pragma unroll
    for (int j = 0; j < kBM * 8 / kThreads; ++j) {
      int i = tid + j * kThreads, r = i / 8, ch = i % 8, k = k0 + ch * 8;
      int ar = row0 + r;
      bool a_ok = k < K && ar < row_end;
      cp_async16(smem_u32(sa + stage * kAElems + swz(r, ch)), a_ok ? a + int64_t(ar) * K + k : a, a_ok);
    }
#pragma unroll
    for (int j = 0; j < kBN * 8 / kThreads; ++j) {
      int i = tid + j * kThreads, r = i / 8, ch = i % 8, k = k0 + ch * 8;
      int wr = w_row0 + r;
      bool b_ok = k < K && wr < w_rows;
      cp_async16(smem_u32(sb + stage * kBElems + swz(r, ch)), b_ok ? w + int64_t(wr) * K + k : w, b_ok, w_policy);
    }
  };

  float acc[kMi][kNi][4] = {};
  const int k_tiles = (K + kBK - 1) / kBK;
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < k_tiles) load_stage(s, s);
    cp_async_commit();
  }
  for (int kt = 0; kt < k_tiles; ++kt) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage kt is in; every warp is done with the stage refilled below
    if (kt + kStages - 1 < k_tiles) load_stage((kt + kStages - 1) % kStages, kt + kStages - 1);
    cp_async_commit();
    const bf16* ta = sa + (kt % kStages) * kAElems;
    const bf16* tb = sb + (kt % kStages) * kBElems;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[kMi][4], bfr[kNi / 2][4];
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi) {
        int r = mi * 16 + (lane & 15);
        ldsm_x4(af[mi], smem_u32(ta + swz(r, 2 * kk + (lane >> 4))));
      }
#pragma unroll
      for (int nj = 0; nj < kNi / 2; ++nj) {  // ldmatrix.x4: two n8 tiles x k16 each
        int r = warp * kWarpCols + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldsm_x4(bfr[nj], smem_u32(tb + swz(r, 2 * kk + ((lane >> 3) & 1))));
      }
#pragma unroll
      for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
        for (int ni = 0; ni < kNi; ++ni)
          mma_bf16(acc[mi][ni], af[mi], bfr[ni / 2][(ni % 2) * 2], bfr[ni / 2][(ni % 2) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  // acc[mi][ni]: rows g and g + 8 of the m16 tile, columns 2 t4 and 2 t4 + 1 of the n8 tile.
  bf16* c = static_cast<bf16*>(p.c);
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mi = 0; mi < kMi; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = row0 + mi * 16 + g + 8 * h;
      if (r >= row_end) continue;
#pragma unroll
      for (int ni = 0; ni < kNi; ++ni) {
        int col = n0 + warp * kWarpCols + ni * 8 + 2 * t4;
        if (col >= p.N) continue;
        bf16* dst = c + int64_t(r) * p.ldc + col;
        float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
        if (col + 1 < p.N)
          *reinterpret_cast<uint32_t*>(dst) = pack_bf16(v0, v1);
        else
          *dst = __float2bfloat16(v0);
      }
    }
}

void launch_narrow(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(
        cudaFuncSetAttribute(moe_grouped_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    configured = true;
  }
  dim3 grid(unsigned((p.N + kBN - 1) / kBN), unsigned(moe_tiles::max_row_tiles(p.max_rows, p.num_experts, kBM)));
  launch_pdl(moe_grouped_gemm_kernel, grid, kThreads, kSmemBytes, stream, p);
}

}  // namespace

bool moe_grouped_gemm_wide(int32_t max_rows, int32_t num_experts) { return max_rows >= 48 * num_experts; }

bool moe_grouped_gemm_fits(const MoeGroupedGemmParams& p) {
  bool tiles_ok = !moe_grouped_gemm_wide(p.max_rows, p.num_experts)
                      ? !p.silu_and_mul && (p.w_hi == nullptr || p.n_split % kBN == 0) && p.a_rows == nullptr &&
                            (p.lda == 0 || p.lda == p.K)
                      : (p.w_hi != nullptr) == p.silu_and_mul && p.lda % 8 == 0 && p.a_rows_div > 0;
  return p.K % 8 == 0 && p.ldc % 2 == 0 && p.num_experts > 0 && p.num_experts <= kMoeGroupedMaxExperts &&
         aligned16(p.a) && reinterpret_cast<uintptr_t>(p.c) % 4 == 0 && tiles_ok;
}

void launch_moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  MLA_CHECK(moe_grouped_gemm_fits(p),
            "moe grouped GEMM: K={} lda={} ldc={} E={} n_split={} silu_and_mul={} outside its limits", p.K, p.lda,
            p.ldc, p.num_experts, p.n_split, p.silu_and_mul);
  if (p.max_rows <= 0 || p.N <= 0) return;
  if (moe_grouped_gemm_wide(p.max_rows, p.num_experts)) {
    MoeGroupedGemmParams q = p;
    if (q.lda == 0) q.lda = q.K;
    launch_moe_grouped_gemm_wgmma(q, stream);
  } else {
    launch_narrow(p, stream);
  }
}

}  // namespace mlaserve::cuda
