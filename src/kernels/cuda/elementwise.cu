// Memory-bound kernels: fp32 math, BF16 in and out. Each reads its inputs once and writes its
// outputs once; the benchmark compares them with the copy bandwidth. Scalar kernels (one block per
// row, 2-byte accesses) handle any stride; 16-byte kernels below take aligned rows.
#include <cuda_bf16.h>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/bf16x8.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_quant.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float load(const bf16* p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }

template <class T>
__global__ void embedding_kernel(const int32_t* ids, const T* table, int64_t table_ld, int64_t H, bf16* out,
                                 int64_t out_ld) {
  pdl_wait_and_trigger();
  const T* src = table + int64_t(ids[blockIdx.x]) * table_ld;
  bf16* dst = out + int64_t(blockIdx.x) * out_ld;
  for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = __float2bfloat16(load(src, i));
}

__device__ float block_sum(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  int warps = (blockDim.x + 31) / 32;
  v = lane < warps ? partial[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffff, v, o);
  return v;
}

// Rows up to kMaxCols are held in registers between the sum and the scaling pass.
constexpr int kThreads = 256, kMaxPerThread = 32;

template <class W>
__global__ void rmsnorm_kernel(const bf16* x, int64_t x_ld, bf16* residual, int64_t res_ld, const W* w, float eps,
                               int64_t D, bf16* out, int64_t out_ld) {
  pdl_wait_and_trigger();
  int64_t row = blockIdx.x;
  const bf16* xr = x + row * x_ld;
  bf16* rr = residual ? residual + row * res_ld : nullptr;
  float v[kMaxPerThread];
  float sum = 0;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    int64_t i = threadIdx.x + int64_t(j) * kThreads;
    v[j] = 0;
    if (i < D) {
      float a = __bfloat162float(xr[i]);
      if (rr) {
        a += __bfloat162float(rr[i]);
        bf16 stored = __float2bfloat16(a);
        rr[i] = stored;
        a = __bfloat162float(stored);  // normalize what the residual stream holds
      }
      v[j] = a;
      sum += a * a;
    }
  }
  float inv = rsqrtf(block_sum(sum) / float(D) + eps);
  bf16* o = out + row * out_ld;
#pragma unroll
  for (int j = 0; j < kMaxPerThread; ++j) {
    int64_t i = threadIdx.x + int64_t(j) * kThreads;
    if (i < D) o[i] = __float2bfloat16(load(w, i) * (v[j] * inv));
  }
}

__global__ void silu_and_mul_kernel(const bf16* g, int64_t g_ld, const bf16* u, int64_t u_ld, bf16* o, int64_t o_ld,
                                    int64_t I) {
  pdl_wait_and_trigger();
  int64_t row = blockIdx.x;
  for (int64_t i = threadIdx.x; i < I; i += blockDim.x) {
    float a = __bfloat162float(g[row * g_ld + i]), b = __bfloat162float(u[row * u_ld + i]);
    o[row * o_ld + i] = __float2bfloat16(a / (1.0f + __expf(-a)) * b);
  }
}

__global__ void add_kernel(bf16* x, int64_t x_ld, const bf16* y, int64_t y_ld, int64_t D) {
  pdl_wait_and_trigger();
  int64_t row = blockIdx.x;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    x[row * x_ld + i] = __float2bfloat16(__bfloat162float(x[row * x_ld + i]) + __bfloat162float(y[row * y_ld + i]));
}

__global__ void rope_kernel(bf16* x, int64_t st, int64_t sh, int64_t heads, int64_t half, const int32_t* positions,
                            const float* inv_freq, float mscale) {
  pdl_wait_and_trigger();
  int64_t t = blockIdx.x;
  float pos = float(positions[t]);
  for (int64_t k = threadIdx.x; k < heads * half; k += blockDim.x) {
    int64_t h = k / half, i = k % half;
    float angle = pos * inv_freq[i], s, c;
    sincosf(angle, &s, &c);
    c *= mscale;
    s *= mscale;
    bf16* p = x + t * st + h * sh + 2 * i;
    float a = __bfloat162float(p[0]), b = __bfloat162float(p[1]);
    p[0] = __float2bfloat16(a * c - b * s);
    p[1] = __float2bfloat16(b * c + a * s);
  }
}

