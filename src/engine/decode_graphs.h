// DecodeGraphs: decode forwards recorded once per batch size and replayed (CUDA graphs), so a
// step costs one launch instead of a few hundred. A batch of n sequences runs in the graph of
// the smallest captured size >= n; the extra rows are padding whose token writes its latent to a
// scratch slot of the KV pool and attends only to it.
//
// Every graph reads its inputs from one set of index buffers on the backend (token ids,
// positions, slots, sequence lengths, kv indices) sized for the largest batch: a replay first
// copies the batch there, in one copy.
#pragma once

#include <memory>
#include <vector>

#include "cache/kv_pool.h"
#include "engine/forward_batch.h"
#include "model/deepseek_model.h"

namespace mlaserve {

class DecodeGraphs {
 public:
  // Captures a graph for each of `batch_sizes` (largest first, each after an eager warm-up
  // forward). A size whose forward cannot be captured is logged and left to eager forwards.
  // `scratch_slot`: a KV slot no sequence owns; `max_kv_indices`: the most cache slots a graph
  // batch may name in all (larger batches run eagerly).
  DecodeGraphs(DeepseekModel& model, KvPool& kv, std::vector<int> batch_sizes, int32_t scratch_slot,
               int64_t max_kv_indices);
  ~DecodeGraphs();

  // The logits [seqs, vocab] of a decode batch run through a graph, or an undefined Tensor when no
  // graph takes it (not a decode batch, too many sequences or slots). The tensor is the graph's
  // output: the next replay of that size overwrites it.
  Tensor run(const std::vector<SequenceInput>& seqs);

  const std::vector<int>& captured_sizes() const { return sizes_; }

 private:
  struct Graph;
  // The inputs of a batch padded to `size` rows, laid out as in inputs_ (undefined if they do not fit).
  Tensor host_inputs(const std::vector<SequenceInput>& seqs, int size) const;
  ForwardBatch batch_view(int size) const;
  Graph* graph_for(int64_t num_seqs);

  DeepseekModel& model_;
  KvPool& kv_;
  int32_t scratch_slot_;
  int max_size_ = 0;
  int64_t max_kv_ = 0;
  // Offsets (in elements) of each index array in inputs_; kv indices come last.
  int64_t off_ids_ = 0, off_pos_ = 0, off_slots_ = 0, off_rows_ = 0, off_lens_ = 0, off_qstart_ = 0,
          off_kvstart_ = 0, off_kv_ = 0;
  Tensor inputs_;  // I32 on the backend
  std::vector<std::unique_ptr<Graph>> graphs_;  // ascending by size
  std::vector<int> sizes_;
};

}  // namespace mlaserve
