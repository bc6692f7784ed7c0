// A device buffer that only grows, for the scratch space kernels keep between calls (plans,
// pointer tables, partial results). Growing keeps the old block until the buffer dies instead of
// freeing it: a CUDA graph captured earlier still reads and writes the addresses it saw.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "kernels/cuda/cuda_check.h"

namespace mlaserve::cuda {

class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  ~GrowingBuffer() {
    for (void* p : retired_) cudaFree(p);
    if (ptr_) cudaFree(ptr_);
  }

  // At least n bytes; the pointer changes only when the buffer grows.
  void* ensure(size_t n) {
    if (n > bytes_) {
      void* p = nullptr;
      CUDA_CHECK(cudaMalloc(&p, n));
      if (ptr_) retired_.push_back(ptr_);
      ptr_ = p;
      bytes_ = n;
    }
    return ptr_;
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> retired_;
};

}  // namespace mlaserve::cuda
