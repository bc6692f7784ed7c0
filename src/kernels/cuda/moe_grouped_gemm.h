// Grouped expert GEMM for MoE prefill: every expert's rows times its own weight in one launch,
// with the rows per expert read on the device (no host round trip, so it can sit in a CUDA graph).
//
//   c[r, n] = a[r, :] · W_e[n, :]  for every row r in [offsets[e], offsets[e + 1]) of expert e,
//
// where a holds the (token, expert) pairs' activations sorted by expert (launch_moe_align and
// launch_moe_gather, or on wide tiles the tokens read in place through a_rows). W_e comes from `w`
// or, for the columns n >= n_split, from `w_hi` at row n - n_split: gate and up of one expert then
// run as one [2I, K] product into [gate | up].
// With silu_and_mul, W_e is gate (`w`) and up (`w_hi`) side by side and
//
//   c[r, n] = silu(a[r, :] · gate_e[n, :]) * (a[r, :] · up_e[n, :])   for n < N,
//
// both products rounded to BF16 first, as silu_and_mul would see them.
//
// Two kernels: 32-row tiles on mma.sync (moe_grouped_gemm.cu) while experts average few rows
// (decode batches), 128-row tiles on wgmma (moe_grouped_gemm_wgmma.cu) past that.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

struct MoeGroupedGemmParams {
  const void* a;           // [rows, K] BF16, row stride lda
  const int32_t* offsets;  // [E + 1] on the device
  const void* const* w;    // [E] device pointers to [n_split (or N), K] BF16, rows contiguous
  const void* const* w_hi; // [E] pointers for columns [n_split, N), or nullptr
  void* c;                 // [rows, ldc] BF16
  int64_t ldc;
  int32_t max_rows;        // an upper bound of offsets[E] (sizes the grid)
  int32_t num_experts, N, K, n_split;
  bool silu_and_mul = false;  // wide tiles only
  // Wide tiles only: row r of the product reads a + (a_rows[r] / a_rows_div) * lda instead (the
  // sorted pairs' tokens straight from the activation, with no gathered copy).
  const int32_t* a_rows = nullptr;
  int32_t a_rows_div = 1;
  int64_t lda = 0;  // row stride of a; K when 0
};

constexpr int kMoeGroupedMaxExperts = 512;
// Whether a launch with these bounds takes the wide (wgmma) tiles: experts average 48 rows or more
// (the row counts themselves are only on the device).
bool moe_grouped_gemm_wide(int32_t max_rows, int32_t num_experts);
// Whether the kernels take the shapes: K % 8 == 0, ldc even, a 16-byte aligned, at most
// kMoeGroupedMaxExperts experts; on narrow tiles also n_split a multiple of 128 when w_hi is used,
// and no silu_and_mul or a_rows; on wide tiles w_hi only with silu_and_mul, lda % 8 == 0.
bool moe_grouped_gemm_fits(const MoeGroupedGemmParams& p);
void launch_moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream);
void launch_moe_grouped_gemm_wgmma(const MoeGroupedGemmParams& p, cudaStream_t stream);  // wide tiles, lda set

}  // namespace mlaserve::cuda
