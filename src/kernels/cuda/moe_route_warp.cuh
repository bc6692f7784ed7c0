// One token's routing in one warp (moe_route.cu's warp-a-token kernel, and the one-token expert
// kernels of moe_experts.cu, which route rather than wait for a route launch). Lane l holds the N
// experts from l N on; where each group is a power-of-two run of whole lanes (moe_route_warp_fits),
// group scores are shuffles within the group and the top-k is k rounds of a warp arg-max over the
// lanes' best remaining experts (at up to 64 experts, a rank each expert counts in shared memory).
// The expert kernels route in one warp a block: every warp of an SM routing at once filled the
// SM's issue slots and shuffle unit for microseconds.
#pragma once

#include <cfloat>
#include <type_traits>

#include "kernels/cuda/moe_route.h"

namespace mlaserve::cuda::route_warp {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// (v, e) beats (w, f): larger value, or equal value and lower index (as torch.topk and the CPU).
__device__ __forceinline__ bool beats(float v, int e, float w, int f) { return v > w || (v == w && e < f); }

// (v, e) is a better pick than (w, f); e or f < 0 marks "none".
__device__ __forceinline__ bool better(float v, int e, float w, int f) {
  return e >= 0 && (f < 0 || beats(v, e, w, f));
}

// Slot `lane` of a token whose lane j < top_k holds the j-th choice (id, unnormalized score): the
// expert and its weight, in slot order as the reference. All 32 lanes call; lanes past the slots
// get nothing meaningful.
struct Slot {
  int id;
  float weight;
};
__device__ __forceinline__ Slot slot_of(const MoeRouteParams& p, int lane, int id, float score) {
  float sum = 0.0f;  // in slot order, as the reference
  for (int j = 0; j < p.top_k; ++j) sum += __shfl_sync(kFull, score, j);
  const float norm = (p.renormalize && p.top_k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
  if (lane < p.top_k) return {id, score * norm * p.routed_scaling_factor};
  return {p.num_experts + lane - p.top_k, 1.0f};  // a fused shared expert: every token, weight 1
}

// A warp writes token t's slots.
__device__ __forceinline__ void write_slots(const MoeRouteParams& p, int t, int lane, int id, float score) {
  const Slot s = slot_of(p, lane, id, score);
  if (lane < p.top_k + p.num_fused_shared) {
    p.ids[int64_t(t) * (p.top_k + p.num_fused_shared) + lane] = s.id;
    p.weights[int64_t(t) * p.weights_ld + lane] = s.weight;
  }
}

// The lane's best expert not taken yet (index -1 when it has none).
template <int N>
__device__ __forceinline__ void lane_best(const float (&choice)[N], int e0, int E, unsigned taken, float& bv,
                                          int& be) {
  bv = -INFINITY;
  be = -1;
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (e0 + i < E && !((taken >> i) & 1u) && better(choice[i], e0 + i, bv, be)) bv = choice[i], be = e0 + i;
}

// The noaux_tc correction bias of the lane's experts (0 elsewhere): a weight, so it may be read
// before the PDL wait.
template <int N>
__device__ __forceinline__ void load_bias(const MoeRouteParams& p, int lane, float (&bias)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    bias[i] = p.method == 2 && p.bias && lane * N + i < p.num_experts ? p.bias[lane * N + i] : 0.0f;
}

// Up to this many experts a lane (64 experts), the top-k is ranked through shared memory.
constexpr int kRankedTopkMaxN = 2;
// A warp's shared memory for routing one token.
struct Scratch {
  alignas(16) float choice[32 * kRankedTopkMaxN];
  int slot_id[kRouteMaxTopk];
  float slot_score[kRouteMaxTopk];
};

// The top-k of the experts by choice (ties to the lower index), as k rounds of a warp arg-max over
// the lanes' best remaining experts: lane j < top_k gets the j-th (id, score).
template <int N>
__device__ __forceinline__ void top_k_rounds(const MoeRouteParams& p, int lane, const float (&score)[N],
                                             const float (&choice)[N], int& my_id, float& my_score) {
  const int E = p.num_experts, e0 = lane * N;
  unsigned taken = 0;
  float bv;
  int be;
  lane_best(choice, e0, E, taken, bv, be);
  my_id = 0;
  my_score = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    float wv = bv;
    int we = be;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, wv, o);
      const int oe = __shfl_xor_sync(kFull, we, o);
      if (better(ov, oe, wv, we)) wv = ov, we = oe;
    }
    float sc = 0.0f;
    if (we >= e0 && we < e0 + N) {  // this lane's expert won: take it, find the lane's next best
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (e0 + i == we) sc = score[i], taken |= 1u << i;
      lane_best(choice, e0, E, taken, bv, be);
    }
    sc = __shfl_sync(kFull, sc, we / N);
    if (lane == j) my_id = we, my_score = sc;
  }
}