__global__ void copy_rows_kernel(const bf16* src, int64_t src_ld, const int32_t* src_rows, bf16* dst, int64_t dst_ld,
                                 const int32_t* dst_rows, int64_t D) {
  pdl_wait_and_trigger();
  int64_t r = blockIdx.x;
  int64_t s = src_rows ? src_rows[r] : r, d = dst_rows ? dst_rows[r] : r;
  const bf16* a = src + s * src_ld;
  bf16* b = dst + d * dst_ld;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) b[i] = a[i];
}

// Rows of an FP8 KV cache (e4m3 holding latent / kv_scale): the store quantizes BF16 rows as the
// reference does, the gather widens them back times kv_scale.
template <bool kStore>
__global__ void fp8_cache_rows_kernel(const void* src, int64_t src_ld, const int32_t* src_rows, void* dst,
                                      int64_t dst_ld, const int32_t* dst_rows, int64_t D, float kv_scale) {
  pdl_wait_and_trigger();
  int64_t r = blockIdx.x;
  int64_t s = src_rows ? src_rows[r] : r, d = dst_rows ? dst_rows[r] : r;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    if constexpr (kStore)
      static_cast<uint8_t*>(dst)[d * dst_ld + i] =
          fp8::quantize_e4m3(__bfloat162float(static_cast<const bf16*>(src)[s * src_ld + i]), kv_scale);
    else
      static_cast<bf16*>(dst)[d * dst_ld + i] =
          __float2bfloat16(fp8::e4m3_to_float(static_cast<const uint8_t*>(src)[s * src_ld + i]) * kv_scale);
  }
}

int threads_for(int64_t n) { return n >= 256 ? 256 : int((n + 31) / 32 * 32); }

// ---- 16-byte paths: 8 BF16 per access. Used when every row start is 16-byte aligned (base
// pointer aligned, leading dimension and row length multiples of 8); the scalar kernels above
// stay for odd sizes and strided views. Same fp32 math, same rounding points.

constexpr int kVec = 8;  // BF16 per uint4

// A [rows, n] BF16 matrix with leading dimension ld can be read as uint4 rows.
bool vec_ok(const void* p, int64_t ld, int64_t n) { return aligned16(p) && ld % kVec == 0 && n % kVec == 0; }

// Elements [8c, 8c + 8) of a BF16 or F32 vector (16-byte aligned base).
__device__ __forceinline__ void load8(const bf16* p, int64_t c, float f[kVec]) {
  unpack8(reinterpret_cast<const uint4*>(p)[c], f);
}
__device__ __forceinline__ void load8(const float* p, int64_t c, float f[kVec]) {
  float4 a = reinterpret_cast<const float4*>(p)[2 * c], b = reinterpret_cast<const float4*>(p)[2 * c + 1];
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}

// The fused quantization of a kernel's output (Fp8Output): a half-warp holds one group of 128, 8
// values a lane, lane % 16 == 0 at the group's start (vector c, c % 16 == 0). Every lane of the warp
// calls it (the shuffles name all 32); lanes without values pass zeros and valid = false. v are
// the BF16 values the op writes, so the codes are those of quantizing its output.
__device__ __forceinline__ void quantize_group(const Fp8Output& f, int64_t row, int c, const float v[kVec],
                                               bool valid) {
  float amax = 0.f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) amax = fmaxf(amax, fabsf(v[k]));
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (!valid) return;
  const float s = fmaxf(amax, kFp8MinAmax) / kE4m3Max;
  if (c % 16 == 0) f.scales[row * f.st + (c / 16) * f.sg] = s;
  uint32_t lo = 0, hi = 0;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    lo |= uint32_t(fp8::quantize_e4m3(v[k], s)) << (8 * k);
    hi |= uint32_t(fp8::quantize_e4m3(v[4 + k], s)) << (8 * k);
  }
  *reinterpret_cast<uint2*>(static_cast<uint8_t*>(f.q) + row * f.ldq + int64_t(c) * kVec) = make_uint2(lo, hi);
}

