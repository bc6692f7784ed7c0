#include "model/deepseek_model.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <string>

#include "common/error.h"
#include "model/backend_weights.h"
#include "model/rope.h"

namespace mlaserve {

namespace {

Tensor stack_rows(const Tensor& a, const Tensor& b) {
  Tensor ca = a.contiguous(), cb = b.contiguous();
  Tensor out = Tensor::empty(ca.dtype(), {ca.size(0) + cb.size(0), ca.size(1)});
  std::memcpy(out.raw(), ca.raw(), ca.nbytes());
  std::memcpy(static_cast<char*>(out.raw()) + ca.nbytes(), cb.raw(), cb.nbytes());
  return out;
}

// Whether b's rows can follow a's in one weight: same dtype and input width, and FP8 blocks only
// of one size with whole blocks of a's rows (a block may not straddle the two; b's last may be
// ragged, as kv_a's 576 rows are: it stays the last).
bool stackable(const LinearWeight& a, const LinearWeight& b) {
  if (!a.weight.defined() || !b.weight.defined() || a.weight.dtype() != b.weight.dtype() ||
      a.in_features() != b.in_features() || a.is_fp8_block() != b.is_fp8_block())
    return false;
  return !a.is_fp8_block() || (a.block_n == b.block_n && a.block_k == b.block_k && a.out_features() % a.block_n == 0 &&
                               a.pad_rows == 0 && b.pad_rows == 0);
}

// a's rows over b's (FP8 block scales too), on the host: the weights may already be on the
// backend (dummy ones made there).
LinearWeight stack_linears(const LinearWeight& a, const LinearWeight& b, Backend& backend) {
  LinearWeight s = a;
  s.weight = stack_rows(backend.to_host(a.weight), backend.to_host(b.weight));
  if (a.is_fp8_block()) s.scale_inv = stack_rows(backend.to_host(a.scale_inv), backend.to_host(b.scale_inv));
  return s;
}

// Stacks gate over up into gate_up, so the MLP runs one GEMM for both.
void stack_gate_up(GatedMlpWeights& m, Backend& backend) {
  if (!stackable(m.gate, m.up) || m.gate.weight.shape() != m.up.weight.shape()) return;
  m.gate_up = stack_linears(m.gate, m.up, backend);
  m.gate = m.up = LinearWeight{};
}

// Columns [start, start + n) of a host matrix, copied contiguous a row at a time.
Tensor cut_columns(const Tensor& t, int64_t start, int64_t n) {
  Tensor src = t.contiguous(), out = Tensor::empty(t.dtype(), {t.size(0), n});
  size_t es = dtype_size(t.dtype());
  for (int64_t r = 0; r < t.size(0); ++r)
    std::memcpy(static_cast<char*>(out.raw()) + size_t(r * n) * es,
                static_cast<const char*>(src.raw()) + size_t(r * t.size(1) + start) * es, size_t(n) * es);
  return out;
}

// Chunk c of a down matrix: columns [cI, (c+1)I), with their FP8 block scales.
LinearWeight chunk_columns(const LinearWeight& w, int64_t c, int64_t I) {
  LinearWeight out = w;
  out.weight = cut_columns(w.weight, c * I, I);
  if (w.is_fp8_block()) out.scale_inv = cut_columns(w.scale_inv, c * I / w.block_k, I / w.block_k);
  return out;
}

// Why a layer's shared MLP cannot run as ns experts of width I ("" when it can): the backend's
// limit on experts, routed experts of another width, or weights that do not cut into chunks
// (an FP8 block may not straddle two of them).
std::string why_not_fusable(const MoeWeights& m, int64_t ns, int64_t I, const Backend& backend) {
  int64_t E = int64_t(m.experts.size());
  if (E + ns > backend.max_moe_experts())
    return fmt::format("{} routed + {} shared experts exceed the {} that {}'s moe_experts takes", E, ns,
                       backend.max_moe_experts(), backend.name());
  if (E == 0 || m.experts[0].gate.out_features() != I) return "the routed experts are not moe_intermediate_size wide";
  const LinearWeight &g = m.shared.gate, &u = m.shared.up, &d = m.shared.down;
  if (!g.weight.defined() || !u.weight.defined() || !d.weight.defined())
    return "the shared experts' gate, up and down are not apart";
  int64_t H = d.out_features();
  if (g.weight.shape() != Shape{ns * I, H} || u.weight.shape() != Shape{ns * I, H} ||
      d.weight.shape() != Shape{H, ns * I})
    return fmt::format("shared experts of shapes {}, {}, {} do not cut into {} experts of {}", g.weight.describe(),
                       u.weight.describe(), d.weight.describe(), ns, I);
  const GatedMlpWeights& routed = m.experts[0];
  for (const LinearWeight* w : {&g, &u, &d})
    if (w->is_fp8_block() != routed.gate.is_fp8_block() || w->is_fp8_block() != routed.down.is_fp8_block())
      return "the routed and the shared experts are not both FP8 or both unquantized";
  // Scales must be [blocks of rows, blocks of columns] with whole blocks in every chunk (one
  // chunk is the whole MLP: nothing to cut).
  auto whole_blocks = [&](const LinearWeight& w, int dim, int64_t block) {
    return !w.is_fp8_block() || ns == 1 ||
           (I % block == 0 && w.scale_inv.ndim() == 2 && w.scale_inv.size(dim) == ns * I / block);
  };
  if (!whole_blocks(g, 0, g.block_n) || !whole_blocks(u, 0, u.block_n) || !whole_blocks(d, 1, d.block_k))
    return fmt::format("FP8 blocks (gate and up: {} rows, down: {} columns) straddle shared-expert chunks of {}",
                       g.block_n, d.block_k, I);
  return "";
}

// Appends the shared MLP's ns chunks to the experts and drops the shared weights (the chunks of
// gate and up are views of them; down's are copies; one chunk is the weights themselves), so the
// model holds one copy of them.
void fuse_shared(MoeWeights& m, int64_t ns, int64_t I, Backend& backend) {
  if (ns == 1) {
    m.experts.push_back({m.shared.gate, m.shared.up, m.shared.down});
  } else {
    GatedMlpWeights s{backend.host_copy(m.shared.gate), backend.host_copy(m.shared.up),
                      backend.host_copy(m.shared.down)};
    for (int64_t c = 0; c < ns; ++c)
      m.experts.push_back({row_range(s.gate, c * I, I), row_range(s.up, c * I, I), chunk_columns(s.down, c, I)});
  }
  m.shared = GatedMlpWeights{};
}

}  // namespace

DeepseekModel::DeepseekModel(ModelConfig config, ModelWeights weights, Backend& backend, Options options)
    : config_(std::move(config)), weights_(std::move(weights)), backend_(backend), options_(options) {
  MLA_CHECK(options_.shared_fusion_max_tokens >= 0, "shared_fusion_max_tokens must not be negative, got {}",
            options_.shared_fusion_max_tokens);
  rope_ = make_rope_table(config_);
  rope_.inv_freq = backend_.to_backend(rope_.inv_freq);
  softmax_scale_ = float(config_.softmax_scale());
  for (const LayerWeights& l : weights_.layers)  // host_copy: dummy weights may be made on the device
    absorbed_.push_back(make_absorbed_weights(backend_.host_copy(l.attn.kv_b_proj), config_.num_attention_heads,
                                              config_.qk_nope_head_dim, config_.v_head_dim, backend_,
                                              options_.fp8_bmm));
  // Before gate and up are stacked (experts keep theirs apart) and before the weights move to the
  // backend (the chunks move with the routed experts).
  fuse_shared_experts();
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    LayerWeights& l = weights_.layers[i];
    if (!l.is_moe) stack_gate_up(l.mlp, backend_);
    else if (l.moe.has_shared && shared_chunks_[i] == 0) stack_gate_up(l.moe.shared, backend_);
  }
  fuse_q_kv_a();
  move_weights_to_backend(weights_, backend_);
  // The routed experts only: the shared chunks also run as dense MLPs (moe()).
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    MoeWeights& m = weights_.layers[i].moe;
    if (weights_.layers[i].is_moe) backend_.pack_moe_experts(m.experts, m.experts.size() - size_t(shared_chunks_[i]));
  }
}

