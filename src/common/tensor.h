// Tensor: a typed, shaped view of memory on one device, with strides in elements, holding a
// reference to whatever owns the memory (a host allocation, an mmap'd checkpoint, a device
// buffer). Views (narrow, reshape, row slices) share the owner. Kernels take Tensors and check
// shapes at the op boundary; they never own memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/dtype.h"

namespace mlaserve {

enum class Device : uint8_t { CPU, CUDA };

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // Host allocation, 64-byte aligned. `zeros` clears it; `empty` leaves it undefined.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // A view of memory that `owner` keeps alive (nullptr: the caller guarantees lifetime).
  static Tensor wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner,
                     Device device = Device::CPU);
  static Tensor from_i32(const std::vector<int32_t>& values);
  static Tensor from_f32(const std::vector<float>& values, Shape shape);

  bool defined() const { return data_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return int(shape_.size()); }
  int64_t size(int dim) const;  // negative dims count from the end
  int64_t stride(int dim) const;
  int64_t numel() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const { return data_; }
  template <class T>
  T* data() const { return static_cast<T*>(data_); }
  const std::shared_ptr<void>& owner() const { return owner_; }

  // Views.
  Tensor reshape(Shape shape) const;                           // contiguous only
  Tensor narrow(int dim, int64_t start, int64_t length) const;  // keeps strides
  Tensor row(int64_t index) const { return narrow(0, index, 1); }
  // Same memory, new shape and strides (in elements), checked against nothing: callers own it.
  Tensor as_strided(Shape shape, Shape strides) const;
  // Itself when contiguous, else a contiguous host copy.
  Tensor contiguous() const;
  // A new contiguous host fp32 copy.
  Tensor to_f32() const;

  std::string describe() const;  // "BF16[4, 64]"

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  Shape shape_;
  Shape strides_;
};

Shape contiguous_strides(const Shape& shape);

}  // namespace mlaserve
