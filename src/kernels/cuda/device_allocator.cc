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

std::shared_ptr<void> DeviceAllocator::allocate(size_t bytes) {
  size_t size = rounded(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(size);
    if (it != free_.end()) {
      p = it->second;
      free_.erase(it);
      cached_ -= size;
    }
  }
  if (!p) {
    if (cudaMalloc(&p, size) != cudaSuccess) {
      cudaGetLastError();  // clear the error, return what is cached, and try once more
      release_cached();
      CUDA_CHECK(cudaMalloc(&p, size));
    }
  }
  std::weak_ptr<DeviceAllocator> owner = weak_from_this();
  return std::shared_ptr<void>(p, [owner, size](void* q) {
    if (auto a = owner.lock()) a->give_back(q, size);
    else cudaFree(q);
  });
}

void DeviceAllocator::give_back(void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.emplace(bytes, p);
  cached_ += bytes;
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [size, p] : free_) cudaFree(p);
  free_.clear();
  cached_ = 0;
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_;
}

DeviceAllocator::~DeviceAllocator() {
  for (auto& [size, p] : free_) cudaFree(p);
}

}  // namespace mlaserve::cuda
