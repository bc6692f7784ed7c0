// DeviceAllocator: keeps freed device blocks for reuse, so the per-op activations of a forward
// pass cost no cudaMalloc / cudaFree (cudaFree waits for the whole device). Sizes are rounded up
// (at most 25% extra) so that batches of different lengths reuse each other's blocks. All work
// runs on one stream, so a block freed by one op and handed to the next is used in stream order.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

namespace mlaserve::cuda {

class DeviceAllocator : public std::enable_shared_from_this<DeviceAllocator> {
 public:
  // A block of at least `bytes`; it returns to this allocator when the last owner lets go.
  std::shared_ptr<void> allocate(size_t bytes);
  // Gives every cached block back to the device.
  void release_cached();
  ~DeviceAllocator();

  size_t cached_bytes() const;

 private:
  void give_back(void* p, size_t bytes);

  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  size_t cached_ = 0;
};

}  // namespace mlaserve::cuda
