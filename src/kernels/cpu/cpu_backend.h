// The CPU reference backend: plain loops, fp32 activations and accumulation, OpenMP across rows.
// It is the truth the CUDA kernels are tested against, so it favours clarity over speed.
#pragma once

#include "kernels/ops.h"

namespace mlaserve::cpu {

class CpuBackend : public Backend {
 public:
  Device device() const override { return Device::CPU; }
  const char* name() const override { return "cpu"; }
  DType activation_dtype() const override { return DType::F32; }
  Tensor empty(DType dtype, Shape shape) override { return Tensor::empty(dtype, std::move(shape)); }

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) override;
  void linear(const Tensor& x, const LinearWeight& w, Tensor& out) override;
  bool supports_fp8_w8a8() const override { return true; }
  void quantize_fp8_per_token_group(const Tensor& x, int64_t group, Tensor& q, Tensor& scales) override;
  void linear_fp8_w8a8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out) override;
  void silu_and_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;
  void rope(Tensor& x, const Tensor& positions, const RopeTable& table) override;
  void kv_store(const Tensor& latent, const Tensor& slots, Tensor& cache, float kv_scale) override;
  void kv_gather(const Tensor& cache, float kv_scale, const Tensor& indices, Tensor& out) override;
  void mla_prefill(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const AttentionMetadata& md, float scale,
                   Tensor& out) override;
  void mla_decode(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md, float scale,
                  Tensor& out) override;
  void mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) override;
  void mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) override;
  void mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                         Tensor& q_latent) override;
  void mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out) override;
  void moe_route(const Tensor& logits, const Tensor& bias, const MoeRouting& routing, Tensor& ids,
                 Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const std::vector<GatedMlpWeights>& experts, Tensor& out) override;
  void sample(const Tensor& logits, const std::vector<SamplingParams>& params, Tensor& out) override;
};

// Shared helpers of the CPU kernels.
// Threads pay off only past some work: a parallel region costs a barrier, which is slow when the
// cores are shared (the server's own threads, a build), so small ops run on the calling thread.
inline bool worth_threads(int64_t work) { return work >= (int64_t(1) << 18); }
// Pointer to element [i, j, 0] of a tensor whose last dim is contiguous.
inline float* row_ptr(const Tensor& t, int64_t i) { return t.data<float>() + i * t.stride(0); }
inline float* row_ptr(const Tensor& t, int64_t i, int64_t j) {
  return t.data<float>() + i * t.stride(0) + j * t.stride(1);
}
// Converts row `r` of a 2-D tensor of any float dtype to fp32.
void load_row_f32(const Tensor& t, int64_t r, float* out);
// Row `slot` of a latent cache in fp32: the stored value (FP8 or other) times the layer's kv_scale.
void load_cache_row(const Tensor& cache, float kv_scale, int64_t slot, float* out);
// Checks an fp32 host tensor with a contiguous last dim and the expected shape.
void check_f32(const Tensor& t, const Shape& shape, const char* what);
void check_i32(const Tensor& t, int64_t n, const char* what);

}  // namespace mlaserve::cpu
