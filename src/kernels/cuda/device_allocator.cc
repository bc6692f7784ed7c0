#include "kernels/cuda/device_allocator.h"

#include <bit>

#include "kernels/cuda/cuda_check.h"

namespace mlaserve::cuda {

namespace {

// 512-byte granules; above 2 KiB, steps of a quarter of the size's power of two.
size_t rounded(size_t bytes) {
  size_t step = 512;
  if (bytes > 2048) step = std::max<size_t>(512, std::bit_floor(bytes) / 4);
  return (std::max<size_t>(bytes, 1) + step - 1) / step * step;
}

}  // namespace

DeviceAllocator::DeviceAllocator() = default;

std::shared_ptr<void> DeviceAllocator::allocate(size_t bytes) {
  size_t size = rounded(bytes);
  void* p = nullptr;
  Pool* pool = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pool = graph_mode_ ? &graph_ : &general_;
    auto it = pool->free.find(size);
    if (it != pool->free.end()) {
      p = it->second;
      pool->free.erase(it);
      pool->cached -= size;
    }
  }
  if (!p) {
    // cudaMalloc is not a stream operation: it is allowed while a graph is captured.
    if (cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();  // clear the error, return what is cached, and try once more
      release_cached();
      CUDA_CHECK(cudaMalloc(&p, size));
    }
    std::lock_guard<std::mutex> lock(mu_);
    pool->total += size;
  }
  std::weak_ptr<DeviceAllocator> owner = weak_from_this();
  return std::shared_ptr<void>(p, [owner, pool, size](void* q) {
    if (auto a = owner.lock()) a->give_back(*pool, q, size);
    else cudaFree(q);
  });
}

void DeviceAllocator::use_graph_pool(bool on) {
  std::lock_guard<std::mutex> lock(mu_);
  graph_mode_ = on;
}

void DeviceAllocator::give_back(Pool& pool, void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  pool.free.emplace(bytes, p);
  pool.cached += bytes;
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, p] : general_.free) cudaFree(p);
  general_.total -= general_.cached;
  general_.free.clear();
  general_.cached = 0;
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return general_.cached;
}

size_t DeviceAllocator::graph_pool_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return graph_.total;
}

DeviceAllocator::~DeviceAllocator() {
  for (Pool* pool : {&general_, &graph_})
    for (auto& [size, p] : pool->free) cudaFree(p);
}

}  // namespace mlaserve::cuda
