// Defaults of Backend's fused ops: the separate ops they stand for, in order. The CPU reference
// runs these; faster backends override them.
#include "kernels/ops.h"

namespace mlaserve {

void Backend::mla_norm_rope_store(Tensor& latent, Tensor& q_pe, const Tensor& norm, float eps, const Tensor& positions,
                                  const RopeTable& rope_table, const Tensor& slots, Tensor& cache, float kv_scale) {
  int64_t T = latent.size(0), R = q_pe.size(2), L = latent.size(1) - R;
  Tensor c_kv = latent.narrow(1, 0, L);
  rmsnorm(c_kv, norm, eps, c_kv);
  Tensor k_pe = latent.narrow(1, L, R).as_strided({T, 1, R}, {latent.stride(0), R, 1});
  rope(q_pe, positions, rope_table);
  rope(k_pe, positions, rope_table);
  kv_store(latent, slots, cache, kv_scale);
}

void Backend::rmsnorm_linear(const Tensor& x, Tensor* residual, const Tensor& norm, float eps, Tensor* normed,
                             const LinearWeight& w, Tensor& out) {
  Tensor n = normed ? *normed : empty(x.dtype(), x.shape());
  if (residual)
    add_rmsnorm(x, *residual, norm, eps, n);
  else
    rmsnorm(x, norm, eps, n);
  linear(n, w, out);
}

void Backend::mla_decode_absorb_out(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                                    float scale, const Tensor& w_uv, Tensor& o_latent, Tensor& out) {
  mla_decode(q, cache, kv_scale, md, scale, o_latent);
  mla_absorb_out(o_latent, w_uv, out);
}

void Backend::moe_route_experts(const Tensor& logits, const Tensor& bias, const MoeRouting& routing, const Tensor& x,
                                const std::vector<GatedMlpWeights>& experts, Tensor& ids, Tensor& weights,
                                Tensor& out) {
  moe_route(logits, bias, routing, ids, weights);
  moe_experts(x, ids, weights, experts, out);
}

}  // namespace mlaserve
