// Checks of tensors at the CUDA backend's op boundary, shared by its files.
#pragma once

#include "common/error.h"
#include "common/tensor.h"

namespace mlaserve::cuda {

// A device dtype[rows, cols] matrix with a contiguous last dim.
inline void check_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == dtype && t.ndim() == 2 && t.stride(1) == 1 &&
                t.size(0) == rows && t.size(1) == cols,
            "{}: expected a device {}[{}, {}] with a contiguous last dim, got {}", what, dtype_name(dtype), rows, cols,
            t.defined() ? t.describe() : "nothing");
}

}  // namespace mlaserve::cuda
