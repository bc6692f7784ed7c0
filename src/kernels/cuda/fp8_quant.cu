// Per-token-group FP8 quantization (fp8_quant.h): groups of 128 with aligned rows take 16 lanes a
// (token, group), each lane one 16-byte load and one 8-byte store; other groups one warp each, a
// value a lane at a time (3-4x slower: 2-byte loads and byte stores).
#include <cuda_bf16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kWarps = 8;

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
  const float s = fp8::warp_group_scale(amax);
  if (lane == 0) scales[t * scale_t + g * scale_g] = s;
  uint8_t* qr = q + t * ldq;
  for (int64_t k = begin + lane; k < end; k += 32) qr[k] = fp8::quantize_e4m3(__bfloat162float(xr[k]), s);
}

constexpr int kVecItemsPerBlock = kWarps * 2;

__global__ void __launch_bounds__(kWarps * 32)
    quantize128_kernel(const __nv_bfloat16* x, int64_t ldx, int64_t T, int64_t G, uint8_t* q, int64_t ldq,
                       float* scales, int64_t scale_t, int64_t scale_g) {
  pdl_wait_and_trigger();
  const int64_t item = int64_t(blockIdx.x) * kVecItemsPerBlock + threadIdx.x / 16, n = T * G;
  // A warp holds two items; it leaves only as a whole (its shuffles name all 32 lanes), so the second
  // half of the last warp may run without an item.
  if (item - (threadIdx.x / 16) % 2 >= n) return;
  const bool valid = item < n;
  const int64_t t = valid ? item / G : 0, g = valid ? item - t * G : 0;
  const int sub = threadIdx.x % 16, col = int(g) * 128 + sub * 8;
  const uint4 raw = valid ? *reinterpret_cast<const uint4*>(x + t * ldx + col) : make_uint4(0, 0, 0, 0);
  const __nv_bfloat162* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float v[8];
  float amax = 0.f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    v[2 * j] = f.x, v[2 * j + 1] = f.y;
    amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
  }
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));  // within a half
  if (!valid) return;
  const float s = fmaxf(amax, kFp8MinAmax) / kE4m3Max;
  if (sub == 0) scales[t * scale_t + g * scale_g] = s;
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    lo |= uint32_t(fp8::quantize_e4m3(v[j], s)) << (8 * j);
    hi |= uint32_t(fp8::quantize_e4m3(v[4 + j], s)) << (8 * j);
  }
  *reinterpret_cast<uint2*>(q + t * ldq + col) = make_uint2(lo, hi);
}

// One block a weight block: its amax, then every value over the block's scale.
constexpr int kBlockThreads = 256;
__global__ void __launch_bounds__(kBlockThreads)
    quantize_blocks_kernel(const __nv_bfloat16* w, int64_t N, int64_t K, int64_t bn, int64_t bk, uint8_t* q,
                           float* scales, int64_t ld_scales) {
  __shared__ float s_amax[kBlockThreads / 32];
  const int64_t r0 = int64_t(blockIdx.y) * bn, c0 = int64_t(blockIdx.x) * bk;
  const int64_t rows = min(N - r0, bn), cols = min(K - c0, bk), n = rows * cols;
  float amax = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kBlockThreads)
    amax = fmaxf(amax, fabsf(__bfloat162float(w[(r0 + i / cols) * K + c0 + i % cols])));
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffff, amax, o));
  if (threadIdx.x % 32 == 0) s_amax[threadIdx.x / 32] = amax;
  __syncthreads();
  amax = 0.f;
  for (int i = 0; i < kBlockThreads / 32; ++i) amax = fmaxf(amax, s_amax[i]);
  const float scale = amax > 0 ? __fdiv_rn(amax, kE4m3Max) : 1.0f;
  if (threadIdx.x == 0) scales[blockIdx.y * ld_scales + blockIdx.x] = scale;
  for (int64_t i = threadIdx.x; i < n; i += kBlockThreads) {
    const int64_t at = (r0 + i / cols) * K + c0 + i % cols;
    q[at] = fp8::quantize_e4m3(__bfloat162float(w[at]), scale);
  }
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

void launch_quantize_fp8_blocks(const void* w, int64_t N, int64_t K, int64_t bn, int64_t bk, void* q, float* scales,
                                int64_t ld_scales, cudaStream_t stream) {
  if (N == 0 || K == 0) return;
  dim3 grid(unsigned((K + bk - 1) / bk), unsigned((N + bn - 1) / bn));
  quantize_blocks_kernel<<<grid, kBlockThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(w), N, K, bn, bk,
                                                             static_cast<uint8_t*>(q), scales, ld_scales);
  CUDA_CHECK(cudaGetLastError());
}

void launch_quantize_fp8_per_token_group(const void* x, int64_t ldx, int64_t T, int64_t K, int64_t group, void* q,
                                         int64_t ldq, float* scales, int64_t scale_t, int64_t scale_g,
                                         cudaStream_t stream) {
  const int64_t items = T * ((K + group - 1) / group);
  if (items == 0) return;
  const bool vec = group == 128 && K % 128 == 0 && ldx % 8 == 0 && ldq % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(q) % 8 == 0;
  if (vec) {
    launch_pdl(quantize128_kernel, unsigned((items + kVecItemsPerBlock - 1) / kVecItemsPerBlock), kWarps * 32, 0,
               stream, static_cast<const __nv_bfloat16*>(x), ldx, T, K / 128, static_cast<uint8_t*>(q), ldq, scales,
               scale_t, scale_g);
    return;
  }
  launch_pdl(quantize_kernel, unsigned((items + kWarps - 1) / kWarps), kWarps * 32, 0, stream,
             static_cast<const __nv_bfloat16*>(x), ldx, T, K, group, static_cast<uint8_t*>(q), ldq, scales, scale_t,
             scale_g);
}

}  // namespace mlaserve::cuda
