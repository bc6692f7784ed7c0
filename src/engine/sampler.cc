#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "common/error.h"

namespace mlaserve {

bool has_penalties(const GenerationParams& p) {
  return p.repetition_penalty != 1.0f || p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f;
}

static SamplingParams sampling_params_of(const SampleInput& in) {
  const GenerationParams& g = *in.params;
  return {g.temperature, g.top_k, g.top_p, g.min_p, in.seed, in.step};
}

void apply_penalties(float* logits, int64_t vocab, const SampleInput& in) {
  const GenerationParams& p = *in.params;
  const std::vector<int32_t>& tokens = *in.tokens;
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(static_cast<size_t>(vocab), false);
    for (int32_t t : tokens)
      if (t >= 0 && t < vocab) seen[size_t(t)] = true;
    for (int64_t v = 0; v < vocab; ++v)
      if (seen[size_t(v)]) logits[v] = logits[v] > 0 ? logits[v] / p.repetition_penalty : logits[v] * p.repetition_penalty;
  }
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (size_t i = size_t(in.prompt_len); i < tokens.size(); ++i) counts[tokens[i]]++;
    for (auto [t, n] : counts)
      if (t >= 0 && t < vocab) logits[t] -= p.frequency_penalty * float(n) + p.presence_penalty;
  }
}

static TokenLogprob logprobs_of(const float* logits, int64_t vocab, int32_t chosen, int32_t top) {
  float mx = *std::max_element(logits, logits + vocab);
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(double(logits[v] - mx));
  float log_z = mx + float(std::log(sum));
  TokenLogprob lp;
  lp.token = chosen;
  lp.logprob = logits[chosen] - log_z;
  if (top > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v) idx[size_t(v)] = int32_t(v);
    int32_t k = int32_t(std::min<int64_t>(top, vocab));
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
    for (int32_t i = 0; i < k; ++i) lp.top.push_back({idx[size_t(i)], logits[idx[size_t(i)]] - log_z});
  }
  return lp;
}

static bool needs_host(const GenerationParams& p) {
  return p.logprobs >= 0 || has_penalties(p);
}

std::vector<SampleOutput> Sampler::sample(Backend& backend, const Tensor& logits,
                                          const std::vector<SampleInput>& inputs) {
  int64_t B = logits.size(0);
  MLA_CHECK(int64_t(inputs.size()) == B && logits.dtype() == DType::F32, "sampler: {} inputs for logits {}",
            inputs.size(), logits.describe());
  if (std::any_of(inputs.begin(), inputs.end(), [](const SampleInput& in) { return needs_host(*in.params); })) {
    Tensor host = backend.to_host(logits);
    return sample(host, inputs);
  }
  std::vector<SamplingParams> params;
  for (const SampleInput& in : inputs) params.push_back(sampling_params_of(in));
  Tensor ids = backend.empty(DType::I32, {B});
  backend.sample(logits, params, ids);
  Tensor host_ids = backend.to_host(ids);
  std::vector<SampleOutput> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) out[size_t(b)].token = host_ids.data<int32_t>()[b];
  return out;
}

std::vector<SampleOutput> Sampler::sample(Tensor& logits, const std::vector<SampleInput>& inputs) {
  int64_t B = logits.size(0), V = logits.size(1);
  MLA_CHECK(int64_t(inputs.size()) == B && logits.device() == Device::CPU && logits.dtype() == DType::F32,
            "sampler: {} inputs for logits {}", inputs.size(), logits.describe());
  std::vector<SamplingParams> params(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    const SampleInput& in = inputs[size_t(b)];
    apply_penalties(logits.data<float>() + b * logits.stride(0), V, in);
    params[size_t(b)] = sampling_params_of(in);
  }
  Tensor ids = Tensor::empty(DType::I32, {B});
  backend_->sample(logits, params, ids);
  std::vector<SampleOutput> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    out[size_t(b)].token = ids.data<int32_t>()[b];
    if (inputs[size_t(b)].params->logprobs >= 0)
      out[size_t(b)].logprob = logprobs_of(logits.data<float>() + b * logits.stride(0), V, out[size_t(b)].token,
                                           inputs[size_t(b)].params->logprobs);
  }
  return out;
}

}  // namespace mlaserve
