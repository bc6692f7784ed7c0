// FP8 grouped expert GEMM (moe_grouped_gemm_fp8.h) on Hopper warpgroup MMA, e4m3 in, fp32 out.
//
// The product runs transposed, C^T = W_e · A^T: a block's 128 weight rows (one weight block, so one
// weight scale a K-block) are wgmma's M, 64 for each of its two warpgroups, and the tile's kRows
// activation rows (16 to 128) are its N. Decode batches give an expert a row or two: a 16-row N
// keeps the tensor core's work and the shared memory per stage small, where mma.sync's 32-row M
// (moe_grouped_gemm_fp8.cu) computed mostly empty rows and was bound by its instruction issue. Both
// operands are K-major, as FP8 wgmma requires, and a 128-wide K-block is exactly one 128-byte
// swizzle row, the layout the descriptors read.
//
// A stage is one K-block: the weight tile, the activation tile and their scales, loaded by
// cp.async into a ring. Each K-block's four k32 MMAs start from zero; the warpgroup waits for them
// and adds the sum to the fp32 accumulators times a_scale[row] * w_scale, so the tensor cores never
// sum across blocks (their accumulator keeps fewer bits than fp32). Column tiles run in turn and K
// ranges split over grid.z exactly as in the mma.sync kernel.
#include <algorithm>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/cuda/moe_grouped_tiles.cuh"
#include "kernels/cuda/pdl.cuh"
#include "kernels/cuda/wgmma.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kBN = moe_tiles::Fp8BlockSpan::kTileN, kBK = moe_tiles::Fp8BlockSpan::kBlockK;  // e4m3: bytes
constexpr int kThreads = 256;

template <int kRows, bool kF32Out>
struct Tile {
  static constexpr int kWBytes = kBN * kBK, kABytes = kRows * kBK, kStageBytes = kWBytes + kABytes;
  // Up to 32 rows two blocks share an SM (a block's epilogue and ring fill overlap the other's
  // stream); larger tiles take one block an SM and a deeper ring.
  static constexpr int kBlocksPerSm = kRows <= 32 ? 2 : 1;
  static constexpr int kStages = (kBlocksPerSm == 2 ? 100 * 1024 : 192 * 1024) / kStageBytes;
  static constexpr int kScales = kRows + 4;  // a stage's activation scales, then the weight scale
  // BF16 tiles of 32 and 64 rows leave through shared memory, 16 bytes a store (the fragments hold
  // 2-byte pieces of 4 rows a warp): down at 512 tokens, 1.2% faster on H200. 16-row tiles lost
  // 0.6% at 128 tokens to the extra barrier; 128-row ones do not fit beside the ring.
  static constexpr bool kStaged = !kF32Out && (kRows == 32 || kRows == 64);
  static constexpr int kCBytes = kStaged ? kRows * kBN * 2 : 0;
  static constexpr size_t kSmemBytes =
      size_t(kStages) * (kStageBytes + kScales * 4) + kCBytes + 1024;  // + alignment
  static_assert(kBlocksPerSm * (kSmemBytes + 1024) <= 228 * 1024, "the blocks an SM fit its shared memory");
  static_assert(kStages * kScales * 4 % 16 == 0, "the staged tile after the scales is 16-byte aligned");
  static constexpr int kALoads = (kRows * 8 + kThreads - 1) / kThreads;  // 16-byte chunks a thread
  static_assert(kStageBytes % 1024 == 0 && kStages >= 4, "swizzle atoms stay 1024-aligned; a ring of 4 or more");
};

// Byte offset of 16-byte chunk `chunk` of row `row` in a tile of 128-byte rows, 128-byte swizzle.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kBK + ((chunk ^ (row & 7)) << 4); }
// Element offset of column `col` of row `row` in a staged BF16 tile of 128 columns (16 chunks of
// 8 a row): chunks XOR the row, so the 4 rows a warp's fragment store touches hit distinct banks.
__device__ __forceinline__ int staged_at(int row, int col) {
  return row * kBN + ((((col >> 3) ^ (row & 7)) << 3) | (col & 7));
}

