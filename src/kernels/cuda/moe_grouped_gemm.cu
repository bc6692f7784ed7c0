// Grouped expert GEMM (moe_grouped_gemm.h) on mma.sync m16n8k16, BF16 in, fp32 accumulation.
//
// Tiles: a block computes 128 rows x 128 columns of one expert, 8 warps as 2 (rows) x 4 (columns)
// of 64 x 32 each, K in steps of 64 through a 3-stage cp.async ring. Shared tiles are row-major
// 128-byte rows with 16-byte chunks XOR-swizzled by (row & 7), so every ldmatrix phase touches 8
// distinct bank groups.
//
// Schedule: grid.y enumerates row tiles over all experts in order; an expert of n rows owns
// ceil(n / 128) of them. The grid is sized from an upper bound (max_rows / 128 + experts), and
// each block finds its expert by a prefix sum of the tile counts in shared memory; blocks past the
// last tile exit at once. Rows of a tile past its expert's end are zero-filled and not stored.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;
using namespace mma;

constexpr int kBM = 128, kBN = 128, kBK = 64, kStages = 3;  // 96 KB of shared memory a block
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kMaxExperts = 256;
constexpr int kTileElems = kBM * kBK;  // one operand's tile per stage (kBM == kBN)
constexpr size_t kSmemBytes = size_t(kStages) * 2 * kTileElems * sizeof(bf16);

// Element offset of 16-byte chunk `chunk` of row `row` in a swizzled [rows, 64] tile.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 3); }

// The expert and first row of row tile `tile`, from the tile counts' prefix sum (thread-parallel
// over experts, a warp-shuffle scan per warp, then the warp totals).
__device__ bool find_tile(const int32_t* offsets, int E, int tile, int& expert, int& row0, int& row_end) {
  __shared__ int s_warp[kWarps];
  __shared__ int s_hit[3];
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  if (tid == 0) s_hit[0] = -1;
  int begin = 0, end = 0, n_tiles = 0;
  if (tid < E) {
    begin = offsets[tid];
    end = offsets[tid + 1];
    n_tiles = (end - begin + kBM - 1) / kBM;
  }
  int incl = n_tiles;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    int v = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += v;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int w = 0; w < warp; ++w) before += s_warp[w];
  int first = before + incl - n_tiles;  // this expert's first tile
  if (tid < E && tile >= first && tile < first + n_tiles) {
    s_hit[0] = tid;
    s_hit[1] = begin + (tile - first) * kBM;
    s_hit[2] = end;
  }
  __syncthreads();
  expert = s_hit[0];
  row0 = s_hit[1];
  row_end = s_hit[2];
  return expert >= 0;
}

// Two blocks an SM: ptxas fits the 64 accumulators and fragments in 128 registers without spills.
__global__ void __launch_bounds__(kThreads, 2) moe_grouped_gemm_kernel(MoeGroupedGemmParams p) {
  extern __shared__ __align__(128) uint8_t smem[];
  int expert, row0, row_end;
  if (!find_tile(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end)) return;
  const int n0 = int(blockIdx.x) * kBN;
  const bool hi = p.w_hi != nullptr && n0 >= p.n_split;
  const bf16* w = static_cast<const bf16*>(hi ? p.w_hi[expert] : p.w[expert]);
  const int w_row0 = hi ? n0 - p.n_split : n0;                 // first weight row of this tile
  const int w_rows = hi ? p.N - p.n_split : (p.w_hi ? p.n_split : p.N);
  const bf16* a = static_cast<const bf16*>(p.a);
  const int K = p.K, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int wm = warp / 4, wn = warp % 4;  // warp tile: rows wm * 64, columns wn * 32

  bf16* sa = reinterpret_cast<bf16*>(smem);
  bf16* sb = sa + kStages * kTileElems;
  // Each thread copies 4 chunks of A and 4 of B a stage: chunk i = tid + 256 j is row i / 8, chunk i % 8.
  auto load_stage = [&](int stage, int kt) {
    const int k0 = kt * kBK;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      int i = tid + j * kThreads, r = i / 8, ch = i % 8, k = k0 + ch * 8;
      bool kin = k < K;
      int ar = row0 + r;
      bool a_ok = kin && ar < row_end;
      cp_async16(smem_u32(sa + stage * kTileElems + swz(r, ch)), a_ok ? a + int64_t(ar) * K + k : a, a_ok);
      int wr = w_row0 + r;
      bool b_ok = kin && wr < w_rows;
      cp_async16(smem_u32(sb + stage * kTileElems + swz(r, ch)), b_ok ? w + int64_t(wr) * K + k : w, b_ok);
    }
  };

  float acc[4][4][4] = {};
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
    const bf16* ta = sa + (kt % kStages) * kTileElems;
    const bf16* tb = sb + (kt % kStages) * kTileElems;
#pragma unroll
    for (int kk = 0; kk < kBK / 16; ++kk) {
      uint32_t af[4][4], bfr[2][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        int r = wm * 64 + mi * 16 + (lane & 15);
        ldsm_x4(af[mi], smem_u32(ta + swz(r, 2 * kk + (lane >> 4))));
      }
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {  // two ldmatrix.x4, each two n8 tiles x k16
        int r = wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
        ldsm_x4(bfr[nj], smem_u32(tb + swz(r, 2 * kk + ((lane >> 3) & 1))));
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
          mma_bf16(acc[mi][ni], af[mi], bfr[ni / 2][(ni % 2) * 2], bfr[ni / 2][(ni % 2) * 2 + 1]);
    }
  }
  cp_async_wait<0>();

  // acc[mi][ni]: rows g and g + 8 of the m16 tile, columns 2 t4 and 2 t4 + 1 of the n8 tile.
  bf16* c = static_cast<bf16*>(p.c);
  const int g = lane / 4, t4 = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int r = row0 + wm * 64 + mi * 16 + g + 8 * h;
      if (r >= row_end) continue;
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
        int col = n0 + wn * 32 + ni * 8 + 2 * t4;
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

}  // namespace

bool moe_grouped_gemm_fits(const MoeGroupedGemmParams& p) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return p.K % 8 == 0 && p.ldc % 2 == 0 && p.num_experts > 0 && p.num_experts <= kMaxExperts && aligned(p.a) &&
         reinterpret_cast<uintptr_t>(p.c) % 4 == 0 && (p.w_hi == nullptr || p.n_split % kBN == 0);
}

void launch_moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream) {
  MLA_CHECK(moe_grouped_gemm_fits(p), "moe grouped GEMM: K={} ldc={} E={} n_split={} outside its limits", p.K,
            p.ldc, p.num_experts, p.n_split);
  if (p.max_rows <= 0 || p.N <= 0) return;
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(moe_grouped_gemm_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kSmemBytes)));
    configured = true;
  }
  // Row tiles: at most max_rows / 128 full ones plus one partial per expert.
  int64_t row_tiles = (int64_t(p.max_rows) + kBM - 1) / kBM + std::min<int64_t>(p.num_experts, p.max_rows);
  dim3 grid(unsigned((p.N + kBN - 1) / kBN), unsigned(row_tiles));
  moe_grouped_gemm_kernel<<<grid, kThreads, kSmemBytes, stream>>>(p);
  CUDA_CHECK_LAUNCH();
}

}  // namespace mlaserve::cuda
