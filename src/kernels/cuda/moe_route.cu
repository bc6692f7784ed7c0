// Router kernel: one warp per token. Lane l holds experts l, l + 32, ... (8 slots for E <= 256);
// group scores and the top-k are warp reductions, so nothing goes through shared memory.
#include <cfloat>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/pdl.cuh"

namespace mlaserve::cuda {

namespace {

constexpr int kSlots = kRouteMaxExperts / 32;
constexpr int kWarpsPerBlock = 4;
constexpr unsigned kFull = 0xffffffffu;

// (v, e) beats (bv, be): larger value, or equal value and lower index; be < 0 means "none yet".
__device__ __forceinline__ bool better(float v, int e, float bv, int be) {
  return be < 0 || v > bv || (v == bv && e < be);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// The two largest values of a multiset spread over the warp (top1 >= top2).
__device__ __forceinline__ void warp_top2(float& t1, float& t2) {
  for (int o = 16; o > 0; o >>= 1) {
    float b1 = __shfl_xor_sync(kFull, t1, o), b2 = __shfl_xor_sync(kFull, t2, o);
    float n1 = fmaxf(t1, b1), n2 = fmaxf(fminf(t1, b1), fmaxf(t2, b2));
    t1 = n1;
    t2 = n2;
  }
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_route_kernel(MoeRouteParams p) {
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
      rank += (other > mine || (other == mine && h < lane)) ? 1 : 0;
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
      if (e < E && !((taken >> i) & 1u) && better(choice[i], e, bv, be)) {
        bv = choice[i];
        be = e;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      float ov = __shfl_xor_sync(kFull, bv, o);
      int oe = __shfl_xor_sync(kFull, be, o);
      if (oe >= 0 && better(ov, oe, bv, be)) {
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
  float sum = 0.0f;  // in slot order, as the reference
  for (int j = 0; j < p.top_k; ++j) sum += __shfl_sync(kFull, my_score, j);
  float norm = (p.renormalize && p.top_k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
  const int slots = p.top_k + p.num_fused_shared;
  if (lane < p.top_k) {
    p.ids[int64_t(t) * slots + lane] = my_id;
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
  int blocks = (p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_pdl(moe_route_kernel, blocks, kWarpsPerBlock * 32, 0, stream, p);
}

}  // namespace mlaserve::cuda