void DeepseekModel::fuse_q_kv_a() {
  if (!options_.fuse_q_kv_a) return;
  int64_t stacked = 0;
  for (LayerWeights& l : weights_.layers) {
    AttentionWeights& a = l.attn;
    LinearWeight& q = config_.q_lora_rank > 0 ? a.q_a_proj : a.q_proj;
    if (!stackable(q, a.kv_a_proj)) continue;
    a.q_kv_a = stack_linears(q, a.kv_a_proj, backend_);
    q = a.kv_a_proj = LinearWeight{};
    ++stacked;
  }
  if (stacked < int64_t(weights_.layers.size()))
    spdlog::info("{} and kv_a_proj_with_mqa run as two GEMMs in {} of {} layers (their FP8 blocks or dtypes differ)",
                 config_.q_lora_rank > 0 ? "q_a_proj" : "q_proj", int64_t(weights_.layers.size()) - stacked,
                 weights_.layers.size());
}

void DeepseekModel::fuse_shared_experts() {
  shared_chunks_.assign(weights_.layers.size(), 0);
  int64_t ns = config_.n_shared_experts, I = config_.moe_intermediate_size, with_shared = 0, fused = 0;
  std::string why_not;
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    MoeWeights& m = weights_.layers[i].moe;
    if (!weights_.layers[i].is_moe || !m.has_shared) continue;
    ++with_shared;
    if (!options_.fuse_shared_experts) {
      why_not = "shared experts fusion is disabled";
      continue;
    }
    if (std::string why = why_not_fusable(m, ns, I, backend_); !why.empty()) {
      why_not = why;
      continue;
    }
    fuse_shared(m, ns, I, backend_);
    shared_chunks_[i] = ns;
    ++fused;
  }
  if (fused > 0)
    spdlog::info("shared experts fused into the routed experts in {} of {} MoE layers ({} a layer, for batches of up "
                 "to {} tokens)", fused, with_shared, ns, options_.shared_fusion_max_tokens);
  if (fused < with_shared)
    spdlog::info("shared experts of {} MoE layers run apart: {}", with_shared - fused, why_not);
}

