// Sampler: turns one row of logits per request into the next token, applying that request's
// penalties first, and reports logprobs when asked. A draw depends only on (logits, params, seed,
// step): the backends' `sample` ops draw the same tokens from the same logits.
#pragma once

#include <vector>

#include "engine/request.h"
#include "kernels/ops.h"

namespace mlaserve {

struct SampleInput {
  const GenerationParams* params = nullptr;
  const std::vector<int32_t>* tokens = nullptr;  // prompt + output so far
  int64_t prompt_len = 0;
  uint64_t seed = 0;
  uint64_t step = 0;  // index of the output token being drawn
};

struct SampleOutput {
  int32_t token = 0;
  TokenLogprob logprob;  // filled when params->logprobs >= 0
};

class Sampler {
 public:
  Sampler() : backend_(make_cpu_backend()) {}
  // logits [B, V] F32 host tensor, modified in place by the penalties.
  std::vector<SampleOutput> sample(Tensor& logits, const std::vector<SampleInput>& inputs);
  // logits [B, V] F32 on `backend`. Drawn there, so only the ids come back, unless a row wants
  // penalties or logprobs: then every row is drawn on the host.
  std::vector<SampleOutput> sample(Backend& backend, const Tensor& logits, const std::vector<SampleInput>& inputs);

 private:
  std::unique_ptr<Backend> backend_;
};

// Whether any penalty is set (the draw then reads the token history).
bool has_penalties(const GenerationParams& p);

// In place on one row: repetition penalty over prompt and output, frequency and presence over the
// output, as OpenAI and SGLang define them.
void apply_penalties(float* logits, int64_t vocab, const SampleInput& in);

}  // namespace mlaserve
