// ModelRunner: owns the backend-side state of a model (the model, its KV pool, its decode graphs)
// and runs one scheduled batch to logits. The scheduler hands it sequences; it knows nothing of
// requests.
#pragma once

#include <functional>
#include <memory>

#include "cache/kv_pool.h"
#include "engine/decode_graphs.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"

namespace mlaserve {

class ModelRunner {
 public:
  ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights, int64_t num_slots,
              DType kv_dtype, DeepseekModel::Options model_options = {});
  // The pool sized once the weights are on the backend (the memory plan needs what is left).
  ModelRunner(std::unique_ptr<Backend> backend, ModelConfig config, ModelWeights weights,
              const std::function<int64_t(Backend&)>& kv_slots, DType kv_dtype,
              DeepseekModel::Options model_options = {});
  ~ModelRunner();

  // Tells the pool how the caller hands out slots (KvPool::page_size); before capture_decode_graphs.
  void set_kv_page_size(int64_t page_size) { kv_.set_page_size(page_size); }
  int64_t kv_page_size() const { return kv_.page_size(); }
  // Captures decode graphs for these batch sizes (the backend must support graphs); decode
  // batches that fit one then replay it.
  void capture_decode_graphs(const std::vector<int>& batch_sizes);
  const std::vector<int>& decode_graph_sizes() const;

  // Logits [num_seqs, vocab] (F32, on the backend) of each sequence's last new token. They stay
  // valid until the next forward.
  Tensor forward(const std::vector<SequenceInput>& seqs);

  Backend& backend() { return *backend_; }
  const ModelConfig& config() const { return model_.config(); }
  // Slots the scheduler may hand out (the pool keeps one more, the graphs' scratch slot).
  int64_t num_slots() const { return kv_.num_slots() - 1; }
  uint64_t kv_bytes() const { return kv_.nbytes(); }

 private:
  std::unique_ptr<Backend> backend_;
  DeepseekModel model_;
  KvPool kv_;
  std::unique_ptr<DecodeGraphs> graphs_;
};

}  // namespace mlaserve
