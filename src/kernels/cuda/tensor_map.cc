#include "kernels/cuda/tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <string>

#include <fmt/format.h>

#include "common/error.h"

namespace mlaserve::cuda {

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found);
    MLA_CHECK(err == cudaSuccess && found == cudaDriverEntryPointSuccess && p != nullptr,
              "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a CUDA 12 driver): {}", cudaGetErrorString(err));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// Encodes a map; `what` names it in the error.
template <int kRank>
CUtensorMap encode(CUtensorMapDataType type, CUtensorMapSwizzle swizzle, const void* base,
                   const cuuint64_t (&dims)[kRank], const cuuint64_t (&strides)[kRank - 1],
                   const cuuint32_t (&box)[kRank], const std::string& what) {
  CUtensorMap map{};
  cuuint32_t elem_strides[kRank];
  for (auto& e : elem_strides) e = 1;
  CUresult r = encode_fn()(&map, type, kRank, const_cast<void*>(base), dims, strides, box, elem_strides,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  MLA_CHECK(r == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed ({}) for {}", int(r), what);
  return map;
}

template <int kRank>
CUtensorMap encode_bf16_sw128(const void* base, const cuuint64_t (&dims)[kRank],
                              const cuuint64_t (&strides)[kRank - 1], const cuuint32_t (&box)[kRank],
                              const std::string& what) {
  return encode<kRank>(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, CU_TENSOR_MAP_SWIZZLE_128B, base, dims, strides, box, what);
}

}  // namespace

CUtensorMap bf16_tensor_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows,
                                  int box_cols) {
  MLA_CHECK(box_cols * 2 == 128 && box_rows >= 1 && box_rows <= 256 && row_bytes % 16 == 0 &&
                reinterpret_cast<uintptr_t>(base) % 16 == 0 && rows >= 1 && cols >= box_cols,
            "tensor map: BF16 [{}, {}] with rows {} bytes apart cannot be read in {}x{} boxes with the 128-byte swizzle",
            rows, cols, row_bytes, box_rows, box_cols);
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), cuuint32_t(box_rows)};
  return encode_bf16_sw128<2>(base, dims, strides, box,
                              fmt::format("BF16 [{}, {}], box {}x{}", rows, cols, box_rows, box_cols));
}

CUtensorMap bf16_tensor_map_sw128_blocks(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows,
                                         int box_blocks) {
  MLA_CHECK(cols % 64 == 0 && box_blocks >= 1 && box_blocks <= cols / 64 && box_rows >= 1 && box_rows <= 256 &&
                row_bytes % 16 == 0 && row_bytes >= cols * 2 && reinterpret_cast<uintptr_t>(base) % 16 == 0 &&
                rows >= 1,
            "tensor map: BF16 [{}, {}] with rows {} bytes apart cannot be read as {} blocks of {}x64", rows, cols,
            row_bytes, box_blocks, box_rows);
  const cuuint64_t dims[3] = {64, cuuint64_t(rows), cuuint64_t(cols / 64)};
  const cuuint64_t strides[2] = {cuuint64_t(row_bytes), 128};
  const cuuint32_t box[3] = {64, cuuint32_t(box_rows), cuuint32_t(box_blocks)};
  return encode_bf16_sw128<3>(base, dims, strides, box,
                              fmt::format("BF16 [{}, {}] as {} blocks of {}x64", rows, cols, box_blocks, box_rows));
}

CUtensorMap bytes_tensor_map_sw128(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_rows) {
  MLA_CHECK(box_rows >= 1 && box_rows <= 256 && row_bytes % 16 == 0 && row_bytes >= cols && cols >= 128 &&
                reinterpret_cast<uintptr_t>(base) % 16 == 0 && rows >= 1,
            "tensor map: bytes [{}, {}] with rows {} bytes apart cannot be read in {}x128 boxes", rows, cols,
            row_bytes, box_rows);
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {128, cuuint32_t(box_rows)};
  return encode<2>(CU_TENSOR_MAP_DATA_TYPE_UINT8, CU_TENSOR_MAP_SWIZZLE_128B, base, dims, strides, box,
                   fmt::format("bytes [{}, {}], box {}x128", rows, cols, box_rows));
}

CUtensorMap f32_tensor_map(const void* base, int64_t rows, int64_t cols, int64_t row_bytes, int box_cols) {
  MLA_CHECK(box_cols >= 4 && box_cols <= 256 && box_cols % 4 == 0 && row_bytes % 16 == 0 && row_bytes >= cols * 4 &&
                reinterpret_cast<uintptr_t>(base) % 16 == 0 && rows >= 1 && cols >= 1,
            "tensor map: F32 [{}, {}] with rows {} bytes apart cannot be read in 1x{} boxes", rows, cols, row_bytes,
            box_cols);
  const cuuint64_t dims[2] = {cuuint64_t(cols), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_cols), 1};
  return encode<2>(CU_TENSOR_MAP_DATA_TYPE_FLOAT32, CU_TENSOR_MAP_SWIZZLE_NONE, base, dims, strides, box,
                   fmt::format("F32 [{}, {}], box 1x{}", rows, cols, box_cols));
}

}  // namespace mlaserve::cuda
