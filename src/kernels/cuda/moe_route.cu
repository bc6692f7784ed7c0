// Router kernels, two forms of the same routing:
//  - one block per token, one thread per expert: the group scores are one short scan per group, and
//    each expert finds its place in the top-k by counting the experts that beat it, all at once.
//    Short latency: a single warp per token spent ~10 us on the serial chain of group scores and k
//    arg-max rounds (H200, V3 at 1 token).
//  - one warp per token, lane l holding the n experts from l n on: when each group is a power-of-two
//    run of lanes (V2, V3), group scores are shuffles within the group and the top-k is k rounds of
//    a warp arg-max over the lanes' best remaining experts. Eight times fewer threads a token.
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

constexpr int kWarpsPerBlock = 4;  // of the warp-per-token kernel

// Experts a lane holds in the warp kernel (lane l: experts l n .. l n + n - 1), and whether each
// group is a power-of-two run of whole lanes, so that group scores are shuffles within the group.
int experts_per_lane(int num_experts) { return (num_experts + 31) / 32; }
bool groups_fit_lanes(const MoeRouteParams& p) {
  if (p.method == 0) return true;
  const int n = experts_per_lane(p.num_experts), per_group = p.num_experts / p.num_groups;
  const int lanes = per_group / n;
  return per_group % n == 0 && lanes > 0 && (lanes & (lanes - 1)) == 0;
}

// (v, e) is a better pick than (w, f); e or f < 0 marks "none".
__device__ __forceinline__ bool better(float v, int e, float w, int f) {
  return e >= 0 && (f < 0 || beats(v, e, w, f));
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

// A warp a token, N contiguous experts a lane: scores, group limiting (shuffles within the lanes of
// a group, then each lane ranks its group), and top-k as k rounds of a warp arg-max over the lanes'
// best remaining experts. Every step is a few registers or five shuffles deep.
template <int N>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) moe_route_warp_kernel(MoeRouteParams p) {
  const int lane = threadIdx.x % 32, t = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  const int E = p.num_experts, e0 = lane * N;
  float bias[N];  // a weight: read before the wait
#pragma unroll
  for (int i = 0; i < N; ++i) bias[i] = p.method == 2 && p.bias && e0 + i < E ? p.bias[e0 + i] : 0.0f;
  pdl_wait_and_trigger();
  if (t >= p.num_tokens) return;  // whole warps leave together
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

  unsigned taken = 0;
  float bv;
  int be;
  lane_best(choice, e0, E, taken, bv, be);
  int my_id = 0;
  float my_score = 0.0f;
  for (int j = 0; j < p.top_k; ++j) {
    float wv = bv;
    int we = be;
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(kFull, wv, o);
      const int oe = __shfl_xor_sync(kFull, we, o);
      if (better(ov, oe, wv, we)) wv = ov, we = oe;
    }
    float s = 0.0f;
    if (we >= e0 && we < e0 + N) {  // this lane's expert won: take it, find the lane's next best
#pragma unroll
      for (int i = 0; i < N; ++i)
        if (e0 + i == we) s = score[i], taken |= 1u << i;
      lane_best(choice, e0, E, taken, bv, be);
    }
    s = __shfl_sync(kFull, s, we / N);
    if (lane == j) my_id = we, my_score = s;
  }
  write_slots(p, t, lane, my_id, my_score);
}

template <int N>
void launch_warp_kernel(const MoeRouteParams& p, cudaStream_t stream) {
  const int blocks = (p.num_tokens + kWarpsPerBlock - 1) / kWarpsPerBlock;
  launch_pdl(moe_route_warp_kernel<N>, blocks, kWarpsPerBlock * 32, 0, stream, p);
}

}  // namespace

void launch_moe_route(const MoeRouteParams& p, int64_t warp_per_token_from_scores, cudaStream_t stream) {
  MLA_CHECK(p.num_experts <= kRouteMaxExperts && p.num_fused_shared >= 0 &&
                p.top_k + p.num_fused_shared <= kRouteMaxTopk && p.num_groups <= kRouteMaxGroups,
            "moe_route on CUDA supports up to {} experts, {} slots (top-k + fused shared) and {} groups; got {}, "
            "{} + {}, {}",
            kRouteMaxExperts, kRouteMaxTopk, kRouteMaxGroups, p.num_experts, p.top_k, p.num_fused_shared, p.num_groups);
  if (p.num_tokens == 0) return;
  if (int64_t(p.num_tokens) * p.num_experts < warp_per_token_from_scores || !groups_fit_lanes(p)) {
    launch_pdl(moe_route_block_kernel, unsigned(p.num_tokens), kThreads, 0, stream, p);
    return;
  }
  switch (experts_per_lane(p.num_experts)) {
    case 1: return launch_warp_kernel<1>(p, stream);
    case 2: return launch_warp_kernel<2>(p, stream);
    case 3: return launch_warp_kernel<3>(p, stream);
    case 4: return launch_warp_kernel<4>(p, stream);
    case 5: return launch_warp_kernel<5>(p, stream);
    case 6: return launch_warp_kernel<6>(p, stream);
    case 7: return launch_warp_kernel<7>(p, stream);
    default: return launch_warp_kernel<8>(p, stream);
  }
}

}  // namespace mlaserve::cuda
