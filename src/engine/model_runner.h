// ModelRunner: owns the backend-side state of a model (the model, its KV pool) and runs one
// scheduled batch to logits. The scheduler hands it sequences; it knows nothing of requests.
#pragma once

#include <functional>
#include <memory>

#include "cache/kv_pool.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"

namespace mlaserve {

class ModelRunner {
 public:
  ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights, int64_t num_slots,
              DType kv_dtype);
  // The pool sized once the weights are on the backend (the memory plan needs what is left).
  ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
              const std::function<int64_t(Backend&)>& kv_slots, DType kv_dtype);

  // Logits [num_seqs, vocab] (F32, on the backend) of each sequence's last new token.
  Tensor forward(const std::vector<SequenceInput>& seqs);

  Backend& backend() { return *backend_; }
  const ModelConfig& config() const { return model_.config(); }
  int64_t num_slots() const { return kv_.num_slots(); }
  uint64_t kv_bytes() const { return kv_.nbytes(); }

 private:
  std::unique_ptr<Backend> backend_;
  DeepseekModel model_;
  KvPool kv_;
};

}  // namespace mlaserve
