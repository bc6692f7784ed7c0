// Token sampling on the CPU: greedy, temperature, top-k, top-p, min-p, with a counter-based RNG
// so that (seed, step) always draws the same number whatever else is in the batch.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "common/error.h"
#include "common/random.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::cpu {

namespace {

int32_t argmax(const float* v, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (v[i] > v[best]) best = i;
  return int32_t(best);
}

int32_t sample_row(const float* logits, int64_t V, const SamplingParams& p) {
  if (p.temperature <= 0.0f || p.top_k == 1) return argmax(logits, V);
  // Candidates sorted by probability, largest first.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  int64_t keep = (p.top_k > 0 && p.top_k < V) ? p.top_k : V;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order.begin(), order.begin() + keep, order.end(), by_logit);
  order.resize(size_t(keep));
  std::vector<double> prob(order.size());
  double mx = logits[order[0]] / p.temperature, sum = 0;
  for (size_t i = 0; i < order.size(); ++i) sum += (prob[i] = std::exp(logits[order[i]] / p.temperature - mx));
  for (auto& q : prob) q /= sum;
  // top-p: the smallest prefix whose mass reaches top_p; min-p: drop tokens under min_p * best.
  size_t n = prob.size();
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (size_t i = 0; i < n; ++i) {
      cum += prob[i];
      if (cum >= p.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    double floor = p.min_p * prob[0];
    while (n > 1 && prob[n - 1] < floor) --n;
  }
  double mass = 0;
  for (size_t i = 0; i < n; ++i) mass += prob[i];
  double u = uniform01(p.seed, p.step) * mass;
  for (size_t i = 0; i < n; ++i) {
    u -= prob[i];
    if (u < 0) return order[i];
  }
  return order[n - 1];
}

}  // namespace

void CpuBackend::sample(const Tensor& logits, const std::vector<SamplingParams>& params, Tensor& out) {
  int64_t B = logits.size(0), V = logits.size(1);
  check_f32(logits, {B, V}, "sample logits");
  check_i32(out, B, "sample out");
  MLA_CHECK(int64_t(params.size()) == B, "sample: {} parameter sets for {} rows", params.size(), B);
#pragma omp parallel for if (worth_threads(B * V * 4))
  for (int64_t b = 0; b < B; ++b) out.data<int32_t>()[b] = sample_row(row_ptr(logits, b), V, params[b]);
}

}  // namespace mlaserve::cpu
