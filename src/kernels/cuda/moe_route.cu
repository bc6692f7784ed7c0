// Router kernels, two forms of the same routing:
//  - one block per token, one thread per expert: the group scores are one short scan per group, and
//    each expert finds its place in the top-k by counting the experts that beat it, all at once.
//    Short latency: a single warp per token spent ~10 us on the serial chain of group scores and k
//    arg-max rounds (H200, V3 at 1 token).
//  - one warp per token (moe_route_warp.cuh), lane l holding the n experts from l n on, where each
//    group is a power-of-two run of lanes (V2, V3). Eight times fewer threads a token.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/moe_route_warp.cuh"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

using namespace route_warp;

// ---- one block per token ----

constexpr int kThreads = kRouteMaxExperts, kWarps = kThreads / 32;

// Block-wide max and sum (every thread gets the result).
__device__ float block_max(float v, float* red) {
  v = warp_max(v);
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

__global__ void __launch_bounds__(kThreads) moe_route_block_kernel(MoeRouteParams p) {
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
  write_slots(p, t, lane, lane < p.top_k ? s_slot_id[lane] : 0, lane < p.top_k ? s_slot_score[lane] : 0.0f);
}

// ---- one warp per token ----

constexpr int kWarpsPerBlock = 4;  // of the warp-per-token kernel

// A warp a token (moe_route_warp.cuh).
template <int N>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_route_warp_kernel(MoeRouteParams p) {
  __shared__ Scratch scratch[kWarpsPerBlock];
  const int lane = threadIdx.x % 32, t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  float bias[N];
  load_bias(p, lane, bias);
  pdl_wait_and_trigger();
  if (t >= p.num_tokens) return;  // whole warps leave together
  int id;
  float score;
  route_token(p, t, lane, bias, scratch[threadIdx.x / 32], id, score);
  write_slots(p, t, lane, id, score);
}

template <int N>
void launch_warp_kernel(const MoeRouteParams& p, cudaStream_t stream) {
  const int blocks = (p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_pdl(moe_route_warp_kernel<N>, blocks, kWarpsPerBlock * 32, 0, stream, p);
}

}  // namespace

int moe_route_experts_per_lane(int num_experts) { return (num_experts + 31) / 32; }

bool moe_route_warp_fits(const MoeRouteParams& p) {
  if (p.num_experts > kRouteMaxExperts) return false;
  if (p.method == 0) return true;
  const int n = moe_route_experts_per_lane(p.num_experts), per_group = p.num_experts / p.num_groups;
  const int lanes = per_group / n;
  return per_group % n == 0 && lanes > 0 && (lanes & (lanes - 1)) == 0;
}

void launch_moe_route(const MoeRouteParams& p, int64_t warp_per_token_from_scores, cudaStream_t stream) {
  MLA_CHECK(p.num_experts <= kRouteMaxExperts && p.num_fused_shared >= 0 &&
                p.top_k + p.num_fused_shared <= kRouteMaxTopk && p.num_groups <= kRouteMaxGroups,
            "moe_route on CUDA supports up to {} experts, {} slots (top-k + fused shared) and {} groups; got {}, "
            "{} + {}, {}",
            kRouteMaxExperts, kRouteMaxTopk, kRouteMaxGroups, p.num_experts, p.top_k, p.num_fused_shared, p.num_groups);
  if (p.num_tokens == 0) return;
  if (int64_t(p.num_tokens) * p.num_experts < warp_per_token_from_scores || !moe_route_warp_fits(p)) {
    launch_pdl(moe_route_block_kernel, unsigned(p.num_tokens), kThreads, 0, stream, p);
    return;
  }
  route_warp::with_experts_per_lane(p.num_experts, [&](auto n) { launch_warp_kernel<decltype(n)::value>(p, stream); });
}

}  // namespace mlaserve::cuda
