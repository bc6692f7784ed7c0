// The latent KV pool: per layer, one row of kv_cache_dim values ([c_kv, k_pe], 576 for DeepSeek)
// per token slot. Slots are handed out by the scheduler's allocator; the pool only holds memory.
#pragma once

#include <vector>

#include "kernels/ops.h"

namespace mlaserve {

class KvPool {
 public:
  KvPool(Backend& backend, int64_t num_layers, int64_t num_slots, int64_t kv_dim, DType dtype);

  Tensor& layer(int64_t index) { return layers_.at(size_t(index)); }
  int64_t num_layers() const { return int64_t(layers_.size()); }
  int64_t num_slots() const { return num_slots_; }
  int64_t kv_dim() const { return kv_dim_; }
  DType dtype() const { return dtype_; }
  // Slots are handed out in pages of this many (AttentionMetadata::kv_page_size); set by whoever
  // owns the allocator, before decode graphs are captured (they keep what they saw).
  int64_t page_size() const { return page_size_; }
  void set_page_size(int64_t page_size);
  uint64_t nbytes() const { return uint64_t(num_layers()) * uint64_t(num_slots_ * kv_dim_) * dtype_size(dtype_); }

 private:
  std::vector<Tensor> layers_;  // each [num_slots, kv_dim]
  int64_t num_slots_, kv_dim_, page_size_ = 1;
  DType dtype_;
};

}  // namespace mlaserve
