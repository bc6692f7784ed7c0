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
};

}  // namespace mlaserve
