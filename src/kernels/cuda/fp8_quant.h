// FP8 (e4m3) quantization on the device. Activations as CpuBackend::quantize_fp8_per_token_group
// does it: per token, per group of `group` channels, scale = max(amax, 1e-10) / 448 and
// q = e4m3(x / scale), rounded to nearest even and saturated at 448. Weights as the host's
// quantize_fp8_blocks (weights/fp8_block_quant.cc): per block, scale = amax / 448 (1 if all zero).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

// x: BF16 [T, K] (row stride ldx); q: e4m3 [T, K] (row stride ldq); scales: F32, scale (t, g) at
// scales[t * scale_t + g * scale_g] (so either [T, G] or [G, T] can be written).
void launch_quantize_fp8_per_token_group(const void* x, int64_t ldx, int64_t T, int64_t K, int64_t group, void* q,
                                         int64_t ldq, float* scales, int64_t scale_t, int64_t scale_g,
                                         cudaStream_t stream);

// scales [T, G] (row stride lds) -> out [G, ld_out] transposed, columns T..ld_out-1 zero: the
// token-contiguous layout cuBLASLt reads for 128-wide activation scales, padded to the GEMM's rows.
// w: BF16 [N, K] contiguous -> q: e4m3 [N, K], scales: F32 [ceil(N / bn), ceil(K / bk)] with row
// stride ld_scales.
void launch_quantize_fp8_blocks(const void* w, int64_t N, int64_t K, int64_t bn, int64_t bk, void* q, float* scales,
                                int64_t ld_scales, cudaStream_t stream);

void launch_transpose_scales(const float* scales, int64_t lds, int64_t T, int64_t G, float* out, int64_t ld_out,
                             cudaStream_t stream);

}  // namespace mlaserve::cuda
