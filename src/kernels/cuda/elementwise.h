// Launchers of the memory-bound CUDA kernels (elementwise.cu). Pointers are device pointers;
// strides are in elements; activations are BF16 unless a flag says otherwise.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

// out[t, :] = table[ids[t], :]; table BF16 or F32 (table_f32), out BF16.
void launch_embedding(const int32_t* ids, int64_t T, const void* table, bool table_f32, int64_t table_ld, int64_t H,
                      void* out, int64_t out_ld, cudaStream_t s);
// Where a kernel also writes its output quantized for an FP8 linear, per token per 128 channels as
// launch_quantize_fp8_per_token_group does it (of the BF16 values it writes): e4m3 codes q (row
// stride ldq), scale (t, g) at scales[t * st + g * sg].
struct Fp8Output {
  void* q;
  int64_t ldq;
  float* scales;
  int64_t st, sg;
};

// The widest row launch_rmsnorm takes.
constexpr int64_t kRmsNormMaxWidth = 8192;
// residual (optional) += x; out = rmsnorm(residual or x) * w. w BF16 or F32 (w_f32). With fp8 the
// output is also quantized and out may be null; that takes rows of whole groups, every operand
// 16-byte aligned: false, and nothing launched, where they are not (the caller quantizes apart).
bool launch_rmsnorm(const void* x, int64_t x_ld, void* residual, int64_t res_ld, const void* w, bool w_f32, float eps,
                    int64_t T, int64_t D, void* out, int64_t out_ld, cudaStream_t s, const Fp8Output* fp8 = nullptr);
// out = silu(gate) * up; fp8 as for launch_rmsnorm.
bool launch_silu_and_mul(const void* gate, int64_t g_ld, const void* up, int64_t u_ld, void* out, int64_t o_ld,
                         int64_t T, int64_t I, cudaStream_t s, const Fp8Output* fp8 = nullptr);
void launch_add(void* x, int64_t x_ld, const void* y, int64_t y_ld, int64_t T, int64_t D, cudaStream_t s);
// x [T, heads, 2 * half] with strides (st, sh, 1), rotated in place; inv_freq [half] F32.
void launch_rope(void* x, int64_t st, int64_t sh, int64_t T, int64_t heads, int64_t half, const int32_t* positions,
                 const float* inv_freq, float mscale, cudaStream_t s);
// cache[slots[t]] = latent[t] (BF16 rows of D); and the gather back.
void launch_kv_store(const void* latent, int64_t ld, const int32_t* slots, int64_t T, int64_t D, void* cache,
                     cudaStream_t s);
void launch_kv_gather(const void* cache, const int32_t* indices, int64_t S, int64_t D, void* out, int64_t ld,
                      cudaStream_t s);
// The same for an FP8 cache (e4m3 rows of D bytes holding latent / kv_scale; out BF16).
void launch_kv_store_fp8(const void* latent, int64_t ld, const int32_t* slots, int64_t T, int64_t D, float kv_scale,
                         void* cache, cudaStream_t s);
void launch_kv_gather_fp8(const void* cache, float kv_scale, const int32_t* indices, int64_t S, int64_t D, void* out,
                          int64_t ld, cudaStream_t s);

// Backend::mla_norm_rope_store (mla_norm_rope_store.cu): latent [T, kv_lora + rope] (row stride
// latent_ld) normalized and rotated in place, q_pe [T, heads, rope] (strides q_st0, q_st1) rotated in
// place, and the latent rows stored to cache[slots[t]] (rows of kv_lora + rope: BF16, or e4m3
// holding the BF16 values / kv_scale when cache_fp8).
constexpr int kMlaNormMaxWidth = 1024;  // kv_lora at most
struct MlaNormRopeStoreParams {
  void* latent;
  int64_t latent_ld;
  void* q_pe;
  int64_t q_st0, q_st1;
  const int32_t* positions;
  const int32_t* slots;
  const float* inv_freq;
  void* cache;
  bool cache_fp8;
  float kv_scale;  // FP8 caches: what the stored values are divided by
  int num_tokens, heads, kv_lora, rope;
  float eps, mscale;
};
// Whether the kernel takes these shapes and alignments (16-byte rows, kv_lora <= kMlaNormMaxWidth).
bool mla_norm_rope_store_fits(const MlaNormRopeStoreParams& p);
// norm [kv_lora] BF16 or F32 (norm_f32).
void launch_mla_norm_rope_store(const MlaNormRopeStoreParams& p, const void* norm, bool norm_f32, cudaStream_t s);

}  // namespace mlaserve::cuda
