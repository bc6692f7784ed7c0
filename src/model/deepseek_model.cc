#include "model/deepseek_model.h"

#include <cstring>

#include "common/error.h"
#include "model/backend_weights.h"
#include "model/rope.h"

namespace mlaserve {

namespace {

// Splits kv_b_proj [H * (nope + v), kv_lora] into W_UK [H, nope, kv_lora] and W_UV [H, v, kv_lora].
void split_kv_b(const LinearWeight& kv_b, int64_t H, int64_t nope, int64_t v, Tensor& w_uk, Tensor& w_uv) {
  Tensor w = dequantize(kv_b);
  int64_t L = w.size(1);
  w_uk = Tensor::empty(DType::F32, {H, nope, L});
  w_uv = Tensor::empty(DType::F32, {H, v, L});
  for (int64_t h = 0; h < H; ++h) {
    const float* src = w.data<float>() + h * (nope + v) * L;
    std::copy_n(src, nope * L, w_uk.data<float>() + h * nope * L);
    std::copy_n(src + nope * L, v * L, w_uv.data<float>() + h * v * L);
  }
}

Tensor stack_rows(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  Tensor out = Tensor::empty(ca.dtype(), {ca.size(0) + cb.size(0), ca.size(1)});
  std::memcpy(out.raw(), ca.raw(), ca.nbytes());
  std::memcpy(static_cast<char*>(out.raw()) + ca.nbytes(), cb.raw(), cb.nbytes());
  return out;
}

// Stacks gate over up into gate_up (FP8 blocks too, when the inter size is whole blocks), so the
// MLP runs one GEMM for both; the weights may already be on the backend (dummy ones made there).
void stack_gate_up(GatedMlpWeights& m, Backend& backend) {
  const LinearWeight &g = m.gate, &u = m.up;
  if (!g.weight.defined() || g.weight.dtype() != u.weight.dtype() || g.weight.shape() != u.weight.shape() ||
      g.is_fp8_block() != u.is_fp8_block() || (g.is_fp8_block() && g.out_features() % g.block_n != 0))
    return;
  LinearWeight s = g;
  s.weight = stack_rows(backend.to_host(g.weight), backend.to_host(u.weight));
  if (g.is_fp8_block()) s.scale_inv = stack_rows(backend.to_host(g.scale_inv), backend.to_host(u.scale_inv));
  m.gate_up = s;
  m.gate = m.up = LinearWeight{};
}

}  // namespace

DeepseekModel::DeepseekModel(ModelConfig config, ModelWeights weights, Backend& backend)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend) {
  rope_ = make_rope_table(config_);
  rope_.inv_freq = backend_.to_backend(rope_.inv_freq);
  softmax_scale_ = float(config_.softmax_scale());
  for (const LayerWeights& l : weights_.layers) {
    Tensor uk, uv;
    LinearWeight kv_b = l.attn.kv_b_proj;
    kv_b.weight = backend_.to_host(kv_b.weight);  // dummy weights may be made on the device
    split_kv_b(kv_b, config_.num_attention_heads, config_.qk_nope_head_dim, config_.v_head_dim, uk, uv);
    w_uk_.push_back(backend_.to_backend(uk));
    w_uv_.push_back(backend_.to_backend(uv));
  }
  for (LayerWeights& l : weights_.layers) {
    if (!l.is_moe) stack_gate_up(l.mlp, backend_);
    else if (l.moe.has_shared) stack_gate_up(l.moe.shared, backend_);
  }
  move_weights_to_backend(weights_, backend_);
}

Tensor DeepseekModel::forward(const ForwardBatch& host_batch, KvPool& kv) {
  return forward_on_backend(batch_to_backend(host_batch, backend_), kv);
}

Tensor DeepseekModel::forward_on_backend(ForwardBatch batch, KvPool& kv) {
  Backend& ops = backend_;
  // Attention plans (split-KV schedules) are made by the first layer and reused by the others.
  batch.attn.batch_id = ++forward_count_;
  const ModelConfig& c = config_;
  int64_t T = batch.num_tokens(), H = c.hidden_size;
  MLA_CHECK(T > 0, "forward: empty batch");
  MLA_CHECK(kv.num_layers() == c.num_hidden_layers && kv.kv_dim() == c.kv_cache_dim(),
            "forward: KV pool of {} layers x {} does not fit the model", kv.num_layers(), kv.kv_dim());
  DType act = ops.activation_dtype();

  Tensor hidden = ops.empty(act, {T, H}), residual = ops.empty(act, {T, H}), normed = ops.empty(act, {T, H});
  ops.embedding(batch.input_ids, weights_.embed, residual);
  float eps = float(c.rms_norm_eps);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const LayerWeights& w = weights_.layers[size_t(l)];
    // The residual stream lives in `residual`; each block reads its normalized copy.
    if (l == 0) ops.rmsnorm(residual, w.input_norm, eps, normed);
    else ops.add_rmsnorm(hidden, residual, w.input_norm, eps, normed);
    Tensor attn_out = attention(l, normed, batch, kv);
    ops.add_rmsnorm(attn_out, residual, w.post_attention_norm, eps, normed);
    hidden = w.is_moe ? moe(w.moe, normed) : dense_mlp(w.mlp, normed);
  }
  ops.add_rmsnorm(hidden, residual, weights_.final_norm, eps, normed);

  int64_t R = batch.logit_rows.numel();
  Tensor rows = ops.empty(act, {R, H});
  ops.embedding(batch.logit_rows, normed, rows);  // a row gather
  Tensor logits = ops.empty(DType::F32, {R, c.vocab_size});
  ops.linear(rows, weights_.lm_head, logits);
  return logits;
}

