// MoE router on the device: scores, group limiting and a fused top-k (a block or a warp a token).
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

// The warp-per-token kernel runs from this many scores (tokens x experts), the block-per-token one
// below (and wherever groups do not fit whole lanes). H200, 2026-11-24, `bench_kernels --only moe`:
// V3 (256 experts) crosses between 128 and 256 tokens (7.5 / 6.3 us at 128, 7.7 / 8.1 at 256);
// V2-Lite (64) takes the same time either way up to 1024 tokens.
constexpr int64_t kRouteWarpPerTokenFromScores = 1 << 16;
// The warp form (moe_route_warp.cuh) gives each lane this many experts, and takes the routing where
// each group is a power-of-two run of whole lanes (V2, V3) and there are at most 32 of them a lane.
int moe_route_experts_per_lane(int num_experts);
bool moe_route_warp_fits(const MoeRouteParams& p);
void launch_moe_route(const MoeRouteParams& p, int64_t warp_per_token_from_scores, cudaStream_t stream);

}  // namespace mlaserve::cuda
