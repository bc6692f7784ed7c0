#include "cache/kv_pool.h"

#include "common/error.h"

namespace mlaserve {

KvPool::KvPool(Backend& backend, int64_t num_layers, int64_t num_slots, int64_t kv_dim, DType dtype)
    : num_slots_(num_slots), kv_dim_(kv_dim), dtype_(dtype) {
  MLA_CHECK(num_slots > 0 && kv_dim > 0, "KV pool needs slots and width, got {} x {}", num_slots, kv_dim);
  for (int64_t l = 0; l < num_layers; ++l) layers_.push_back(backend.empty(dtype, {num_slots, kv_dim}));
}

void KvPool::set_page_size(int64_t page_size) {
  MLA_CHECK(page_size >= 1, "KV pool: page size {}", page_size);
  page_size_ = page_size;
}

}  // namespace mlaserve
