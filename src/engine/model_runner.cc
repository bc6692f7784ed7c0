#include "engine/model_runner.h"

namespace mlaserve {

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
                         int64_t num_slots, DType kv_dtype)
    : backend_(std::move(backend)),
      model_(std::move(config), std::move(weights), *backend_),
      kv_(*backend_, model_.config().num_hidden_layers, num_slots, model_.config().kv_cache_dim(), kv_dtype) {}

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
                         const std::function<int64_t(Backend&)>& kv_slots, DType kv_dtype)
    : backend_(std::move(backend)),
      model_(std::move(config), std::move(weights), *backend_),
      kv_(*backend_, model_.config().num_hidden_layers, kv_slots(*backend_), model_.config().kv_cache_dim(),
          kv_dtype) {}

Tensor ModelRunner::forward(const std::vector<SequenceInput>& seqs) {
  return model_.forward(make_forward_batch(seqs), kv_);
}

}  // namespace mlaserve
