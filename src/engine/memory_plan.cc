#include "engine/memory_plan.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/error.h"

namespace mlaserve {

namespace {
double gb(uint64_t b) { return double(b) / double(1ull << 30); }
}  // namespace

MemoryPlan plan_memory(const MemoryPlanInput& in) {
  MLA_CHECK(in.device_total > 0 && in.device_free <= in.device_total && in.kv_bytes_per_token > 0,
            "memory plan: {} bytes free of {}, {} KV bytes per token", in.device_free, in.device_total,
            in.kv_bytes_per_token);
  MemoryPlan p;
  p.fraction = in.mem_fraction_static > 0 ? in.mem_fraction_static : kDefaultMemFractionStatic;
  p.total = in.device_total;
  p.in_use_before = in.device_total - in.device_free;
  p.static_limit = uint64_t(double(in.device_total) * p.fraction);
  p.activations = in.activation_bytes;
  p.workspace = in.workspace_bytes;
  p.graph_buffers = in.graph_bytes;
  uint64_t reserve = p.activations + p.workspace + p.graph_buffers;
  MLA_CHECK(p.total - p.static_limit >= reserve,
            "--mem-fraction-static {:.3f} leaves {:.2f} GiB outside the weights and KV pool, but a forward needs "
            "{:.2f} GiB (activations {:.2f}, workspaces {:.2f}, CUDA graph buffers {:.2f}): lower it, or lower "
            "--chunked-prefill-size / --max-running-requests",
            p.fraction, gb(p.total - p.static_limit), gb(reserve), gb(p.activations), gb(p.workspace),
            gb(p.graph_buffers));
  MLA_CHECK(p.static_limit > p.in_use_before,
            "--mem-fraction-static {:.3f} ({:.2f} GiB) does not even hold the {:.2f} GiB in use after loading the "
            "weights: raise it, or use more GPUs",
            p.fraction, gb(p.static_limit), gb(p.in_use_before));
  // Other processes may hold memory too: never plan past what is free.
  uint64_t kv = std::min(p.static_limit - p.in_use_before, in.device_free > reserve ? in.device_free - reserve : 0);
  int64_t tokens = int64_t(kv / in.kv_bytes_per_token);
  if (in.max_total_tokens > 0) tokens = std::min(tokens, in.max_total_tokens);
  tokens = tokens / in.page_size * in.page_size;
  MLA_CHECK(tokens >= in.page_size,
            "no room for a KV pool: {:.2f} GiB free after the weights, {:.2f} GiB kept for a forward",
            gb(in.device_free), gb(reserve));
  p.kv_tokens = tokens;
  p.kv_pool = uint64_t(tokens) * in.kv_bytes_per_token;
  return p;
}

std::string MemoryPlan::summary() const {
  return fmt::format(
      "memory plan: {:.2f} GiB device; static {:.2f} GiB ({:.3f}) = weights and runtime {:.2f} + KV pool {:.2f} "
      "({} tokens); kept for a forward: activations {:.2f}, workspaces {:.2f}, CUDA graph buffers {:.2f}; "
      "unplanned {:.2f}",
      gb(total), gb(static_limit), fraction, gb(in_use_before), gb(kv_pool), kv_tokens, gb(activations),
      gb(workspace), gb(graph_buffers),
      gb(total - std::min(total, in_use_before + kv_pool + activations + workspace + graph_buffers)));
}

uint64_t forward_activation_bytes(const ModelConfig& c, int64_t tokens, int64_t context_tokens, int64_t logit_rows,
                                  int64_t elem_bytes) {
  int64_t T = tokens, S = context_tokens, H = c.hidden_size, nh = c.num_attention_heads;
  int64_t L = c.kv_lora_rank, r = c.qk_rope_head_dim, V = c.v_head_dim, nope = c.qk_nope_head_dim;
  int64_t across_layers = 3 * T * H;  // residual stream, hidden, normed
  int64_t queries = T * (c.q_lora_rank + nh * c.qk_head_dim() + (L + r));
  int64_t absorbed = T * nh * ((L + r) + L);
  int64_t mha = S * ((L + r) + nh * (nope + V));
  int64_t attention = queries + std::max(absorbed, mha) + T * nh * V + T * H;
  int64_t k = std::max<int64_t>(c.num_experts_per_tok, 1);
  int64_t I = std::max(c.moe_intermediate_size * std::max<int64_t>(c.n_shared_experts, 1), c.intermediate_size);
  // Routed experts: per (token, expert) pair the gate|up product, its activation and the fp32
  // down output; the shared experts' MLP beside them.
  int64_t mlp = T * k * (3 * c.moe_intermediate_size) + T * 3 * I + T * H;
  uint64_t elems = uint64_t(across_layers + std::max(attention, mlp));
  uint64_t fp32 = uint64_t(T * (c.n_routed_experts + 2 * k) + T * k * H + logit_rows * c.vocab_size) * 4;
  return elems * uint64_t(elem_bytes) + fp32;
}

int64_t kv_pool_tokens(Backend& backend, const ModelConfig& c, DType kv_dtype, const KvPoolRequest& r) {
  uint64_t per_token = uint64_t(c.num_hidden_layers * c.kv_cache_dim()) * dtype_size(kv_dtype);
  uint64_t free = 0, total = 0;
  if (backend.memory_info(free, total)) {
    MemoryPlanInput in;
    in.device_total = total;
    in.device_free = free;
    in.kv_bytes_per_token = per_token;
    int64_t tokens = std::max(r.max_batch_tokens, r.max_running_requests);
    in.activation_bytes = forward_activation_bytes(c, tokens, tokens + r.context_length, r.max_running_requests,
                                                   int64_t(dtype_size(backend.activation_dtype())));
    in.workspace_bytes = uint64_t(256) << 20;  // cuBLASLt handles, split-KV partials, MoE tables
    // Graphs keep their own pool: one decode forward of the largest captured batch, plus the index
    // buffers every graph reads (up to two slot indices per pool token, bounded below).
    if (r.graph_max_bs > 0)
      in.graph_bytes = forward_activation_bytes(c, r.graph_max_bs, 0, r.graph_max_bs,
                                                int64_t(dtype_size(backend.activation_dtype()))) +
                       (uint64_t(64) << 20);
    in.mem_fraction_static = r.mem_fraction_static;
    in.max_total_tokens = r.max_total_tokens;
    in.page_size = r.page_size;
    MemoryPlan plan = plan_memory(in);
    spdlog::info("{}", plan.summary());
    return plan.kv_tokens;
  }
  int64_t tokens = r.max_total_tokens;
  if (tokens <= 0) {
    uint64_t host = uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
    double fraction = r.mem_fraction_static > 0 ? r.mem_fraction_static : 0.3;
    double budget = double(host) * fraction - double(r.host_weight_bytes);
    MLA_CHECK(budget > double(per_token) * 1024,
              "--mem-fraction-static {} leaves no room for the KV pool after {:.2f} GB of weights", fraction,
              double(r.host_weight_bytes) / 1e9);
    tokens = std::min<int64_t>(int64_t(budget / double(per_token)), 1 << 20);
  }
  return std::max<int64_t>(tokens / r.page_size * r.page_size, r.page_size);
}

}  // namespace mlaserve
