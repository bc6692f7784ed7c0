// DeviceAllocator: keeps freed device blocks for reuse, so the per-op activations of a forward
// pass cost no cudaMalloc / cudaFree (cudaFree waits for the whole device). Sizes are rounded up
// (at most 25% extra) so that batches of different lengths reuse each other's blocks. All work
// runs on one stream, so a block freed by one op and handed to the next is used in stream order.
//
// While a CUDA graph is captured, blocks come from a second pool kept for graphs: a replay writes
// to the addresses seen at capture, so those blocks must never serve other work. Graphs share the
// pool (they replay one at a time, in stream order), and a block returns to the pool it came from.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace mlaserve::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  DeviceAllocator();
  ~DeviceAllocator();

  // A block of at least `bytes`; it returns to its pool when the last owner lets go.
  std::shared_ptr<void> allocate(size_t bytes);
  // Until set back to false, allocations come from the graph pool.
  void use_graph_pool(bool on);
  // Gives every cached block of the general pool back to the device.
  void release_cached();

  // Free blocks of the general pool (the graph pool's are spoken for).
  size_t cached_bytes() const;
  // Every block the graph pool holds, in use or not.
  size_t graph_pool_bytes() const;

 private:
  struct Pool {
    std::multimap<size_t, void*> free;  // rounded size -> block
    size_t cached = 0, total = 0;
  };
  void give_back(Pool& pool, void* p, size_t bytes);

  mutable std::mutex mu_;
  Pool general_, graph_;
  bool graph_mode_ = false;
};

}  // namespace mlaserve::cuda
