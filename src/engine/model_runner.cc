#include "engine/model_runner.h"

namespace mlaserve {

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
                         int64_t num_slots, DType kv_dtype, DeepseekModel::Options model_options)
    : ModelRunner(std::move(backend), std::move(config), std::move(weights), [num_slots](Backend&) { return num_slots; },
                  kv_dtype, model_options) {}

ModelRunner::ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
                         const std::function<int64_t(Backend&)>& kv_slots, DType kv_dtype,
                         DeepseekModel::Options model_options)
    : backend_(std::move(backend)),
      model_(std::move(config), std::move(weights), *backend_, model_options),
      kv_(*backend_, model_.config().num_hidden_layers, kv_slots(*backend_) + 1, model_.config().kv_cache_dim(),
          kv_dtype) {}

ModelRunner::~ModelRunner() = default;

void ModelRunner::capture_decode_graphs(const std::vector<int>& batch_sizes) {
  graphs_.reset();
  // Batches name at most every slot once, unless sequences share cached prefixes: room for twice
  // that, and the rare batch past it runs eagerly.
  graphs_ = std::make_unique<DecodeGraphs>(model_, kv_, batch_sizes, int32_t(num_slots()), 2 * num_slots());
}

const std::vector<int>& ModelRunner::decode_graph_sizes() const {
  static const std::vector<int> none;
  return graphs_ ? graphs_->captured_sizes() : none;
}

Tensor ModelRunner::forward(const std::vector<SequenceInput>& seqs) {
  if (graphs_)
    if (Tensor logits = graphs_->run(seqs); logits.defined()) return logits;
  return model_.forward(make_forward_batch(seqs), kv_);
}

}  // namespace mlaserve
