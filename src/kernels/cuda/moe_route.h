// MoE router on the device: scores, group limiting and a fused top-k, one block per token.
// Semantics are exactly CpuBackend::moe_route (ties go to the lower expert index; experts of
// dropped groups become -inf).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

// One thread per expert.
constexpr int kRouteMaxExperts = 256;
constexpr int kRouteMaxTopk = 32;  // top_k + num_fused_shared: one lane writes each slot
constexpr int kRouteMaxGroups = 32;

struct MoeRouteParams {
  const float* logits;  // [T, E], row stride logits_ld
  int64_t logits_ld;
  const float* bias;  // [E] correction bias (noaux_tc) or nullptr
  int32_t* ids;       // [T, k + num_fused_shared] contiguous
  float* weights;     // [T, k + num_fused_shared], row stride weights_ld
  int64_t weights_ld;
  int32_t num_tokens, num_experts, top_k;
  // Slots after the top-k: expert num_experts + j with weight 1 (shared experts fused in).
  int32_t num_fused_shared;
  int32_t num_groups, topk_groups;
  int32_t method;   // TopkMethod as an int: 0 greedy, 1 group-limited greedy, 2 noaux_tc
  bool softmax;     // else sigmoid
  bool renormalize;
  float routed_scaling_factor;
};

void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream);

}  // namespace mlaserve::cuda