// One block per row of nv = D / 8 vectors, blockDim ~ nv / VPT (<= 256): every thread holds VPT
// vectors of the row in registers between the sum of squares and the scaling, so x and the
// residual are read once and out / residual written once. All loads are issued before any use.
// With Q the output is also quantized (fq); out may then be null.
template <int VPT, class W, bool Q>
__global__ void __launch_bounds__(256) rmsnorm_vec_kernel(const bf16* x, int64_t x_ld, bf16* residual,
                                                          int64_t res_ld, const W* w, float eps, int64_t D,
                                                          bf16* out, int64_t out_ld, Fp8Output fq) {
  const int64_t row = blockIdx.x;
  const int nv = int(D / kVec);
  // The weight is no kernel's output: its loads overlap the kernel before (a row is latency-bound).
  float wf[VPT][kVec];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    int c = threadIdx.x + j * blockDim.x;
    if (c < nv) load8(w, c, wf[j]);
  }
  pdl_wait_and_trigger();
  const uint4* xr = reinterpret_cast<const uint4*>(x + row * x_ld);
  uint4 raw[VPT];
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    int c = threadIdx.x + j * blockDim.x;
    if (c < nv) raw[j] = xr[c];
  }
  float v[VPT][kVec];
  float sum = 0;
  if (residual) {
    uint4* rr = reinterpret_cast<uint4*>(residual + row * res_ld);
    uint4 rraw[VPT];
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      int c = threadIdx.x + j * blockDim.x;
      if (c < nv) rraw[j] = rr[c];
    }
#pragma unroll
    for (int j = 0; j < VPT; ++j) {
      int c = threadIdx.x + j * blockDim.x;
      if (c < nv) {
        float a[kVec], b[kVec];
        unpack8(raw[j], a);
        unpack8(rraw[j], b);
#pragma unroll
        for (int k = 0; k < kVec; ++k) a[k] += b[k];
        uint4 stored = pack8(a);
        rr[c] = stored;
        unpack8(stored, v[j]);  // normalize what the residual stream holds
      }
    }
  } else {
#pragma unroll
    for (int j = 0; j < VPT; ++j)
      if (threadIdx.x + j * blockDim.x < nv) unpack8(raw[j], v[j]);
  }
#pragma unroll
  for (int j = 0; j < VPT; ++j)
    if (threadIdx.x + j * blockDim.x < nv) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum += v[j][k] * v[j][k];
    }
  float inv = rsqrtf(block_sum(sum) / float(D) + eps);
  uint4* o = reinterpret_cast<uint4*>(out + row * out_ld);
#pragma unroll
  for (int j = 0; j < VPT; ++j) {
    int c = threadIdx.x + j * blockDim.x;
    float r[kVec] = {};
    if (c < nv) {
#pragma unroll
      for (int k = 0; k < kVec; ++k) r[k] = wf[j][k] * (v[j][k] * inv);
      const uint4 packed = pack8(r);
      if (!Q || out) o[c] = packed;
      if (Q) unpack8(packed, r);
    }
    if constexpr (Q) quantize_group(fq, row, c, r, c < nv);
  }
}

// Row-wise elementwise kernels: blockIdx.y strides over rows, blockIdx.x over chunks of
// kEwThreads * kEwUnroll vectors within a row; the loads of a chunk are issued together.
constexpr int kEwThreads = 128, kEwUnroll = 2;

