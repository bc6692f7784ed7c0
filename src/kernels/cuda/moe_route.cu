// Router kernel: one block per token, one thread per expert. A single warp per token spent ~10 us
// on the serial chain of group scores and k arg-max rounds (H200, V3 at 1 token); here the group
// scores are one short scan per group, and each expert finds its place in the top-k by counting the
// experts that beat it, all experts at once.
#include <cfloat>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kThreads = kRouteMaxExperts, kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;

// (v, e) beats (w, f): larger value, or equal value and lower index (as torch.topk and the CPU).
__device__ __forceinline__ bool beats(float v, int e, float w, int f) { return v > w || (v == w && e < f); }

// Block-wide max and sum (every thread gets the result).
__device__ float block_max(float v, float* red) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = red[0];
  for (int w = 1; w < kWarps; ++w) v = fmaxf(v, red[w]);
  return v;
}
__device__ double block_sum(double v, double* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  v = 0;
  for (int w = 0; w < kWarps; ++w) v += red[w];
  return v;
}

__global__ void __launch_bounds__(kThreads) moe_route_kernel(MoeRouteParams p) {
  pdl_wait_and_trigger();
  __shared__ float s_choice[kRouteMaxExperts], s_group[kRouteMaxGroups], s_max[kWarps];
  __shared__ double s_sum[kWarps];
  __shared__ float s_slot_score[kRouteMaxTopk];
  __shared__ int s_slot_id[kRouteMaxTopk];
  const int t = blockIdx.x, e = threadIdx.x, lane = e % 32, E = p.num_experts;
  const bool valid = e < E;
  const float logit = valid ? p.logits[int64_t(t) * p.logits_ld + e] : -INFINITY;

  float score;
  if (p.softmax) {
    const float mx = block_max(logit, s_max);
    const float x = valid ? expf(logit - mx) : 0.0f;
    const double sum = block_sum(x, s_sum);  // the reference sums in double
    score = float(double(x) / sum);
  } else {
    score = 1.0f / (1.0f + expf(-logit));
  }
  // Experts are chosen by `choice` (biased for noaux_tc); their weights are the unbiased scores.
  float choice = valid ? score : -INFINITY;
  if (valid && p.method == 2 && p.bias) choice += p.bias[e];
  s_choice[e] = choice;
  __syncthreads();

  if (p.method != 0) {
    // Thread g scores group g (its best, or for noaux_tc its best two), then every expert keeps
    // its value only if its group ranks among the top topk_groups (ties to the lower group).
    const int per_group = E / p.num_groups;
    if (e < p.num_groups) {
      float t1 = -INFINITY, t2 = -INFINITY;
      for (int j = 0; j < per_group; ++j) {
        float v = s_choice[e * per_group + j];
        if (v > t1) {
          t2 = t1;
          t1 = v;
        } else if (v > t2) {
          t2 = v;
        }
      }
      s_group[e] = p.method == 2 ? t1 + t2 : t1;
    }
    __syncthreads();
    if (valid) {
      const int g = e / per_group;
      const float mine = s_group[g];
      int rank = 0;
      for (int h = 0; h < p.num_groups; ++h) rank += beats(s_group[h], h, mine, g);
      if (rank >= p.topk_groups) choice = -INFINITY;
    }
    s_choice[e] = choice;  // every read of s_choice above came before the barrier
    __syncthreads();
  }

  // Expert e's place in the top-k: how many experts beat it.
  if (valid) {
    int rank = 0;
    for (int j = 0; j < E; ++j) rank += beats(s_choice[j], j, choice, e);
    if (rank < p.top_k) {
      s_slot_id[rank] = e;
      s_slot_score[rank] = score;
    }
  }
  __syncthreads();
  if (e >= 32) return;
  const float my_score = lane < p.top_k ? s_slot_score[lane] : 0.0f;
  float sum = 0.0f;  // in slot order, as the reference
  for (int j = 0; j < p.top_k; ++j) sum += __shfl_sync(kFull, my_score, j);
  const float norm = (p.renormalize && p.top_k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
  const int slots = p.top_k + p.num_fused_shared;
  if (lane < p.top_k) {
    p.ids[int64_t(t) * slots + lane] = s_slot_id[lane];
    p.weights[int64_t(t) * p.weights_ld + lane] = my_score * norm * p.routed_scaling_factor;
  } else if (lane < slots) {  // a fused shared expert: every token, weight 1
    p.ids[int64_t(t) * slots + lane] = E + lane - p.top_k;
    p.weights[int64_t(t) * p.weights_ld + lane] = 1.0f;
  }
}

}  // namespace

void launch_moe_route(const MoeRouteParams& p, cudaStream_t stream) {
  MLA_CHECK(p.num_experts <= kRouteMaxExperts && p.num_fused_shared >= 0 &&
                p.top_k + p.num_fused_shared <= kRouteMaxTopk && p.num_groups <= kRouteMaxGroups,
            "moe_route on CUDA supports up to {} experts, {} slots (top-k + fused shared) and {} groups; got {}, "
            "{} + {}, {}",
            kRouteMaxExperts, kRouteMaxTopk, kRouteMaxGroups, p.num_experts, p.top_k, p.num_fused_shared, p.num_groups);
  if (p.num_tokens == 0) return;
  launch_pdl(moe_route_kernel, unsigned(p.num_tokens), kThreads, 0, stream, p);
}

}  // namespace mlaserve::cuda
