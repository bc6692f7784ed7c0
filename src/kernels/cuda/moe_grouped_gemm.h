// Grouped expert GEMM for MoE prefill: every expert's rows times its own weight in one launch,
// with the rows per expert read on the device (no host round trip, so it can sit in a CUDA graph).
//
//   c[r, n] = a[r, :] · W_e[n, :]  for every row r in [offsets[e], offsets[e + 1]) of expert e,
//
// where a holds the (token, expert) pairs' activations sorted by expert (launch_moe_align and
// launch_moe_gather). W_e comes from `w` or, for the columns n >= n_split, from `w_hi` at row
// n - n_split: gate and up of one expert then run as one [2I, K] product into [gate | up].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

struct MoeGroupedGemmParams {
  const void* a;           // [rows, K] BF16, row stride K
  const int32_t* offsets;  // [E + 1] on the device
  const void* const* w;    // [E] device pointers to [n_split (or N), K] BF16, rows contiguous
  const void* const* w_hi; // [E] pointers for columns [n_split, N), or nullptr
  void* c;                 // [rows, ldc] BF16
  int64_t ldc;
  int32_t max_rows;        // an upper bound of offsets[E] (sizes the grid)
  int32_t num_experts, N, K, n_split;
};

// Whether the kernel takes the shapes: K % 8 == 0, ldc even, n_split a multiple of the 128-column
// tile when w_hi is used, at most kMoeGroupedMaxExperts experts.
constexpr int kMoeGroupedMaxExperts = 512;
bool moe_grouped_gemm_fits(const MoeGroupedGemmParams& p);
void launch_moe_grouped_gemm(const MoeGroupedGemmParams& p, cudaStream_t stream);

}  // namespace mlaserve::cuda