dim3 ew_grid(int64_t T, int64_t nv) {
  int64_t chunks = (nv + kEwThreads * kEwUnroll - 1) / (kEwThreads * kEwUnroll);
  return dim3(unsigned(chunks), unsigned(T < 65535 ? T : 65535));
}

// With Q the output is also quantized (fq; chunks of kEwThreads vectors keep groups in half-warps);
// o may then be null.
template <bool Q>
__global__ void __launch_bounds__(kEwThreads) silu_and_mul_vec_kernel(const bf16* g, int64_t g_ld, const bf16* u,
                                                                      int64_t u_ld, bf16* o, int64_t o_ld, int64_t T,
                                                                      int nv, Fp8Output fq) {
  pdl_wait_and_trigger();
  const int base = blockIdx.x * kEwThreads * kEwUnroll + threadIdx.x;
  for (int64_t row = blockIdx.y; row < T; row += gridDim.y) {
    const uint4* gr = reinterpret_cast<const uint4*>(g + row * g_ld);
    const uint4* ur = reinterpret_cast<const uint4*>(u + row * u_ld);
    uint4* orow = reinterpret_cast<uint4*>(o + row * o_ld);
    uint4 ga[kEwUnroll], ua[kEwUnroll];
#pragma unroll
    for (int j = 0; j < kEwUnroll; ++j) {
      int c = base + j * kEwThreads;
      if (c < nv) ga[j] = gr[c], ua[j] = ur[c];
    }
#pragma unroll
    for (int j = 0; j < kEwUnroll; ++j) {
      int c = base + j * kEwThreads;
      float a[kVec] = {};
      if (c < nv) {
        float b[kVec];
        unpack8(ga[j], a);
        unpack8(ua[j], b);
#pragma unroll
        for (int k = 0; k < kVec; ++k) a[k] = a[k] / (1.0f + __expf(-a[k])) * b[k];
        const uint4 packed = pack8(a);
        if (!Q || o) orow[c] = packed;
        if (Q) unpack8(packed, a);
      }
      if constexpr (Q) quantize_group(fq, row, c, a, c < nv);
    }
  }
}

__global__ void __launch_bounds__(kEwThreads) add_vec_kernel(bf16* x, int64_t x_ld, const bf16* y, int64_t y_ld,
                                                             int64_t T, int nv) {
  pdl_wait_and_trigger();
  const int base = blockIdx.x * kEwThreads * kEwUnroll + threadIdx.x;
  for (int64_t row = blockIdx.y; row < T; row += gridDim.y) {
    uint4* xr = reinterpret_cast<uint4*>(x + row * x_ld);
    const uint4* yr = reinterpret_cast<const uint4*>(y + row * y_ld);
    uint4 xa[kEwUnroll], ya[kEwUnroll];
#pragma unroll
    for (int j = 0; j < kEwUnroll; ++j) {
      int c = base + j * kEwThreads;
      if (c < nv) xa[j] = xr[c], ya[j] = yr[c];
    }
#pragma unroll
    for (int j = 0; j < kEwUnroll; ++j) {
      int c = base + j * kEwThreads;
      if (c < nv) {
        float a[kVec], b[kVec];
        unpack8(xa[j], a);
        unpack8(ya[j], b);
#pragma unroll
        for (int k = 0; k < kVec; ++k) a[k] += b[k];
        xr[c] = pack8(a);
      }
    }
  }
}

// Gathered rows (embedding, kv_store / kv_gather): one warp per row, kRowsPerBlock rows per block,
// so a short row (576 BF16 = 72 vectors) does not leave most of a block idle.
constexpr int kRowsPerBlock = 4;

