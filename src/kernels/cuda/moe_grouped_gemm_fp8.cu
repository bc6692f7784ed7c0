// FP8 grouped expert GEMM (moe_grouped_gemm_fp8.h) on mma.sync m16n8k32 e4m3, and the SiLU-and-mul
// that quantizes its result for the down GEMM.
//
// Tiles: as the BF16 narrow kernel (moe_grouped_gemm.cu), 32 rows x 128 columns of one expert, 8
// warps of 32 x 16. A stage is one 128-wide K-block (128 bytes a row, the same swizzled layout as a
// BF16 stage of 64) plus its scales: the 32 rows' activation scales and the tile's one weight scale
// (128 columns are one weight block). Each stage's MMAs start from zero, and the block's sum is
// added to the fp32 accumulators times the two scales: the tensor cores never sum across blocks.
// The kernel streams weights: at decode sizes an expert has a row or two, and the 32-row tile is
// what keeps mma.sync's shape while each weight byte is read once for all of the expert's rows.
// Where K is short (down: K = I) a block runs several column tiles in turn through one pipeline, so
// that finding its rows and filling the ring pay off; where rows are few (gate/up at decode) grid.z
// splits K instead (plan_moe_grouped_gemm_fp8).

#include <algorithm>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/mma_primitives.cuh"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/cuda/moe_grouped_tiles.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using namespace mma;

constexpr int kBM = 32, kBN = 128, kBK = 128, kStages = 4;  // kBK: e4m3 values (bytes) a K-block
constexpr int kWarps = 8, kThreads = kWarps * 32;
constexpr int kABytes = kBM * kBK, kBBytes = kBN * kBK;
// A stage: the A tile, the B tile, then kBM activation scales and the weight scale (padded).
constexpr int kStageBytes = kABytes + kBBytes + 256;
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes;
static_assert(kBK * 2 == moe_tiles::kBK * 4, "a K-block row is one 128-byte swizzle row");
static_assert(kThreads == kBM * 8, "one A chunk a thread");
static_assert(kBN == moe_tiles::Fp8BlockSpan::kTileN && kBK == moe_tiles::Fp8BlockSpan::kBlockK, "the span's tiles");

// Byte offset of 16-byte chunk `chunk` of row `row` (moe_tiles::swz counts 2-byte elements).
__device__ __forceinline__ int swz_bytes(int row, int chunk) { return 2 * moe_tiles::swz(row, chunk); }

// Two blocks an SM (the shared memory of two rings).
template <bool kF32Out>
__global__ void __launch_bounds__(kThreads, 2) moe_grouped_gemm_fp8_kernel(MoeFp8GemmParams p) {
  pdl_wait_and_trigger();
  extern __shared__ __align__(128) uint8_t smem[];
  int expert, row0, row_end;
  if (!moe_tiles::find_tile<kBM, kThreads>(p.offsets, p.num_experts, int(blockIdx.y), expert, row0, row_end)) return;
  const moe_tiles::Fp8BlockSpan span(p, expert);
  const int kb_begin = span.kb_begin, kb_end = span.kb_end, k_tiles = span.k_tiles, steps = span.steps;
  const int n_tile_first = span.n_tile_first;
  const uint8_t* a = static_cast<const uint8_t*>(p.a);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // The rows this thread copies: A row tid / 8 (chunk tid % 8), and scale row tid (tid < kBM).
  auto source_row = [&](int r) -> int64_t {
    int ar = row0 + r;
    if (ar >= row_end) return -1;
    return p.a_rows ? p.a_rows[ar] / p.a_rows_div : ar;
  };
  const int64_t a_src = source_row(tid / 8), s_src = tid < kBM ? source_row(tid) : -1;
  const uint8_t* a_ptr = a_src >= 0 ? a + a_src * p.lda + (tid % 8) * 16 : a;
  const float* as_ptr = s_src >= 0 ? p.a_scale + s_src * p.ld_a_scale : p.a_scale;

  // Stages load K-block by K-block through the column tiles in turn; (load_nt, load_kb) is the
  // next one (counters, not divisions: this kernel is bound by its instruction issue).
  int load_nt = n_tile_first, load_kb = kb_begin;
  const int b_dst = kABytes + swz_bytes(tid / 8, tid % 8);  // rows r and r + 32 share their swizzle
  const int b_src = (tid / 8) * span.row_stride + (tid % 8) * 16, b_rows = (kThreads / 8) * span.row_stride;
  auto load_next = [&](int stage) {
    uint8_t* st = smem + stage * kStageBytes;
    const int kb = load_kb, k0 = kb * kBK;
    const moe_tiles::Fp8BlockSpan::Tile t = span.tile(p, load_nt * kBN);
    const uint8_t* w = t.w + (kb * span.kb_stride + b_src);
    cp_async16(smem_u32(st + swz_bytes(tid / 8, tid % 8)), a_ptr + (a_src >= 0 ? k0 : 0), a_src >= 0);
#pragma unroll
    for (int j = 0; j < kBN * 8 / kThreads; ++j)  // every weight row of the tile exists (N % 128 == 0)
      cp_async16(smem_u32(st + b_dst + j * (kThreads / 8) * kBK), w + j * b_rows, true);
    float* scales = reinterpret_cast<float*>(st + kABytes + kBBytes);
    if (tid < kBM)
      cp_async4(smem_u32(scales + tid), as_ptr + (s_src >= 0 ? kb : 0), s_src >= 0);
    else if (tid == kBM)
      cp_async4(smem_u32(scales + kBM), t.scale + kb, true);
    if (++load_kb == kb_end) load_kb = kb_begin, ++load_nt;
  };

  float acc[2][2][4] = {};  // [m16 tile][n8 tile][fragment]
  const int g = lane / 4, t4 = lane % 4;
  // acc[mi][ni]: rows g and g + 8 of the m16 tile, columns 2 t4 and 2 t4 + 1 of the n8 tile.
  auto store_tile = [&](int n0) {
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = row0 + mi * 16 + g + 8 * h;
        if (r >= row_end) continue;
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          const int64_t at = int64_t(r) * p.ldc + n0 + warp * 16 + ni * 8 + 2 * t4;
          const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
          if constexpr (kF32Out)
            *reinterpret_cast<float2*>(static_cast<float*>(p.c) + int64_t(blockIdx.z) * p.split_stride + at) =
                make_float2(v0, v1);
          else
            *reinterpret_cast<uint32_t*>(static_cast<__nv_bfloat16*>(p.c) + at) = pack_bf16(v0, v1);
        }
      }
  };

