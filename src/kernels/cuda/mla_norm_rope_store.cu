// Backend::mla_norm_rope_store on CUDA: one block a token does what rmsnorm, two ropes and kv_store
// did in four launches (the same fp32 math and rounding points as those kernels). An FP8 cache gets
// the BF16 results quantized as kv_store would (value / kv_scale, rounded to nearest e4m3).
#include <cuda_bf16.h>

#include <cmath>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kThreads = 256, kMaxVecPerLane = kMlaNormMaxWidth / (32 * 8), kMaxRopeHalf = 64;

__device__ __forceinline__ float weight(const bf16* w, int i) { return __bfloat162float(w[i]); }
__device__ __forceinline__ float weight(const float* w, int i) { return w[i]; }

// Eight BF16 values as the e4m3 codes of value / kv_scale, in order (as kv_store stores them).
__device__ __forceinline__ uint2 quantize8(const __nv_bfloat162* h, float kv_scale) {
  uint32_t q[2] = {0, 0};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float v = k % 2 ? __high2float(h[k / 2]) : __low2float(h[k / 2]);
    q[k / 4] |= uint32_t(fp8::quantize_e4m3(v, kv_scale)) << (8 * (k % 4));
  }
  return make_uint2(q[0], q[1]);
}

// Warp 0 normalizes the latent (16-byte accesses, the row held in registers) and writes it to the
// row and the cache; then every thread rotates pairs: q_pe's heads 0..H-1, and k_pe as head H.
// Where every head's rope part is 16-byte aligned (vec), a thread takes 16-byte pieces (4 pairs),
// kRopeLoads of them loaded before any is rotated: at 128 heads a pair a thread at a time made 16
// dependent round trips to L2 (7.4 us a layer at one token, H200).
constexpr int kRopeLoads = 4;

template <class W, bool kFp8>
__global__ void __launch_bounds__(kThreads)
    mla_norm_rope_store_kernel(MlaNormRopeStoreParams p, const W* norm, bool vec) {
  // The norm's weight, the token's position and slot, and so the rotation's cos / sin, are not the
  // kernel before's output (positions and slots come with the batch, two or more launches back):
  // all before the PDL wait, while that kernel runs.
  __shared__ float2 rot[kMaxRopeHalf];
  const int t = blockIdx.x, half = p.rope / 2;
  const float pos = float(p.positions[t]);
  const int64_t cache_row = int64_t(p.slots[t]) * (p.kv_lora + p.rope);
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    rot[i] = make_float2(c * p.mscale, s * p.mscale);
  }
  float wn[kMaxVecPerLane][8];
  if (threadIdx.x < 32) {
#pragma unroll
    for (int j = 0; j < kMaxVecPerLane; ++j) {
      const int c = threadIdx.x + 32 * j;
#pragma unroll
      for (int k = 0; k < 8; ++k) wn[j][k] = 8 * c < p.kv_lora ? weight(norm, 8 * c + k) : 0.0f;
    }
  }
  pdl_wait_and_trigger();
  __syncthreads();  // rot
  bf16* row = static_cast<bf16*>(p.latent) + int64_t(t) * p.latent_ld;
  bf16* cached = static_cast<bf16*>(p.cache) + cache_row;
  uint8_t* cached_f8 = static_cast<uint8_t*>(p.cache) + cache_row;
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x, nv = p.kv_lora / 8;
    float v[kMaxVecPerLane][8];
    float sum = 0;