template <class T>
__global__ void __launch_bounds__(32 * kRowsPerBlock) embedding_vec_kernel(const int32_t* ids, int64_t n_ids,
                                                                           const T* table, int64_t table_ld, int nv,
                                                                           bf16* out, int64_t out_ld) {
  pdl_wait_and_trigger();
  int64_t t = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (t >= n_ids) return;
  const T* src = table + int64_t(ids[t]) * table_ld;
  uint4* dst = reinterpret_cast<uint4*>(out + t * out_ld);
  for (int c = threadIdx.x % 32; c < nv; c += 32) {
    float f[kVec];
    load8(src, c, f);
    dst[c] = pack8(f);
  }
}

__global__ void __launch_bounds__(32 * kRowsPerBlock) copy_rows_vec_kernel(const bf16* src, int64_t src_ld,
                                                                           const int32_t* src_rows, bf16* dst,
                                                                           int64_t dst_ld, const int32_t* dst_rows,
                                                                           int64_t R, int nv) {
  pdl_wait_and_trigger();
  int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (r >= R) return;
  int64_t s = src_rows ? src_rows[r] : r, d = dst_rows ? dst_rows[r] : r;
  const uint4* a = reinterpret_cast<const uint4*>(src + s * src_ld);
  uint4* b = reinterpret_cast<uint4*>(dst + d * dst_ld);
  for (int c = threadIdx.x % 32; c < nv; c += 32) b[c] = a[c];
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

template <class W, bool Q>
void rmsnorm_vec(const bf16* x, int64_t x_ld, bf16* res, int64_t res_ld, const W* w, float eps, int64_t T, int64_t D,
                 bf16* out, int64_t out_ld, const Fp8Output& fq, cudaStream_t s) {
  int64_t nv = D / kVec;  // <= 1024
  int vpt = nv >= 256 ? 4 : nv >= 64 ? 2 : 1;
  // Whole warps: a group's 16 vectors then lie in one half-warp (Q).
  int threads = int((nv + vpt - 1) / vpt + 31) / 32 * 32;
  if (vpt == 4)
    launch_pdl(rmsnorm_vec_kernel<4, W, Q>, T, threads, 0, s, x, x_ld, res, res_ld, w, eps, D, out, out_ld, fq);
  else if (vpt == 2)
    launch_pdl(rmsnorm_vec_kernel<2, W, Q>, T, threads, 0, s, x, x_ld, res, res_ld, w, eps, D, out, out_ld, fq);
  else
    launch_pdl(rmsnorm_vec_kernel<1, W, Q>, T, threads, 0, s, x, x_ld, res, res_ld, w, eps, D, out, out_ld, fq);
}

template <class W>
void rmsnorm_vec(const bf16* x, int64_t x_ld, bf16* res, int64_t res_ld, const W* w, float eps, int64_t T, int64_t D,
                 bf16* out, int64_t out_ld, const Fp8Output* fq, cudaStream_t s) {
  if (fq)
    rmsnorm_vec<W, true>(x, x_ld, res, res_ld, w, eps, T, D, out, out_ld, *fq, s);
  else
    rmsnorm_vec<W, false>(x, x_ld, res, res_ld, w, eps, T, D, out, out_ld, Fp8Output{}, s);
}

}  // namespace

void launch_embedding(const int32_t* ids, int64_t T, const void* table, bool table_f32, int64_t table_ld, int64_t H,
                      void* out, int64_t out_ld, cudaStream_t s) {
  if (T == 0) return;
  auto ob = static_cast<bf16*>(out);
  // F32 rows are 16-byte aligned when the leading dimension is a multiple of 4 floats.
  bool vec = vec_ok(out, out_ld, H) && aligned16(table) && table_ld % (table_f32 ? 4 : kVec) == 0;
  if (vec && table_f32)
    launch_pdl(embedding_vec_kernel<float>, row_blocks(T), 32 * kRowsPerBlock, 0, s, ids, T,
               static_cast<const float*>(table), table_ld, int(H / kVec), ob, out_ld);
  else if (vec)
    launch_pdl(embedding_vec_kernel<bf16>, row_blocks(T), 32 * kRowsPerBlock, 0, s, ids, T,
               static_cast<const bf16*>(table), table_ld, int(H / kVec), ob, out_ld);
  else if (table_f32)
    launch_pdl(embedding_kernel<float>, T, threads_for(H), 0, s, ids, static_cast<const float*>(table), table_ld, H, ob,
               out_ld);
  else
    launch_pdl(embedding_kernel<bf16>, T, threads_for(H), 0, s, ids, static_cast<const bf16*>(table), table_ld, H, ob,
               out_ld);
}