#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < steps) load_next(s);
    cp_async_commit();
  }
  // ldmatrix addresses: a fragment row's swizzle is lane % 8 in both tiles (rows 16 mi + lane % 16
  // of A, 16 warp + ... of B), so only the chunk varies with kk.
  const uint32_t a_row = smem_u32(smem) + (lane & 15) * kBK, a_hi = lane >> 4;
  const uint32_t b_row = smem_u32(smem) + kABytes + (warp * 16 + (lane & 7) + ((lane >> 4) << 3)) * kBK,
                 b_hi = (lane >> 3) & 1;
  int tile_kb = 0, tile_nt = n_tile_first;  // K-blocks summed so far into acc, and its column tile
  for (int step = 0; step < steps; ++step) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // stage `step` is in; every warp is done with the stage refilled below
    if (step + kStages - 1 < steps) load_next((step + kStages - 1) % kStages);
    cp_async_commit();
    const uint32_t stage_off = (step % kStages) * kStageBytes;
    const uint8_t* st = smem + stage_off;
    float part[2][2][4] = {};
#pragma unroll
    for (int kk = 0; kk < kBK / 32; ++kk) {
      uint32_t af[2][4], bfr[4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
        ldsm_x4(af[mi], a_row + stage_off + mi * 16 * kBK + (((2 * kk + a_hi) ^ (lane & 7)) << 4));
      ldsm_x4(bfr, b_row + stage_off + (((2 * kk + b_hi) ^ (lane & 7)) << 4));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) mma_e4m3(part[mi][ni], af[mi], bfr[2 * ni], bfr[2 * ni + 1]);
    }
    const float* scales = reinterpret_cast<const float*>(st + kABytes + kBBytes);
    const float ws = scales[kBM];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float s = scales[mi * 16 + g + 8 * h] * ws;
#pragma unroll
        for (int ni = 0; ni < 2; ++ni) {
          acc[mi][ni][2 * h] = fmaf(part[mi][ni][2 * h], s, acc[mi][ni][2 * h]);
          acc[mi][ni][2 * h + 1] = fmaf(part[mi][ni][2 * h + 1], s, acc[mi][ni][2 * h + 1]);
        }
      }
    if (++tile_kb == k_tiles) {  // the column tile's K range is summed
      store_tile(tile_nt * kBN);
      tile_kb = 0, ++tile_nt;
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int ni = 0; ni < 2; ++ni)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[mi][ni][j] = 0.f;
    }
  }
  cp_async_wait<0>();
}

constexpr int kQuantWarps = 8;