namespace {

// The forms of an activation of T rows its readers take: quantized in groups of `group` for those
// that run as FP8 W8A8 on this backend and want it so (Backend::wants_fp8_input), BF16 rows (plain)
// for the others (a reader of other blocks takes the plain rows).
struct Readers {
  bool plain = false, fp8 = false;
  int64_t group = 0;
};

Readers readers_of(const Backend& ops, int64_t T, std::initializer_list<const LinearWeight*> weights) {
  Readers r;
  for (const LinearWeight* w : weights) {
    if (!w->weight.defined()) continue;
    if (runs_w8a8(ops, *w) && ops.wants_fp8_input(T, *w) && (!r.fp8 || w->block_k == r.group)) {
      r.fp8 = true, r.group = w->block_k;
    } else {
      r.plain = true;
    }
  }
  if (!r.fp8) r.plain = true;
  return r;
}

}  // namespace

DeepseekModel::BlockInput DeepseekModel::normalize(const Tensor& x, Tensor* residual, const Tensor& w, Tensor out,
                                                   std::initializer_list<const LinearWeight*> readers) {
  Backend& ops = backend_;
  const float eps = float(config_.rms_norm_eps);
  const Readers r = readers_of(ops, x.size(0), readers);
  BlockInput in;
  if (r.plain) in.x = out;
  if (!r.fp8) {
    in.deferred = DeferredNorm{x, residual, &w};
    return in;
  }
  in.fp8 = ops.empty_fp8_activation(x.size(0), x.size(1), r.group);
  ops.rmsnorm_fp8(x, residual, w, eps, in.x, in.fp8);
  return in;
}

void DeepseekModel::first_linear(BlockInput& in, const LinearWeight& w, Tensor& out, bool later_readers) {
  if (in.deferred) {
    const DeferredNorm d = *in.deferred;
    in.deferred.reset();
    backend_.rmsnorm_linear(d.x, d.residual, *d.w, float(config_.rms_norm_eps), later_readers ? &in.x : nullptr, w,
                            out);
    if (!later_readers) in.x = Tensor{};  // never written: a later read fails loudly
  } else {
    apply_linear(backend_, in.x, in.fp8, w, out);
  }
}