#pragma unroll
    for (int j = 0; j < kMaxVecPerLane; ++j) {
      int c = lane + 32 * j;
      if (c >= nv) continue;
      uint4 raw = reinterpret_cast<const uint4*>(row)[c];
      const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float2 f = __bfloat1622float2(h[k]);
        v[j][2 * k] = f.x, v[j][2 * k + 1] = f.y;
        sum += f.x * f.x + f.y * f.y;
      }
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = rsqrtf(sum / float(p.kv_lora) + p.eps);
#pragma unroll
    for (int j = 0; j < kMaxVecPerLane; ++j) {
      int c = lane + 32 * j;
      if (c >= nv) continue;
      uint4 out;
      __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
      for (int k = 0; k < 4; ++k)
        h[k] = __floats2bfloat162_rn(wn[j][2 * k] * (v[j][2 * k] * inv), wn[j][2 * k + 1] * (v[j][2 * k + 1] * inv));
      reinterpret_cast<uint4*>(row)[c] = out;
      if constexpr (kFp8) {
        reinterpret_cast<uint2*>(cached_f8)[c] = quantize8(h, p.kv_scale);
      } else {
        reinterpret_cast<uint4*>(cached)[c] = out;
      }
    }
  }
  auto rope_at = [&](int h, int i) {  // value 2 i of head h's rope part (k_pe as head H)
    return h < p.heads ? static_cast<bf16*>(p.q_pe) + int64_t(t) * p.q_st0 + int64_t(h) * p.q_st1 + 2 * i
                       : row + p.kv_lora + 2 * i;
  };
  if (vec) {
    const int pieces = half / 4, total = (p.heads + 1) * pieces;
    for (int j0 = threadIdx.x; j0 < total; j0 += kThreads * kRopeLoads) {
      uint4 v[kRopeLoads];
#pragma unroll
      for (int u = 0; u < kRopeLoads; ++u) {
        const int j = j0 + u * kThreads;
        if (j < total) v[u] = *reinterpret_cast<const uint4*>(rope_at(j / pieces, 4 * (j % pieces)));
      }
#pragma unroll
      for (int u = 0; u < kRopeLoads; ++u) {
        const int j = j0 + u * kThreads, h = j / pieces, i0 = 4 * (j % pieces);
        if (j >= total) continue;
        __nv_bfloat162* x = reinterpret_cast<__nv_bfloat162*>(&v[u]);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const float2 ab = __bfloat1622float2(x[k]), cs = rot[i0 + k];
          x[k] = __halves2bfloat162(__float2bfloat16(ab.x * cs.x - ab.y * cs.y),
                                    __float2bfloat16(ab.y * cs.x + ab.x * cs.y));
        }
        *reinterpret_cast<uint4*>(rope_at(h, i0)) = v[u];
        if (h < p.heads) continue;
        if constexpr (kFp8) {
          *reinterpret_cast<uint2*>(cached_f8 + p.kv_lora + 2 * i0) = quantize8(x, p.kv_scale);
        } else {
          *reinterpret_cast<uint4*>(cached + p.kv_lora + 2 * i0) = v[u];
        }
      }
    }
    return;
  }
  for (int j = threadIdx.x; j < (p.heads + 1) * half; j += blockDim.x) {
    int h = j / half, i = j % half;
    const float c = rot[i].x, s = rot[i].y;
    bf16* x = rope_at(h, i);
    float a = __bfloat162float(x[0]), b = __bfloat162float(x[1]);
    bf16 r0 = __float2bfloat16(a * c - b * s), r1 = __float2bfloat16(b * c + a * s);
    x[0] = r0;
    x[1] = r1;
    if (h == p.heads && kFp8) {
      cached_f8[p.kv_lora + 2 * i] = fp8::quantize_e4m3(__bfloat162float(r0), p.kv_scale);
      cached_f8[p.kv_lora + 2 * i + 1] = fp8::quantize_e4m3(__bfloat162float(r1), p.kv_scale);
    } else if (h == p.heads) {
      cached[p.kv_lora + 2 * i] = r0;
      cached[p.kv_lora + 2 * i + 1] = r1;
    }
  }
}

}  // namespace

bool mla_norm_rope_store_fits(const MlaNormRopeStoreParams& p) {
  return p.kv_lora % 8 == 0 && p.kv_lora <= kMlaNormMaxWidth && p.rope % 2 == 0 && p.rope <= 2 * kMaxRopeHalf &&
         p.latent_ld % 8 == 0 && (p.kv_lora + p.rope) % 8 == 0 && aligned16(p.latent) && aligned16(p.cache) &&
         (!p.cache_fp8 || (p.kv_scale > 0 && std::isfinite(p.kv_scale)));
}

void launch_mla_norm_rope_store(const MlaNormRopeStoreParams& p, const void* norm, bool norm_f32, cudaStream_t s) {
  if (p.num_tokens == 0) return;
  const bool vec = p.rope % 8 == 0 && aligned16(p.q_pe) && p.q_st0 % 8 == 0 && p.q_st1 % 8 == 0;
  auto launch = [&](auto kernel, auto* w) { launch_pdl(kernel, p.num_tokens, kThreads, 0, s, p, w, vec); };
  const float* w32 = static_cast<const float*>(norm);
  const bf16* w16 = static_cast<const bf16*>(norm);
  if (p.cache_fp8)
    norm_f32 ? launch(mla_norm_rope_store_kernel<float, true>, w32)
             : launch(mla_norm_rope_store_kernel<bf16, true>, w16);
  else
    norm_f32 ? launch(mla_norm_rope_store_kernel<float, false>, w32)
             : launch(mla_norm_rope_store_kernel<bf16, false>, w16);
}

}  // namespace mlaserve::cuda