// One warp a (row, 128 columns): four columns a lane.
__global__ void __launch_bounds__(kQuantWarps * 32)
    silu_mul_quant_kernel(const float* gu, int64_t split_stride, int splits, int I, const int32_t* count, uint8_t* act,
                          float* act_scale) {
  pdl_wait_and_trigger();
  const int G = I / 128;
  const int64_t item = int64_t(blockIdx.x) * kQuantWarps + threadIdx.x / 32;
  const int64_t r = item / G;
  if (r >= *count) return;
  const int grp = int(item - r * G), lane = threadIdx.x % 32, col = grp * 128 + lane * 4;
  float4 gs = make_float4(0.f, 0.f, 0.f, 0.f), us = gs;
  for (int z = 0; z < splits; ++z) {
    const float* row = gu + z * split_stride + r * 2 * I;
    float4 gz = *reinterpret_cast<const float4*>(row + col), uz = *reinterpret_cast<const float4*>(row + I + col);
    gs.x += gz.x, gs.y += gz.y, gs.z += gz.z, gs.w += gz.w;
    us.x += uz.x, us.y += uz.y, us.z += uz.z, us.w += uz.w;
  }
  auto silu_mul = [](float x, float u) { return x / (1.0f + expf(-x)) * u; };
  float v[4] = {silu_mul(gs.x, us.x), silu_mul(gs.y, us.y), silu_mul(gs.z, us.z), silu_mul(gs.w, us.w)};
  const float s = fp8::warp_group_scale(fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3]))));
  if (lane == 0) act_scale[r * G + grp] = s;
  uint32_t packed = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) packed |= uint32_t(fp8::quantize_e4m3(v[j], s)) << (8 * j);
  *reinterpret_cast<uint32_t*>(act + r * I + col) = packed;
}

// One thread a 16-byte chunk of dst: chunk c of row r of block (n, k), from row 128 n + r, bytes
// 128 k + 16 c of src.
__global__ void tile_weights_kernel(const uint4* src, int64_t K, int64_t chunks, uint4* dst) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= chunks) return;
  const int64_t KB = K / kBK, block = i / (kBN * 8), in_block = i % (kBN * 8);
  const int64_t row = block / KB * kBN + in_block / 8, byte = block % KB * kBK + in_block % 8 * 16;
  dst[i] = src[(row * K + byte) / 16];
}

template <bool kF32Out>
void launch_tiles(const MoeFp8GemmParams& p, cudaStream_t stream) {
  static bool configured = false;  // one device per process here, as the other kernels assume
  if (!configured) {
    CUDA_CHECK(cudaFuncSetAttribute(moe_grouped_gemm_fp8_kernel<kF32Out>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    int(kSmemBytes)));
    configured = true;
  }
  dim3 grid(unsigned((p.N / kBN + p.launch.n_tiles_per_block - 1) / p.launch.n_tiles_per_block),
            unsigned(moe_tiles::max_row_tiles(p.max_rows, p.num_experts, kBM)), unsigned(p.launch.k_splits));
  launch_pdl(moe_grouped_gemm_fp8_kernel<kF32Out>, grid, kThreads, kSmemBytes, stream, p);
}

}  // namespace

std::string to_string(const MoeFp8Launch& l) {
  return fmt::format("{} rows={} k_splits={} n_tiles={}", l.kernel == MoeFp8Launch::Kernel::Wgmma ? "wgmma" : "mma",
                     l.tile_rows, l.k_splits, l.n_tiles_per_block);
}

bool moe_grouped_gemm_fp8_fits(const MoeFp8GemmParams& p) {
  const MoeFp8Launch& l = p.launch;
  const bool tile_ok = l.kernel == MoeFp8Launch::Kernel::MmaSync
                           ? l.tile_rows == kBM
                           : l.tile_rows == 16 || l.tile_rows == 32 || l.tile_rows == 64 || l.tile_rows == 128;
  return tile_ok && p.N % kBN == 0 && p.K % kBK == 0 && p.K < (1 << 20) && p.n_split % kBN == 0 && p.n_split > 0 &&
         p.lda > 0 && p.lda % 16 == 0 && p.ld_a_scale > 0 && p.ld_w_scale >= p.K / kBK &&
         aligned16(p.a) && p.num_experts > 0 &&
         (p.c_f32 || (p.ldc % 8 == 0 && aligned16(p.c))) &&
         p.num_experts <= kMoeGroupedMaxExperts && l.k_splits >= 1 && l.k_splits <= p.K / kBK &&
         (l.k_splits == 1 || p.c_f32) && l.n_tiles_per_block >= 1 && (p.a_rows == nullptr || p.a_rows_div > 0) &&
         p.tiled_experts >= 0 && p.tiled_experts <= p.num_experts;
}