Tensor DeepseekModel::forward(const ForwardBatch& host_batch, KvPool& kv) {
  return forward_on_backend(batch_to_backend(host_batch, backend_), kv);
}

Tensor DeepseekModel::forward_on_backend(ForwardBatch batch, KvPool& kv) {
  Backend& ops = backend_;
  // Attention plans (split-KV schedules) are made by the first layer and reused by the others.
  batch.attn.batch_id = ++forward_count_;
  batch.attn.kv_page_size = int32_t(kv.page_size());
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
    const AttentionWeights& a = w.attn;
    // The residual stream lives in `residual`; each block reads its normalized copy.
    BlockInput attn_in = normalize(l == 0 ? residual : hidden, l == 0 ? nullptr : &residual, w.input_norm, normed,
                                   {&a.q_kv_a, &a.q_proj, &a.q_a_proj, &a.kv_a_proj});
    Tensor attn_out = attention(l, attn_in, batch, kv);
    if (w.is_moe)  // the router and the experts read BF16 rows (the FP8 experts quantize beside their sort)
      hidden = moe(l, normalize(attn_out, &residual, w.post_attention_norm, normed, {}));
    else
      hidden = dense_mlp(w.mlp, normalize(attn_out, &residual, w.post_attention_norm, normed,
                                          {&w.mlp.gate_up, &w.mlp.gate, &w.mlp.up}));
  }
  ops.add_rmsnorm(hidden, residual, weights_.final_norm, eps, normed);

  int64_t R = batch.logit_rows.numel();
  Tensor rows = ops.empty(act, {R, H});
  ops.embedding(batch.logit_rows, normed, rows);  // a row gather
  Tensor logits = ops.empty(DType::F32, {R, c.vocab_size});
  ops.linear(rows, weights_.lm_head, logits);
  return logits;
}

