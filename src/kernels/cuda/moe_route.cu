// Router kernels, two forms of the same routing:
//  - one block per token, one thread per expert: the group scores are one short scan per group, and
//    each expert finds its place in the top-k by counting the experts that beat it, all at once.
//    Short latency: a single warp per token spent ~10 us on the serial chain of group scores and k
//    arg-max rounds (H200, V3 at 1 token).
//  - one warp per token, lane l holding experts l, l + 32, ...: group scores and the top-k are warp
//    reductions. Eight times fewer threads a token, so it wins once the tokens fill the GPU.
#include <cfloat>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

constexpr unsigned kFull = 0xffffffffu;

// A warp writes token t's slots: lane j < top_k holds the j-th choice (id, unnormalized score).
__device__ void write_slots(const MoeRouteParams& p, int t, int lane, int id, float score) {
  float sum = 0.0f;  // in slot order, as the reference
  for (int j = 0; j < p.top_k; ++j) sum += __shfl_sync(kFull, score, j);
  const float norm = (p.renormalize && p.top_k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
  const int slots = p.top_k + p.num_fused_shared;
  if (lane < p.top_k) {
    p.ids[int64_t(t) * slots + lane] = id;
    p.weights[int64_t(t) * p.weights_ld + lane] = score * norm * p.routed_scaling_factor;
  } else if (lane < slots) {  // a fused shared expert: every token, weight 1
    p.ids[int64_t(t) * slots + lane] = p.num_experts + lane - p.top_k;
    p.weights[int64_t(t) * p.weights_ld + lane] = 1.0f;
  }
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// ---- one block per token ----

constexpr int kThreads = kRouteMaxExperts, kWarps = kThreads / 32;

// (v, e) beats (w, f): larger value, or equal value and lower index (as torch.topk and the CPU).
__device__ __forceinline__ bool beats(float v, int e, float w, int f) { return v > w || (v == w && e < f); }

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

constexpr int kSlots = kRouteMaxExperts / 32;
constexpr int kWarpsPerBlock = 4;  // of the warp-per-token kernel

// The two largest values of a multiset spread over the warp (top1 >= top2).
__device__ __forceinline__ void warp_top2(float& t1, float& t2) {
  for (int o = 16; o > 0; o >>= 1) {
    float b1 = __shfl_xor_sync(kFull, t1, o), b2 = __shfl_xor_sync(kFull, t2, o);
    float n1 = fmaxf(t1, b1), n2 = fmaxf(fminf(t1, b1), fmaxf(t2, b2));
    t1 = n1;
    t2 = n2;
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_route_warp_kernel(MoeRouteParams p) {
  pdl_wait_and_trigger();
  int lane = threadIdx.x % 32;
  int t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (t >= p.num_tokens) return;  // whole warps leave together
  const float* lg = p.logits + int64_t(t) * p.logits_ld;
  const int E = p.num_experts;

  float score[kSlots], choice[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    int e = lane + 32 * i;
    score[i] = e < E ? lg[e] : -INFINITY;
  }
  if (p.softmax) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) mx = fmaxf(mx, score[i]);
    mx = warp_max(mx);
    double sum = 0;  // the reference sums in double
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      score[i] = lane + 32 * i < E ? expf(score[i] - mx) : 0.0f;
      sum += score[i];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) score[i] = float(double(score[i]) / sum);
  } else {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) score[i] = 1.0f / (1.0f + expf(-score[i]));
  }
  // Experts are chosen by `choice` (biased for noaux_tc); their weights are the unbiased scores.
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    int e = lane + 32 * i;
    choice[i] = score[i];
    if (p.method == 2 && p.bias && e < E) choice[i] += p.bias[e];
  }

  if (p.method != 0) {
    // Group g's score lands in lane g; lanes then rank their group against the others.
    int per_group = E / p.num_groups;
    bool top2_sum = p.method == 2;
    float mine = -INFINITY;
    for (int g = 0; g < p.num_groups; ++g) {
      float t1 = -INFINITY, t2 = -INFINITY;
#pragma unroll
      for (int i = 0; i < kSlots; ++i) {
        int e = lane + 32 * i;
        if (e < E && e / per_group == g) {
          float v = choice[i];
          if (v > t1) {
            t2 = t1;
            t1 = v;
          } else if (v > t2) {
            t2 = v;
          }
        }
      }
      warp_top2(t1, t2);
      float s = top2_sum ? t1 + t2 : t1;
      if (lane == g) mine = s;
    }
    int rank = 0;
    for (int h = 0; h < p.num_groups; ++h) {
      float other = __shfl_sync(kFull, mine, h);
      rank += beats(other, h, mine, lane);
    }
    unsigned keep = __ballot_sync(kFull, lane < p.num_groups && rank < p.topk_groups);
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      int e = lane + 32 * i;
      if (e < E && !((keep >> (e / per_group)) & 1u)) choice[i] = -INFINITY;
    }
  }

  // Fused top-k: k rounds of a warp arg-max over the experts not taken yet.
  unsigned taken = 0;
  int my_id = 0;
  float my_score = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    float bv = -INFINITY;
    int be = -1;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      int e = lane + 32 * i;
      if (e < E && !((taken >> i) & 1u) && (be < 0 || beats(choice[i], e, bv, be))) {
        bv = choice[i];
        be = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(kFull, bv, o);
      int oe = __shfl_xor_sync(kFull, be, o);
      if (oe >= 0 && (be < 0 || beats(ov, oe, bv, be))) {
        bv = ov;
        be = oe;
      }
    }
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kSlots; ++i)
      if (lane + 32 * i == be) {
        s = score[i];
        taken |= 1u << i;
      }
    s = __shfl_sync(kFull, s, be % 32);
    if (lane == j) {
      my_id = be;
      my_score = s;
    }
  }
  write_slots(p, t, lane, my_id, my_score);
}

}  // namespace

void launch_moe_route(const MoeRouteParams& p, int64_t warp_per_token_from_scores, cudaStream_t stream) {
  MLA_CHECK(p.num_experts <= kRouteMaxExperts && p.num_fused_shared >= 0 &&
                p.top_k + p.num_fused_shared <= kRouteMaxTopk && p.num_groups <= kRouteMaxGroups,
            "moe_route on CUDA supports up to {} experts, {} slots (top-k + fused shared) and {} groups; got {}, "
            "{} + {}, {}",
            kRouteMaxExperts, kRouteMaxTopk, kRouteMaxGroups, p.num_experts, p.top_k, p.num_fused_shared, p.num_groups);
  if (p.num_tokens == 0) return;
  if (int64_t(p.num_tokens) * p.num_experts < warp_per_token_from_scores) {
    launch_pdl(moe_route_block_kernel, unsigned(p.num_tokens), kThreads, 0, stream, p);
  } else {
    int blocks = (p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
    launch_pdl(moe_route_warp_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
  }
}

}  // namespace mlaserve::cuda
