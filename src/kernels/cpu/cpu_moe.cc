// MoE routing and experts on the CPU.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::cpu {

namespace {

// Indices of the k largest values, largest first; ties go to the lower index (as torch.topk).
std::vector<int32_t> top_indices(const std::vector<float>& v, int32_t k) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  });
  idx.resize(size_t(k));
  return idx;
}

// Keeps the experts of the `topk_groups` best groups; the others become -inf.
void mask_to_best_groups(std::vector<float>& choice, const MoeRouting& r, bool rank_by_top2_sum) {
  int32_t per_group = r.num_experts / r.num_groups;
  std::vector<float> group_score(static_cast<size_t>(r.num_groups));
  for (int32_t g = 0; g < r.num_groups; ++g) {
    std::vector<float> members(choice.begin() + g * per_group, choice.begin() + (g + 1) * per_group);
    if (rank_by_top2_sum) {
      auto top2 = top_indices(members, 2);
      group_score[g] = members[top2[0]] + members[top2[1]];
    } else {
      group_score[g] = *std::max_element(members.begin(), members.end());
    }
  }
  auto groups = top_indices(group_score, r.topk_groups);
  std::vector<bool> keep(static_cast<size_t>(r.num_groups), false);
  for (int32_t g : groups) keep[g] = true;
  for (int32_t e = 0; e < r.num_experts; ++e)
    if (!keep[e / per_group]) choice[e] = -INFINITY;
}

}  // namespace

void CpuBackend::moe_route(const Tensor& logits, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                           Tensor& weights) {
  int64_t T = logits.size(0), E = r.num_experts, k = r.top_k, S = r.slots();
  MLA_CHECK(r.num_fused_shared >= 0, "moe_route: num_fused_shared {} is negative", r.num_fused_shared);
  check_f32(logits, {T, E}, "moe_route logits");
  MLA_CHECK(ids.dtype() == DType::I32 && ids.shape() == Shape({T, S}) && ids.is_contiguous(),
            "moe_route: ids must be a contiguous I32[{}, {}] (top-{} and {} fused shared), got {}", T, S, k,
            r.num_fused_shared, ids.describe());
  check_f32(weights, {T, S}, "moe_route weights");
  MLA_CHECK(E % r.num_groups == 0 && r.topk_groups <= r.num_groups && k <= E, "moe_route: inconsistent routing");
  Tensor b;
  if (bias.defined()) {
    b = bias.to_f32();
    MLA_CHECK(b.numel() == E, "moe_route: correction bias has {} values for {} experts", b.numel(), E);
  }
#pragma omp parallel for if (worth_threads(T * E * 64))
  for (int64_t t = 0; t < T; ++t) {
    const float* lg = row_ptr(logits, t);
    std::vector<float> scores(static_cast<size_t>(E));
    if (r.scoring == ScoringFunc::Softmax) {
      float mx = *std::max_element(lg, lg + E);
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += (scores[e] = std::exp(lg[e] - mx));
      for (auto& s : scores) s = float(s / sum);
    } else {
      for (int64_t e = 0; e < E; ++e) scores[e] = 1.0f / (1.0f + std::exp(-lg[e]));
    }
    // Experts are chosen by `choice` (biased for noaux_tc); their weights are the unbiased scores.
    std::vector<float> choice = scores;
    if (r.method == TopkMethod::NoauxTc && b.defined())
      for (int64_t e = 0; e < E; ++e) choice[e] += b.data<float>()[e];
    if (r.method == TopkMethod::GroupLimitedGreedy) mask_to_best_groups(choice, r, false);
    if (r.method == TopkMethod::NoauxTc) mask_to_best_groups(choice, r, true);
    auto top = top_indices(choice, int32_t(k));
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += scores[top[j]];
    float norm = (r.renormalize && k > 1) ? 1.0f / (sum + 1e-20f) : 1.0f;
    for (int64_t j = 0; j < k; ++j) {
      ids.data<int32_t>()[t * S + j] = top[j];
      row_ptr(weights, t)[j] = scores[top[j]] * norm * r.routed_scaling_factor;
    }
    // Fused shared experts: every token takes each of them whole.
    for (int64_t j = k; j < S; ++j) {
      ids.data<int32_t>()[t * S + j] = int32_t(E + j - k);
      row_ptr(weights, t)[j] = 1.0f;
    }
  }
}

void CpuBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                             const std::vector<GatedMlpWeights>& experts, Tensor& out) {
  int64_t T = x.size(0), H = x.size(1), k = ids.size(1), E = int64_t(experts.size());
  check_f32(x, {T, H}, "moe_experts x");
  check_f32(out, {T, H}, "moe_experts out");
  check_f32(weights, {T, k}, "moe_experts weights");
  MLA_CHECK(ids.dtype() == DType::I32 && ids.shape() == Shape({T, k}) && ids.is_contiguous(),
            "moe_experts: ids must be I32[{}, {}]", T, k);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < H; ++c) row_ptr(out, t)[c] = 0;
  // Group the (token, slot) pairs by expert, run each expert once over its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int32_t e = ids.data<int32_t>()[t * k + j];
      MLA_CHECK(e >= 0 && e < E, "moe_experts: expert id {} outside [0, {})", e, E);
      routed[e].push_back({t, row_ptr(weights, t)[j]});
    }
  for (int64_t e = 0; e < E; ++e) {
    if (routed[e].empty()) continue;
    const GatedMlpWeights& w = experts[e];
    int64_t n = int64_t(routed[e].size()), I = w.gate.out_features();
    Tensor xs = Tensor::empty(DType::F32, {n, H}), g = Tensor::empty(DType::F32, {n, I}),
           u = Tensor::empty(DType::F32, {n, I}), y = Tensor::empty(DType::F32, {n, H});
    for (int64_t i = 0; i < n; ++i) std::copy_n(row_ptr(x, routed[e][i].first), H, row_ptr(xs, i));
    // FP8 experts run as W8A8, like every other FP8 linear layer.
    apply_linear(*this, xs, w.gate, g);
    apply_linear(*this, xs, w.up, u);
    silu_and_mul(g, u, g);
    apply_linear(*this, g, w.down, y);
    for (int64_t i = 0; i < n; ++i) {
      float* o = row_ptr(out, routed[e][i].first);
      const float* yr = row_ptr(y, i);
      float wt = routed[e][i].second;
      for (int64_t c = 0; c < H; ++c) o[c] += wt * yr[c];
    }
  }
}

}  // namespace mlaserve::cpu
