// Tensor maps (the TMA's descriptor of a global tensor, tma.cuh), made through the driver's
// cuTensorMapEncodeTiled. It is looked up at run time through the CUDA runtime, so binaries do not
// link libcuda and still start on machines without a driver (CI runs the CPU tests there).
#pragma once

#include <cuda.h>

#include <cstdint>

namespace mlaserve::cuda {

// A row-major BF16 matrix [rows, cols] with rows `row_bytes` apart, read in boxes of
// box_rows x box_cols with the 128-byte swizzle (box_cols * 2 must be 128).
CUtensorMap bf16_tensor_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows,
                                  int box_cols);

}  // namespace mlaserve::cuda