Tensor DeepseekModel::attention(int64_t l, const Tensor& x, const ForwardBatch& batch, KvPool& kv) {
  Backend& ops = backend_;
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[size_t(l)].attn;
  DType act = ops.activation_dtype();
  int64_t T = x.size(0), nh = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  int64_t L = c.kv_lora_rank, V = c.v_head_dim, qk = c.qk_head_dim();

  // Queries: q = q_b(rmsnorm(q_a(x))) or q_proj(x); [T, nh, nope + rope].
  Tensor q = ops.empty(act, {T, nh * qk});
  if (c.q_lora_rank > 0) {
    Tensor qa = ops.empty(act, {T, c.q_lora_rank});
    apply_linear(ops, x, w.q_a_proj, qa);
    ops.rmsnorm(qa, w.q_a_norm, float(c.rms_norm_eps), qa);
    apply_linear(ops, qa, w.q_b_proj, q);
  } else {
    apply_linear(ops, x, w.q_proj, q);
  }
  Tensor q3 = q.reshape({T, nh, qk});
  Tensor q_nope = q3.narrow(2, 0, nope), q_pe = q3.narrow(2, nope, rope);

  // The token's cache entry: [rmsnorm(c_kv), rope(k_pe)], kv_lora + rope wide.
  Tensor latent = ops.empty(act, {T, L + rope});
  apply_linear(ops, x, w.kv_a_proj, latent);
  Tensor c_kv = latent.narrow(1, 0, L);
  ops.rmsnorm(c_kv, w.kv_a_norm, float(c.rms_norm_eps), c_kv);
  Tensor k_pe = latent.narrow(1, L, rope).as_strided({T, 1, rope}, {latent.stride(0), rope, 1});
  ops.rope(q_pe, batch.positions, rope_);
  ops.rope(k_pe, batch.positions, rope_);
  Tensor& cache = kv.layer(l);
  // A cache scale serves FP8's narrow range; wider caches hold the latents as they are.
  float kv_scale = cache.dtype() == DType::F8_E4M3 ? w.kv_cache_scale : 1.0f;
  ops.kv_store(latent, batch.out_slots, cache, kv_scale);

  Tensor out = ops.empty(act, {T, nh, V});
  if (batch.use_absorbed()) {
    // Absorbed: q_nope·W_UK makes a latent query; attention runs over the 576-wide cache rows
    // shared by all heads; W_UV turns the latent output back into per-head values.
    Tensor q_latent = ops.empty(act, {T, nh, L + rope});
    ops.mla_absorb_q(q_nope, q_pe, w_uk_[size_t(l)], q_latent);
    Tensor o_latent = ops.empty(act, {T, nh, L});
    ops.mla_decode(q_latent, cache, kv_scale, batch.attn, softmax_scale_, o_latent);
    ops.mla_absorb_out(o_latent, w_uv_[size_t(l)], out);
  } else {
    // MHA: decompress every context token's keys and values with kv_b.
    int64_t S = batch.attn.kv_indices.numel();
    Tensor ctx = ops.empty(act, {S, L + rope});
    ops.kv_gather(cache, kv_scale, batch.attn.kv_indices, ctx);
    Tensor kvb = ops.empty(act, {S, nh * (nope + V)});
    apply_linear(ops, ctx.narrow(1, 0, L), w.kv_b_proj, kvb);
    ops.mla_prefill(q3, kvb.reshape({S, nh, nope + V}), ctx.narrow(1, L, rope), batch.attn, softmax_scale_, out);
  }
  Tensor o = ops.empty(act, {T, c.hidden_size});
  apply_linear(ops, out.reshape({T, nh * V}), w.o_proj, o);
  ops.all_reduce(o);
  return o;
}

Tensor DeepseekModel::dense_mlp(const GatedMlpWeights& w, const Tensor& x) {
  Backend& ops = backend_;
  int64_t T = x.size(0), I = w.down.in_features();
  Tensor g = ops.empty(ops.activation_dtype(), {T, I});
  if (w.gate_up.weight.defined()) {
    Tensor gu = ops.empty(ops.activation_dtype(), {T, 2 * I});
    apply_linear(ops, x, w.gate_up, gu);
    ops.silu_and_mul(gu.narrow(1, 0, I), gu.narrow(1, I, I), g);
  } else {
    Tensor u = ops.empty(ops.activation_dtype(), {T, I});
    apply_linear(ops, x, w.gate, g);
    apply_linear(ops, x, w.up, u);
    ops.silu_and_mul(g, u, g);
  }
  Tensor out = ops.empty(ops.activation_dtype(), {T, x.size(1)});
  apply_linear(ops, g, w.down, out);
  return out;
}

Tensor DeepseekModel::moe(const MoeWeights& w, const Tensor& x) {
  Backend& ops = backend_;
  MoeRouting routing = config_.moe_routing();
  int64_t T = x.size(0), k = routing.top_k;
  Tensor router_logits = ops.empty(DType::F32, {T, routing.num_experts});
  ops.linear(x, LinearWeight{w.router, {}}, router_logits);
  Tensor ids = ops.empty(DType::I32, {T, k}), weights = ops.empty(DType::F32, {T, k});
  ops.moe_route(router_logits, w.correction_bias, routing, ids, weights);
  Tensor out = ops.empty(ops.activation_dtype(), {T, x.size(1)});
  ops.moe_experts(x, ids, weights, w.experts, out);
  if (w.has_shared) ops.add(out, dense_mlp(w.shared, x));
  ops.all_reduce(out);
  return out;
}

}  // namespace mlaserve