template <int kRows, bool kF32Out>
__global__ void __launch_bounds__(kThreads, Tile<kRows, kF32Out>::kBlocksPerSm)
    moe_fp8_wgmma_kernel(MoeFp8GemmParams p) {
  using T = Tile<kRows, kF32Out>;
  pdl_wait_and_trigger();
  int expert, row0, row_end;
  if (!moe_tiles::find_tile<kRows, kThreads>(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end))
    return;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = mma::align_smem_1024(smem_raw);
  float* scale_ring = reinterpret_cast<float*>(smem + T::kStages * T::kStageBytes);

  const moe_tiles::Fp8BlockSpan span(p, expert);
  const int kb_begin = span.kb_begin, kb_end = span.kb_end, k_tiles = span.k_tiles, steps = span.steps;
  const int n_tile_first = span.n_tile_first;
  const uint8_t* a = static_cast<const uint8_t*>(p.a);
  const int tid = threadIdx.x, chunk = tid % 8;

  auto source_row = [&](int r) -> int64_t {
    const int ar = row0 + r;
    if (ar >= row_end) return -1;
    return p.a_rows ? p.a_rows[ar] / p.a_rows_div : ar;
  };
  // Activation chunks of this thread: chunk tid % 8 of rows tid / 8 + 32 j (rows past the tile's
  // end load zeros; their columns of the product are never stored).
  const uint8_t* a_src[T::kALoads];
#pragma unroll
  for (int j = 0; j < T::kALoads; ++j) {
    const int r = tid / 8 + 32 * j;
    const int64_t src = r < kRows ? source_row(r) : -1;
    a_src[j] = src >= 0 ? a + src * p.lda + chunk * 16 : nullptr;
  }
  const int64_t s_src = tid < kRows ? source_row(tid) : -1;
  const float* as_ptr = s_src >= 0 ? p.a_scale + s_src * p.ld_a_scale : p.a_scale;

  int load_nt = n_tile_first, load_kb = kb_begin;  // the next stage's column tile and K-block
  const int w_off = (tid / 8) * span.row_stride + chunk * 16, w_rows32 = 32 * span.row_stride;
  auto load_next = [&](int stage) {
    uint8_t* st = smem + stage * T::kStageBytes;
    const int kb = load_kb, k0 = kb * kBK;
    const moe_tiles::Fp8BlockSpan::Tile t = span.tile(p, load_nt * kBN);
    const uint8_t* w = t.w + (kb * span.kb_stride + w_off);
#pragma unroll
    for (int j = 0; j < kBN * 8 / kThreads; ++j)  // every weight row of the tile exists (N % 128 == 0)
      mma::cp_async16(mma::smem_u32(st + swz(tid / 8 + 32 * j, chunk)), w + j * w_rows32, true);
#pragma unroll
    for (int j = 0; j < T::kALoads; ++j) {
      const int r = tid / 8 + 32 * j;
      if (r < kRows)
        mma::cp_async16(mma::smem_u32(st + T::kWBytes + swz(r, chunk)), a_src[j] ? a_src[j] + k0 : a,
                        a_src[j] != nullptr);
    }
    float* sc = scale_ring + stage * T::kScales;
    if (tid < kRows)
      mma::cp_async4(mma::smem_u32(sc + tid), as_ptr + (s_src >= 0 ? kb : 0), s_src >= 0);
    if (tid == kThreads - 1)
      mma::cp_async4(mma::smem_u32(sc + kRows), t.scale + kb, true);
    if (++load_kb == kb_end) load_kb = kb_begin, ++load_nt;
  };
  static_assert(kRows < kThreads, "the last thread loads the weight scale");

  // acc[4j + e], of warp w of warpgroup wg: weight row (output column) 64 wg + 16 w + lane / 4
  // (+ 8 for e >= 2), activation row (output row) 8 j + 2 (lane % 4) + e % 2 of the tile.
  constexpr int kAcc = kRows / 2;
  float acc[kAcc], part[kAcc];
#pragma unroll
  for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
  const int lane = tid % 32, wg = tid / 128, warp = (tid / 32) % 4;
  __nv_bfloat16* staged = reinterpret_cast<__nv_bfloat16*>(scale_ring + T::kStages * T::kScales);
  auto store_tile = [&](int n0) {
    if constexpr (T::kStaged) {
      // Into shared memory (the previous tile's reads of it ended before this step's barrier), then
      // out in 16-byte rows' pieces.
#pragma unroll
      for (int j = 0; j < kRows / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          staged[staged_at(8 * j + 2 * (lane % 4) + (e & 1), wg * 64 + warp * 16 + lane / 4 + 8 * (e >> 1))] =
              __float2bfloat16(acc[4 * j + e]);
      __syncthreads();
#pragma unroll
      for (int i = tid; i < kRows * kBN / 8; i += kThreads) {
        const int rt = i / (kBN / 8), chunk = i % (kBN / 8), r = row0 + rt;
        if (r < row_end)
          *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.c) + int64_t(r) * p.ldc + n0 + chunk * 8) =
              *reinterpret_cast<const uint4*>(staged + staged_at(rt, chunk * 8));
      }
      return;
    }
    const int col = n0 + wg * 64 + warp * 16 + lane / 4;
#pragma unroll
    for (int j = 0; j < kRows / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = row0 + 8 * j + 2 * (lane % 4) + (e & 1);
        if (r >= row_end) continue;
        const int64_t at = int64_t(r) * p.ldc + col + 8 * (e >> 1);
        if constexpr (kF32Out)
          static_cast<float*>(p.c)[int64_t(blockIdx.z) * p.split_stride + at] = acc[4 * j + e];
        else
          static_cast<__nv_bfloat16*>(p.c)[at] = __float2bfloat16(acc[4 * j + e]);
      }
  };

