// Per-token-group FP8 quantization (fp8_quant.h): one warp a (token, group).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kWarps = 8;
constexpr float kE4m3Max = 448.0f, kMinAmax = 1e-10f;

__global__ void __launch_bounds__(kWarps * 32)
    quantize_kernel(const __nv_bfloat16* x, int64_t ldx, int64_t T, int64_t K, int64_t group, uint8_t* q, int64_t ldq,
                    float* scales, int64_t scale_t, int64_t scale_g) {
  pdl_wait_and_trigger();
  const int64_t G = (K + group - 1) / group;
  const int64_t item = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= T * G) return;
  const int64_t t = item / G, g = item - t * G, lane = threadIdx.x % 32;
  const int64_t begin = g * group, end = min(K, begin + group);
  const __nv_bfloat16* xr = x + t * ldx;
  float amax = 0.f;
  for (int64_t k = begin + lane; k < end; k += 32) amax = fmaxf(amax, fabsf(__bfloat162float(xr[k])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
  const float s = fmaxf(amax, kMinAmax) / kE4m3Max;
  if (lane == 0) scales[t * scale_t + g * scale_g] = s;
  uint8_t* qr = q + t * ldq;
  // IEEE division as the reference; the conversion rounds to nearest even and saturates.
  for (int64_t k = begin + lane; k < end; k += 32)
    qr[k] = __nv_cvt_float_to_fp8(__fdiv_rn(__bfloat162float(xr[k]), s), __NV_SATFINITE, __NV_E4M3);
}

__global__ void transpose_scales_kernel(const float* scales, int64_t lds, int64_t T, int64_t G, float* out,
                                        int64_t ld_out) {
  pdl_wait_and_trigger();
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= G * ld_out) return;
  const int64_t g = i / ld_out, t = i - g * ld_out;
  out[i] = t < T ? scales[t * lds + g] : 0.f;
}

}  // namespace

void launch_transpose_scales(const float* scales, int64_t lds, int64_t T, int64_t G, float* out, int64_t ld_out,
                             cudaStream_t stream) {
  const int64_t n = G * ld_out;
  if (n == 0) return;
  launch_pdl(transpose_scales_kernel, unsigned((n + 255) / 256), 256, 0, stream, scales, lds, T, G, out, ld_out);
}

void launch_quantize_fp8_per_token_group(const void* x, int64_t ldx, int64_t T, int64_t K, int64_t group, void* q,
                                         int64_t ldq, float* scales, int64_t scale_t, int64_t scale_g,
                                         cudaStream_t stream) {
  const int64_t items = T * ((K + group - 1) / group);
  if (items == 0) return;
  launch_pdl(quantize_kernel, unsigned((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream,
             static_cast<const __nv_bfloat16*>(x), ldx, T, K, group, static_cast<uint8_t*>(q), ldq, scales, scale_t,
             scale_g);
}

}  // namespace mlaserve::cuda
