// Block-scaled FP8 GEMM for many tokens on Hopper, warp-specialized (fp8_gemm_wgmma.cu):
//   out[t, n] = sum over K-blocks b of (x[t, b] · W[n, b]) * x_scale[b, t] * w_scale[n / 128, b]
// in bf16, with x e4m3 codes [T, K] (per token per 128 channels scaled, the scales token-contiguous
// as CudaBackend::empty_fp8_activation lays them out) and W e4m3 [N, K] in 128 x 128 blocks.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

struct Fp8GemmWgmmaArgs {
  const void* x;            // e4m3 [T, K], rows ldx bytes apart
  int64_t ldx;
  const float* x_scales;    // [K / 128, ld_x_scales] F32: the scales of K-block b start at b * ld_x_scales
  int64_t ld_x_scales;      // >= T, a multiple of 4
  const void* w;            // e4m3 [w_rows >= N, K], rows ldw bytes apart
  int64_t ldw, w_rows;
  const float* w_scales;    // [ceil(N / 128), K / 128] F32, rows ld_w_scales apart
  int64_t ld_w_scales;
  __nv_bfloat16* out;       // [T, N], rows ldo elements apart
  int64_t ldo;
  int T, N, K;
  int waves = 2;            // 128-token waves a tile: tiles of 128 * waves tokens x 128 weight rows
  int group_m = 8;          // token tiles walked together (column by column) for L2 reuse
  int ctas = 0;             // persistent CTAs (0: one an SM)
  int cluster = 1;          // 2: CTAs in pairs on one token tile, x's tile multicast to both
  // A probe's clock stamps (SM cycles) of each CTA's first trace_tiles tiles, 4 a tile: the loader's
  // first copy issued, the first stage landed (MMA side), the last K-block summed, the stores
  // issued. Nothing where null.
  unsigned long long* trace = nullptr;
  int trace_tiles = 0;
};

// Whether the kernel takes these shapes (K a multiple of 128, N of 16 and >= 64, out's rows a multiple of
// 8 elements apart, operands 16-byte aligned).
bool fp8_gemm_wgmma_fits(const Fp8GemmWgmmaArgs& a);
void fp8_gemm_wgmma(const Fp8GemmWgmmaArgs& a, cudaStream_t stream);

}  // namespace mlaserve::cuda