namespace {

// Whether a 16-byte kernel can also write this FP8 output of rows of D (out null: not written).
bool fp8_output_fits(const void* out, int64_t out_ld, const Fp8Output& fp8, int64_t D) {
  return D % 128 == 0 && (!out || vec_ok(out, out_ld, D)) && fp8.q && fp8.scales && aligned16(fp8.q) &&
         fp8.ldq % 16 == 0;
}

}  // namespace

bool launch_rmsnorm(const void* x, int64_t x_ld, void* residual, int64_t res_ld, const void* w, bool w_f32, float eps,
                    int64_t T, int64_t D, void* out, int64_t out_ld, cudaStream_t s, const Fp8Output* fp8) {
  static_assert(kRmsNormMaxWidth == int64_t(kThreads) * kMaxPerThread, "a thread holds kMaxPerThread values");
  MLA_CHECK(D <= kRmsNormMaxWidth, "rmsnorm on CUDA supports rows up to {}, got {}", kRmsNormMaxWidth, D);
  auto xb = static_cast<const bf16*>(x);
  auto rb = static_cast<bf16*>(residual);
  auto ob = static_cast<bf16*>(out);
  bool vec = vec_ok(x, x_ld, D) && (out ? vec_ok(out, out_ld, D) : fp8 != nullptr) && aligned16(w) &&
             (!rb || vec_ok(rb, res_ld, D));
  if (fp8 && !(vec && fp8_output_fits(out, out_ld, *fp8, D))) return false;
  if (T == 0) return true;
  if (vec && w_f32)
    rmsnorm_vec(xb, x_ld, rb, res_ld, static_cast<const float*>(w), eps, T, D, ob, out_ld, fp8, s);
  else if (vec)
    rmsnorm_vec(xb, x_ld, rb, res_ld, static_cast<const bf16*>(w), eps, T, D, ob, out_ld, fp8, s);
  else if (w_f32)
    launch_pdl(rmsnorm_kernel<float>, T, kThreads, 0, s, xb, x_ld, rb, res_ld, static_cast<const float*>(w), eps, D, ob,
               out_ld);
  else
    launch_pdl(rmsnorm_kernel<bf16>, T, kThreads, 0, s, xb, x_ld, rb, res_ld, static_cast<const bf16*>(w), eps, D, ob,
               out_ld);
  return true;
}

bool launch_silu_and_mul(const void* gate, int64_t g_ld, const void* up, int64_t u_ld, void* out, int64_t o_ld,
                         int64_t T, int64_t I, cudaStream_t s, const Fp8Output* fp8) {
  const bool vec = vec_ok(gate, g_ld, I) && vec_ok(up, u_ld, I) && (out ? vec_ok(out, o_ld, I) : fp8 != nullptr);
  if (fp8 && !(vec && fp8_output_fits(out, o_ld, *fp8, I))) return false;
  if (T == 0) return true;
  if (fp8) {
    launch_pdl(silu_and_mul_vec_kernel<true>, ew_grid(T, I / kVec), kEwThreads, 0, s, static_cast<const bf16*>(gate),
               g_ld, static_cast<const bf16*>(up), u_ld, static_cast<bf16*>(out), o_ld, T, int(I / kVec), *fp8);
    return true;
  }
  if (vec) {
    launch_pdl(silu_and_mul_vec_kernel<false>, ew_grid(T, I / kVec), kEwThreads, 0, s, static_cast<const bf16*>(gate),
               g_ld, static_cast<const bf16*>(up), u_ld, static_cast<bf16*>(out), o_ld, T, int(I / kVec), Fp8Output{});
    return true;
  }
  launch_pdl(silu_and_mul_kernel, T, threads_for(I), 0, s, static_cast<const bf16*>(gate), g_ld,
             static_cast<const bf16*>(up), u_ld, static_cast<bf16*>(out), o_ld, I);
  return true;
}