#pragma unroll
  for (int s = 0; s < T::kStages - 1; ++s) {
    if (s < steps) load_next(s);
    mma::cp_async_commit();
  }
  int tile_kb = 0, tile_nt = n_tile_first;  // K-blocks summed so far into acc, and its column tile
  for (int step = 0; step < steps; ++step) {
    mma::cp_async_wait<T::kStages - 2>();
    wgmma::fence_async_smem();
    __syncthreads();  // stage `step` is in for all threads; every MMA of step - 1 is done (waited below)
    if (step + T::kStages - 1 < steps) load_next((step + T::kStages - 1) % T::kStages);
    mma::cp_async_commit();
    const int stage = step % T::kStages;
    const uint32_t tw = mma::smem_u32(smem + stage * T::kStageBytes + wg * 64 * kBK);
    const uint32_t ta = mma::smem_u32(smem + stage * T::kStageBytes + T::kWBytes);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk)
      wgmma::mma_m64k32_e4m3_ss<kRows>(part, wgmma::desc_sw128(tw + kk * 32, 16, 1024),
                                       wgmma::desc_sw128(ta + kk * 32, 16, 1024), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(part);
    const float* sc = scale_ring + stage * T::kScales;
    const float ws = sc[kRows];
#pragma unroll
    for (int j = 0; j < kRows / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float s = sc[8 * j + 2 * (lane % 4) + e] * ws;
        acc[4 * j + e] = fmaf(part[4 * j + e], s, acc[4 * j + e]);
        acc[4 * j + e + 2] = fmaf(part[4 * j + e + 2], s, acc[4 * j + e + 2]);
      }
    if (++tile_kb == k_tiles) {  // the column tile's K range is summed
      store_tile(tile_nt * kBN);
      tile_kb = 0, ++tile_nt;
#pragma unroll
      for (int i = 0; i < kAcc; ++i) acc[i] = 0.f;
    }
  }
  mma::cp_async_wait<0>();
}

template <int kRows, bool kF32Out>
void launch(const MoeFp8GemmParams& p, cudaStream_t stream) {
  using T = Tile<kRows, kF32Out>;
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(moe_fp8_wgmma_kernel<kRows, kF32Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(T::kSmemBytes)));
    configured = true;
  }
  const int n_tiles = p.N / kBN;
  dim3 grid(unsigned((n_tiles + p.launch.n_tiles_per_block - 1) / p.launch.n_tiles_per_block),
            unsigned(moe_tiles::max_row_tiles(p.max_rows, p.num_experts, kRows)), unsigned(p.launch.k_splits));
  launch_pdl(moe_fp8_wgmma_kernel<kRows, kF32Out>, grid, kThreads, T::kSmemBytes, stream, p);
}

template <int kRows>
void launch_rows(const MoeFp8GemmParams& p, cudaStream_t stream) {
  if (p.c_f32)
    launch<kRows, true>(p, stream);
  else
    launch<kRows, false>(p, stream);
}

}  // namespace

void launch_moe_grouped_gemm_fp8_wgmma(const MoeFp8GemmParams& p, cudaStream_t stream) {
  switch (p.launch.tile_rows) {
    case 16: return launch_rows<16>(p, stream);
    case 32: return launch_rows<32>(p, stream);
    case 64: return launch_rows<64>(p, stream);
    case 128: return launch_rows<128>(p, stream);
    default: fail("moe FP8 grouped GEMM (wgmma): {} rows a tile is not 16, 32, 64 or 128", p.launch.tile_rows);
  }
}

}  // namespace mlaserve::cuda