MoeFp8Launch plan_moe_grouped_gemm_fp8(const MoeFp8GemmParams& p, int num_sms, bool allow_k_splits) {
  MoeFp8Launch l;
  const int64_t rows = std::max<int64_t>(1, p.max_rows);
  const int64_t avg = (rows + std::min<int64_t>(p.num_experts, rows) - 1) / std::min<int64_t>(p.num_experts, rows);
  l.tile_rows = avg <= 8 ? 16 : avg <= 24 ? 32 : avg <= 48 ? 64 : 128;
  const int64_t col_tiles = p.N / kBN,
                tiles = std::max<int64_t>(1, col_tiles * moe_tiles::max_row_tiles(rows, p.num_experts, l.tile_rows));
  const int64_t want_blocks = (l.tile_rows <= 32 ? 2 : 1) * int64_t(num_sms), k_blocks = p.K / kBK;
  if (allow_k_splits && tiles < want_blocks)
    l.k_splits = int32_t(std::max<int64_t>(1, std::min((want_blocks + tiles - 1) / tiles, k_blocks / 4)));
  const int64_t steps = k_blocks / l.k_splits;
  l.n_tiles_per_block =
      int32_t(std::clamp<int64_t>(std::min((16 + steps - 1) / steps, tiles / want_blocks), 1, col_tiles));
  return l;
}

std::vector<MoeFp8Launch> moe_grouped_gemm_fp8_launches(const MoeFp8GemmParams& p, bool allow_k_splits) {
  std::vector<MoeFp8Launch> out;
  const int32_t k_blocks = p.K / kBK, col_tiles = p.N / kBN;
  for (int32_t rows : {16, 32, 64, 128, 0})  // 0: the mma.sync kernel
    for (int32_t splits : {1, 2, 3, 4, 6, 8, 12, 16})
      for (int32_t n_tiles : {1, 2, 4, 8}) {
        if ((splits > 1 && !allow_k_splits) || splits > k_blocks || (n_tiles > 1 && n_tiles > col_tiles)) continue;
        out.push_back(
            {rows ? MoeFp8Launch::Kernel::Wgmma : MoeFp8Launch::Kernel::MmaSync, rows ? rows : kBM, splits, n_tiles});
      }
  return out;
}

void launch_moe_grouped_gemm_fp8(const MoeFp8GemmParams& p, cudaStream_t stream) {
  MLA_CHECK(moe_grouped_gemm_fp8_fits(p),
            "moe FP8 grouped GEMM: N={} K={} n_split={} lda={} E={} ({}) outside its limits", p.N, p.K, p.n_split,
            p.lda, p.num_experts, to_string(p.launch));
  if (p.max_rows <= 0) return;
  if (p.launch.kernel == MoeFp8Launch::Kernel::Wgmma)
    launch_moe_grouped_gemm_fp8_wgmma(p, stream);
  else if (p.c_f32)
    launch_tiles<true>(p, stream);
  else
    launch_tiles<false>(p, stream);
}

void launch_moe_fp8_tile_weights(const void* src, int64_t N, int64_t K, void* dst, cudaStream_t stream) {
  MLA_CHECK(N % kBN == 0 && K % kBK == 0 && aligned16(src) && aligned16(dst),
            "moe FP8 weight tiling: [{}, {}] is not whole 128 x 128 blocks 16-byte aligned", N, K);
  const int64_t chunks = N * K / 16;
  if (chunks == 0) return;
  tile_weights_kernel<<<unsigned((chunks + 255) / 256), 256, 0, stream>>>(static_cast<const uint4*>(src), K, chunks,
                                                                          static_cast<uint4*>(dst));
  CUDA_CHECK(cudaGetLastError());
}

void launch_moe_silu_mul_quant(const float* gu, int64_t split_stride, int32_t splits, int32_t I, const int32_t* count,
                               int32_t max_rows, void* act, float* act_scale, cudaStream_t stream) {
  MLA_CHECK(I % 128 == 0, "moe SiLU-and-mul quantization: I={} is not a multiple of 128", I);
  const int64_t items = int64_t(max_rows) * (I / 128);
  if (items == 0) return;
  launch_pdl(silu_mul_quant_kernel, unsigned((items + kQuantWarps - 1) / kQuantWarps), kQuantWarps * 32, 0, stream, gu,
             split_stride, int(splits), int(I), count, static_cast<uint8_t*>(act), act_scale);
}

}  // namespace mlaserve::cuda
