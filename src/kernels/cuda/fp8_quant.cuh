// e4m3 on the device, as the CPU reference does it (cpu_fp8.cc, common/dtype.cc): a group's scale
// is its amax / 448, a value is divided by its scale (IEEE division) and converted with rounding
// to nearest even, saturating; and the way back. Shared by the kernels that quantize activations
// and those that read or write the FP8 KV cache.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "common/dtype.h"

namespace mlaserve::cuda::fp8 {

// The scale of a group a warp holds, from each lane's amax of its values (every lane gets it).
__device__ __forceinline__ float warp_group_scale(float lane_amax) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) lane_amax = fmaxf(lane_amax, __shfl_xor_sync(0xffffffffu, lane_amax, o));
  return fmaxf(lane_amax, kFp8MinAmax) / kE4m3Max;
}

__device__ __forceinline__ uint8_t quantize_e4m3(float v, float scale) {
  return __nv_cvt_float_to_fp8(__fdiv_rn(v, scale), __NV_SATFINITE, __NV_E4M3);
}

__device__ __forceinline__ float e4m3_to_float(uint8_t v) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(v), __NV_E4M3)));
}

// Two e4m3 values (the low byte first) as a BF16 pair; exact, every e4m3 value is a BF16 value.
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint32_t two) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(two), __NV_E4M3);
  const __nv_bfloat162 b = __float22bfloat162_rn(__half22float2(__half2(h)));
  return *reinterpret_cast<const uint32_t*>(&b);
}

}  // namespace mlaserve::cuda::fp8
