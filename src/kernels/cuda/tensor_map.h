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

// The same matrix as column blocks of 64 (cols / 64 of them), read box_blocks consecutive blocks of
// box_rows rows at a time: a box lands block after block, each box_rows x 128 bytes in the 128-byte
// swizzle, as box_blocks boxes of the map above would, but in one copy. (A 3D map whose block
// stride, 128 bytes, is below its row stride.)
CUtensorMap bf16_tensor_map_sw128_blocks(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows,
                                         int box_blocks);

// A row-major matrix of bytes (e4m3 codes) [rows, cols], read in boxes of box_rows x 128 with the
// 128-byte swizzle: one K-block of 128 codes a row, as FP8 wgmma reads it K-major.
CUtensorMap bytes_tensor_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows);

// A row-major F32 matrix [rows, cols], read box_cols consecutive values of one row at a time (no
// swizzle): per-token scales stored token-contiguous, a K-block's run of tokens a copy.
CUtensorMap f32_tensor_map(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_cols);

}  // namespace mlaserve::cuda