void launch_add(void* x, int64_t x_ld, const void* y, int64_t y_ld, int64_t T, int64_t D, cudaStream_t s) {
  if (T == 0) return;
  if (vec_ok(x, x_ld, D) && vec_ok(y, y_ld, D)) {
    launch_pdl(add_vec_kernel, ew_grid(T, D / kVec), kEwThreads, 0, s, static_cast<bf16*>(x), x_ld,
               static_cast<const bf16*>(y), y_ld, T, int(D / kVec));
    return;
  }
  launch_pdl(add_kernel, T, threads_for(D), 0, s, static_cast<bf16*>(x), x_ld, static_cast<const bf16*>(y), y_ld, D);
}

void launch_rope(void* x, int64_t st, int64_t sh, int64_t T, int64_t heads, int64_t half, const int32_t* positions,
                 const float* inv_freq, float mscale, cudaStream_t s) {
  if (T == 0) return;
  launch_pdl(rope_kernel, T, threads_for(heads * half), 0, s, static_cast<bf16*>(x), st, sh, heads, half, positions,
             inv_freq, mscale);
}

void launch_kv_store(const void* latent, int64_t ld, const int32_t* slots, int64_t T, int64_t D, void* cache,
                     cudaStream_t s) {
  if (T == 0) return;
  if (vec_ok(latent, ld, D) && vec_ok(cache, D, D)) {
    launch_pdl(copy_rows_vec_kernel, row_blocks(T), 32 * kRowsPerBlock, 0, s, static_cast<const bf16*>(latent), ld,
               nullptr, static_cast<bf16*>(cache), D, slots, T, int(D / kVec));
    return;
  }
  launch_pdl(copy_rows_kernel, T, threads_for(D), 0, s, static_cast<const bf16*>(latent), ld, nullptr,
             static_cast<bf16*>(cache), D, slots, D);
}

void launch_kv_gather(const void* cache, const int32_t* indices, int64_t S, int64_t D, void* out, int64_t ld,
                      cudaStream_t s) {
  if (S == 0) return;
  if (vec_ok(cache, D, D) && vec_ok(out, ld, D)) {
    launch_pdl(copy_rows_vec_kernel, row_blocks(S), 32 * kRowsPerBlock, 0, s, static_cast<const bf16*>(cache), D,
               indices, static_cast<bf16*>(out), ld, nullptr, S, int(D / kVec));
    return;
  }
  launch_pdl(copy_rows_kernel, S, threads_for(D), 0, s, static_cast<const bf16*>(cache), D, indices,
             static_cast<bf16*>(out), ld, nullptr, D);
}

void launch_kv_store_fp8(const void* latent, int64_t ld, const int32_t* slots, int64_t T, int64_t D, float kv_scale,
                         void* cache, cudaStream_t s) {
  if (T == 0) return;
  launch_pdl(fp8_cache_rows_kernel<true>, T, threads_for(D), 0, s, latent, ld, nullptr, cache, D, slots, D, kv_scale);
}

void launch_kv_gather_fp8(const void* cache, float kv_scale, const int32_t* indices, int64_t S, int64_t D, void* out,
                          int64_t ld, cudaStream_t s) {
  if (S == 0) return;
  launch_pdl(fp8_cache_rows_kernel<false>, S, threads_for(D), 0, s, cache, D, indices, out, ld, nullptr, D, kv_scale);
}

}  // namespace mlaserve::cuda