Tensor DeepseekModel::attention(int64_t l, BlockInput in, const ForwardBatch& batch, KvPool& kv) {
  Backend& ops = backend_;
  const ModelConfig& c = config_;
  const AttentionWeights& w = weights_.layers[size_t(l)].attn;
  DType act = ops.activation_dtype();
  int64_t T = in.rows(), nh = c.num_attention_heads, nope = c.qk_nope_head_dim, rope = c.qk_rope_head_dim;
  int64_t L = c.kv_lora_rank, V = c.v_head_dim, qk = c.qk_head_dim();

  // q_proj(x) (or q_a(x) with q_lora) and the token's cache entry kv_a(x) = [c_kv, k_pe] read the
  // same x: with q_kv_a both are column views of one GEMM's output, rows Nq + L + rope apart.
  int64_t Nq = c.q_lora_rank > 0 ? c.q_lora_rank : nh * qk;
  Tensor q_or_qa, latent;
  if (w.q_kv_a.weight.defined()) {
    Tensor both = ops.empty(act, {T, Nq + L + rope});
    first_linear(in, w.q_kv_a, both, false);
    q_or_qa = both.narrow(1, 0, Nq);
    latent = both.narrow(1, Nq, L + rope);
  } else {
    q_or_qa = ops.empty(act, {T, Nq});
    first_linear(in, c.q_lora_rank > 0 ? w.q_a_proj : w.q_proj, q_or_qa, true);  // and kv_a
    latent = ops.empty(act, {T, L + rope});
    apply_linear(ops, in.x, in.fp8, w.kv_a_proj, latent);
  }
  // Queries: q = q_b(rmsnorm(q_a(x))) or q_proj(x); [T, nh, nope + rope], rows q.stride(0) apart
  // (reshape takes contiguous tensors only).
  Tensor q = q_or_qa;
  if (c.q_lora_rank > 0) {
    BlockInput qa = normalize(q_or_qa, nullptr, w.q_a_norm, q_or_qa, {&w.q_b_proj});
    q = ops.empty(act, {T, nh * qk});
    first_linear(qa, w.q_b_proj, q, false);
  }
  Tensor q3 = q.as_strided({T, nh, qk}, {q.stride(0), qk, 1});
  Tensor q_nope = q3.narrow(2, 0, nope), q_pe = q3.narrow(2, nope, rope);

  // rmsnorm(c_kv), rope(k_pe) and rope(q_pe), then the latent rows into the cache (one op).
  Tensor& cache = kv.layer(l);
  // A cache scale serves FP8's narrow range; wider caches hold the latents as they are.
  float kv_scale = cache.dtype() == DType::F8_E4M3 ? w.kv_cache_scale : 1.0f;
  ops.mla_norm_rope_store(latent, q_pe, w.kv_a_norm, float(c.rms_norm_eps), batch.positions, rope_, batch.out_slots,
                          cache, kv_scale);

  Tensor out = ops.empty(act, {T, nh, V});
  if (batch.use_absorbed()) {
    // Absorbed: q_nope·W_UK makes a latent query; attention runs over the 576-wide cache rows
    // shared by all heads; W_UV turns the latent output back into per-head values.
    Tensor q_latent = ops.empty(act, {T, nh, L + rope});
    absorb_q(ops, absorbed_[size_t(l)], q_nope, q_pe, q_latent);
    Tensor o_latent = ops.empty(act, {T, nh, L});
    decode_absorbed(ops, absorbed_[size_t(l)], q_latent, cache, kv_scale, batch.attn, softmax_scale_, o_latent, out);
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

Tensor DeepseekModel::dense_mlp(const GatedMlpWeights& w, BlockInput in) {
  Backend& ops = backend_;
  int64_t T = in.rows(), I = w.down.in_features();
  DType act = ops.activation_dtype();
  Tensor gate, up;
  if (w.gate_up.weight.defined()) {
    Tensor gu = ops.empty(act, {T, 2 * I});
    first_linear(in, w.gate_up, gu, false);
    gate = gu.narrow(1, 0, I), up = gu.narrow(1, I, I);
  } else {
    gate = ops.empty(act, {T, I}), up = ops.empty(act, {T, I});
    first_linear(in, w.gate, gate, true);  // and up
    apply_linear(ops, in.x, in.fp8, w.up, up);
  }
  // silu(gate) * up, quantized by the same kernel where down runs as FP8 W8A8.
  const Readers r = readers_of(ops, T, {&w.down});
  BlockInput h;
  if (r.fp8) {
    h.fp8 = ops.empty_fp8_activation(T, I, r.group);
    ops.silu_and_mul_fp8(gate, up, h.x, h.fp8);
  } else {
    h.x = ops.empty(act, {T, I});
    ops.silu_and_mul(gate, up, h.x);
  }
  Tensor out = ops.empty(act, {T, w.down.out_features()});
  apply_linear(ops, h.x, h.fp8, w.down, out);
  return out;
}

Tensor DeepseekModel::moe(int64_t layer, BlockInput in) {
  Backend& ops = backend_;
  const MoeWeights& w = weights_.layers[size_t(layer)].moe;
  MoeRouting routing = config_.moe_routing();
  int64_t T = in.rows(), chunks = shared_chunks_[size_t(layer)];
  // A fused layer's shared chunks are the last experts: few tokens route to them (every token,
  // weight 1); more tokens run them as dense MLPs below, which the routed ids never name.
  bool route_shared = chunks > 0 && T <= options_.shared_fusion_max_tokens;
  if (route_shared) routing.num_fused_shared = int32_t(chunks);
  Tensor router_logits = ops.empty(DType::F32, {T, routing.num_experts});
  first_linear(in, LinearWeight{w.router, {}}, router_logits, true);  // and the experts
  const Tensor& x = in.x;
  Tensor ids = ops.empty(DType::I32, {T, routing.slots()}), weights = ops.empty(DType::F32, {T, routing.slots()});
  Tensor out = ops.empty(ops.activation_dtype(), {T, x.size(1)});
  ops.moe_route_experts(router_logits, w.correction_bias, routing, x, w.experts, ids, weights, out);
  if (chunks > 0 && !route_shared) {
    for (size_t e = w.experts.size() - size_t(chunks); e < w.experts.size(); ++e)
      ops.add(out, dense_mlp(w.experts[e], BlockInput{x, {}, {}}));
  } else if (chunks == 0 && w.has_shared) {
    ops.add(out, dense_mlp(w.shared, BlockInput{x, {}, {}}));
  }
  ops.all_reduce(out);
  return out;
}

}  // namespace mlaserve
