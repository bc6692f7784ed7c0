// How a MoE layer picks its experts: the routing methods of DeepSeek V2 and V3.
#pragma once

#include <cstdint>
#include <string_view>

namespace mlaserve {

enum class TopkMethod : uint8_t {
  Greedy,              // V2-Lite: top-k over all experts
  GroupLimitedGreedy,  // V2: groups ranked by their best expert, top-k inside the best groups
  NoauxTc,             // V3: groups ranked by the sum of their top-2 biased scores
};
enum class ScoringFunc : uint8_t { Softmax, Sigmoid };

std::string_view topk_method_name(TopkMethod m);
std::string_view scoring_func_name(ScoringFunc s);

struct MoeRouting {
  TopkMethod method = TopkMethod::Greedy;
  ScoringFunc scoring = ScoringFunc::Softmax;
  int32_t num_experts = 0;
  int32_t top_k = 0;
  int32_t num_groups = 1;
  int32_t topk_groups = 1;
  bool renormalize = false;  // norm_topk_prob
  float routed_scaling_factor = 1.0f;
  // Shared experts fused into the routed ones (the model appends the shared MLP's chunks after the
  // routed experts): moe_route then writes top_k + num_fused_shared slots a token, ids and weights
  // [T, top_k + num_fused_shared], extra slot j naming expert num_experts + j with weight exactly
  // 1 (a shared expert is not scaled by routed_scaling_factor).
  int32_t num_fused_shared = 0;

  int32_t slots() const { return top_k + num_fused_shared; }
};

}  // namespace mlaserve
