// Checks of tensors at the CUDA backend's op boundary, shared by its files.
#pragma once

#include <cmath>

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

// The scale of a KV cache of this dtype: any positive one for FP8 e4m3 (which holds latent / scale),
// 1 for BF16. True for FP8.
inline bool check_kv_scale(DType cache_dtype, float kv_scale, const char* what) {
  const bool fp8 = cache_dtype == DType::F8_E4M3;
  MLA_CHECK(kv_scale > 0 && std::isfinite(kv_scale) && (fp8 || kv_scale == 1.0f),
            "{}: KV cache scale {}: expected a positive scale for an FP8 cache, 1 for a BF16 one", what, kv_scale);
  return fp8;
}

}  // namespace mlaserve::cuda