// The same top-k by rank: each of the lane's experts counts the experts that beat it (N E compares
// a lane, against the rounds' k chains of five shuffles), and the top k place themselves. The
// compares read the choices 16 bytes at a time in one unrolled run (a loop of dependent shared
// loads took about 2 us at 64 experts).
template <int N>
__device__ __forceinline__ void top_k_ranked(const MoeRouteParams& p, int lane, const float (&score)[N],
                                             const float (&choice)[N], Scratch& s, int& my_id, float& my_score) {
  const int E = p.num_experts, e0 = lane * N;
  constexpr int kHeld = 32 * N;  // the lanes' experts; those past E hold -inf and never beat one below E
#pragma unroll
  for (int i = 0; i < N; ++i) s.choice[e0 + i] = e0 + i < E ? choice[i] : -INFINITY;
  __syncwarp();
  int rank[N] = {};
#pragma unroll
  for (int j = 0; j < kHeld; j += 4) {
    const float4 v = *reinterpret_cast<const float4*>(&s.choice[j]);
#pragma unroll
    for (int i = 0; i < N; ++i)
      rank[i] += beats(v.x, j, choice[i], e0 + i) + beats(v.y, j + 1, choice[i], e0 + i) +
                 beats(v.z, j + 2, choice[i], e0 + i) + beats(v.w, j + 3, choice[i], e0 + i);
  }
#pragma unroll
  for (int i = 0; i < N; ++i)
    if (e0 + i < E && rank[i] < p.top_k) s.slot_id[rank[i]] = e0 + i, s.slot_score[rank[i]] = score[i];
  __syncwarp();
  my_id = lane < p.top_k ? s.slot_id[lane] : 0;
  my_score = lane < p.top_k ? s.slot_score[lane] : 0.0f;
  __syncwarp();  // the scratch may be reused
}

// Token t's top-k: lane j < top_k gets the j-th choice (id, unnormalized score).
template <int N>
__device__ __forceinline__ void route_token(const MoeRouteParams& p, int t, int lane, const float (&bias)[N],
                                            Scratch& s, int& my_id, float& my_score) {
  const int E = p.num_experts, e0 = lane * N;
  const float* lg = p.logits + int64_t(t) * p.logits_ld;

  float score[N], choice[N];
#pragma unroll
  for (int i = 0; i < N; ++i) score[i] = e0 + i < E ? lg[e0 + i] : -INFINITY;
  if (p.softmax) {
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < N; ++i) mx = fmaxf(mx, score[i]);
    mx = warp_max(mx);
    double sum = 0;  // the reference sums in double
#pragma unroll
    for (int i = 0; i < N; ++i) {
      score[i] = e0 + i < E ? expf(score[i] - mx) : 0.0f;
      sum += score[i];
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
#pragma unroll
    for (int i = 0; i < N; ++i) score[i] = float(double(score[i]) / sum);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) score[i] = 1.0f / (1.0f + expf(-score[i]));
  }
  // Experts are chosen by `choice` (biased for noaux_tc); their weights are the unbiased scores.
#pragma unroll
  for (int i = 0; i < N; ++i) choice[i] = e0 + i < E ? score[i] + bias[i] : -INFINITY;

  if (p.method != 0) {
    // The group's best (or best two) over its lanes; lanes past the experts hold -inf.
    const int lanes = E / p.num_groups / N, g = lane / lanes;
    float t1 = -INFINITY, t2 = -INFINITY;
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float v = choice[i];
      if (v > t1) {
        t2 = t1;
        t1 = v;
      } else if (v > t2) {
        t2 = v;
      }
    }
    for (int o = 1; o < lanes; o <<= 1) {
      const float b1 = __shfl_xor_sync(kFull, t1, o), b2 = __shfl_xor_sync(kFull, t2, o);
      const float n1 = fmaxf(t1, b1), n2 = fmaxf(fminf(t1, b1), fmaxf(t2, b2));
      t1 = n1;
      t2 = n2;
    }
    const float mine = p.method == 2 ? t1 + t2 : t1;
    int rank = 0;
    for (int h = 0; h < p.num_groups; ++h) rank += beats(__shfl_sync(kFull, mine, h * lanes), h, mine, g);
    if (g >= p.num_groups || rank >= p.topk_groups) {
#pragma unroll
      for (int i = 0; i < N; ++i) choice[i] = -INFINITY;
    }
  }

  if constexpr (N <= kRankedTopkMaxN)
    top_k_ranked(p, lane, score, choice, s, my_id, my_score);
  else
    top_k_rounds(p, lane, score, choice, my_id, my_score);
}

// Host side: calls f(std::integral_constant<int, N>{}) with N the experts a lane of a routing over
// num_experts (1 to 8), so each launcher picks its kernel's template from one place.
template <class F>
decltype(auto) with_experts_per_lane(int num_experts, F&& f) {
  switch (moe_route_experts_per_lane(num_experts)) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

}  // namespace mlaserve::cuda::route_warp
