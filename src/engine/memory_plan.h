// MemoryPlan: how a device's memory is split at start, SGLang's way: --mem-fraction-static of it
// holds the weights and the KV pool; the rest is kept for what a forward allocates (activations,
// library workspaces, CUDA graph buffers). Computed once after the weights are on the device,
// logged, and the KV pool sized from it. A plan that cannot fit is refused with the reason.
#pragma once

#include <cstdint>
#include <string>

#include "config/model_config.h"
#include "kernels/ops.h"

namespace mlaserve {

struct MemoryPlanInput {
  uint64_t device_total = 0;
  uint64_t device_free = 0;      // after the weights (and the runtime's context) are resident
  uint64_t kv_bytes_per_token = 0;  // all layers
  uint64_t activation_bytes = 0;  // peak of one forward of the largest batch
  uint64_t workspace_bytes = 0;
  uint64_t graph_bytes = 0;
  double mem_fraction_static = 0.0;  // 0: the default for the device
  int64_t max_total_tokens = 0;      // a cap on the pool (0: none)
  int64_t page_size = 1;
};

struct MemoryPlan {
  uint64_t total = 0, in_use_before = 0, static_limit = 0, kv_pool = 0;
  uint64_t activations = 0, workspace = 0, graph_buffers = 0;
  double fraction = 0;
  int64_t kv_tokens = 0;
  std::string summary() const;
};

inline constexpr double kDefaultMemFractionStatic = 0.85;

MemoryPlan plan_memory(const MemoryPlanInput& in);

// Upper bound of what one forward allocates at once for `tokens` new tokens attending to
// `context_tokens` in all (the MHA prefill form decompresses the whole context of a batch) and
// `logit_rows` rows of logits, with activations of `elem_bytes`. Buffers of one layer are freed
// before the next, so the peak is the largest layer phase plus what lives across layers.
uint64_t forward_activation_bytes(const ModelConfig& c, int64_t tokens, int64_t context_tokens, int64_t logit_rows,
                                  int64_t elem_bytes);

// What serving asks of the KV pool.
struct KvPoolRequest {
  int64_t max_total_tokens = 0;
  double mem_fraction_static = 0.0;
  int64_t page_size = 1;
  int64_t max_batch_tokens = 8192;  // new tokens of the largest forward (a prefill chunk)
  int64_t max_running_requests = 256;
  int64_t context_length = 0;
  uint64_t host_weight_bytes = 0;  // as loaded on the host
  int64_t graph_max_bs = 0;        // largest decode batch captured as a graph (0: no graphs)
};

// KV pool tokens for `backend` with the model's weights already on it: the memory plan on a
// device (logged), else --max-total-tokens or a fraction of host memory (0.3 by default).
int64_t kv_pool_tokens(Backend& backend, const ModelConfig& c, DType kv_dtype, const KvPoolRequest& r);

}  // namespace mlaserve
