#include "common/tensor.h"

#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace mlaserve {

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = int(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    MLA_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
    n *= d;
  }
  size_t bytes = (size_t(n) * dtype_size(dtype) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, bytes ? bytes : 64);
  MLA_CHECK(p, "out of host memory allocating {} bytes for {}{}", bytes, dtype_name(dtype), shape_str(shape));
  Tensor t;
  t.owner_ = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  t.data_ = p;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  Tensor t = empty(dtype, std::move(shape));
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, DType dtype, Shape shape, std::shared_ptr<void> owner, Device device) {
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::from_i32(const std::vector<int32_t>& values) {
  Tensor t = empty(DType::I32, {int64_t(values.size())});
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

Tensor Tensor::from_f32(const std::vector<float>& values, Shape shape) {
  Tensor t = empty(DType::F32, std::move(shape));
  MLA_CHECK(size_t(t.numel()) == values.size(), "from_f32: {} values for shape {}", values.size(),
            shape_str(t.shape_));
  if (!values.empty()) std::memcpy(t.data_, values.data(), values.size() * 4);
  return t;
}

int64_t Tensor::size(int dim) const {
  int d = dim < 0 ? dim + ndim() : dim;
  MLA_CHECK(d >= 0 && d < ndim(), "dim {} out of range for {}", dim, describe());
  return shape_[d];
}

int64_t Tensor::stride(int dim) const {
  int d = dim < 0 ? dim + ndim() : dim;
  MLA_CHECK(d >= 0 && d < ndim(), "dim {} out of range for {}", dim, describe());
  return strides_[d];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

Tensor Tensor::reshape(Shape shape) const {
  MLA_CHECK(is_contiguous(), "reshape of a non-contiguous tensor {}", describe());
  int64_t n = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) infer = int64_t(i);
    else n *= shape[i];
  }
  if (infer >= 0) shape[infer] = n ? numel() / n : 0;
  Tensor t = *this;
  t.shape_ = std::move(shape);
  MLA_CHECK(t.numel() == numel(), "cannot reshape {} to {}", describe(), shape_str(t.shape_));
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::narrow(int dim, int64_t start, int64_t length) const {
  int d = dim < 0 ? dim + ndim() : dim;
  MLA_CHECK(d >= 0 && d < ndim() && start >= 0 && length >= 0 && start + length <= shape_[d],
            "narrow(dim {}, {}, {}) out of range for {}", dim, start, length, describe());
  Tensor t = *this;
  t.shape_[d] = length;
  t.data_ = static_cast<char*>(data_) + start * strides_[d] * int64_t(dtype_size(dtype_));
  return t;
}

Tensor Tensor::as_strided(Shape shape, Shape strides) const {
  MLA_CHECK(shape.size() == strides.size(), "as_strided: {} dims but {} strides", shape.size(), strides.size());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = std::move(strides);
  return t;
}

Tensor Tensor::contiguous() const {
  MLA_CHECK(device_ == Device::CPU, "contiguous() of a device tensor");
  if (is_contiguous()) return *this;
  Tensor out = empty(dtype_, shape_);
  size_t es = dtype_size(dtype_);
  int64_t n = numel();
  std::vector<int64_t> idx(shape_.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * strides_[d];
    std::memcpy(static_cast<char*>(out.data_) + i * es, static_cast<char*>(data_) + off * es, es);
    for (int d = int(idx.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape_[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

Tensor Tensor::to_f32() const {
  Tensor src = contiguous();
  Tensor out = empty(DType::F32, shape_);
  float* o = out.data<float>();
  int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) o[i] = load_as_f32(src.data_, dtype_, size_t(i));
  return out;
}

std::string Tensor::describe() const { return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_)); }

}  // namespace mlaserve
