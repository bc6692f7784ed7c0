// Grouped expert GEMM over FP8 (e4m3) weights with 128 x 128 block scales, as DeepSeek-V3/R1 ship
// them, W8A8 like every FP8 linear layer (kernels/cpu/cpu_fp8.cc is the reference math):
//
//   c[r, n] = sum over K-blocks b of a_scale[r, b] * w_scale_e[n / 128, b] * (a[r, b] · W_e[n, b])
//
// for every row r in [offsets[e], offsets[e + 1]) of expert e, each block's e4m3 products summed
// in fp32 on the tensor cores and promoted to the fp32 total with its scales. Rows and experts as
// in moe_grouped_gemm.h: W_e comes from `w`, or from `w_hi` for the columns n >= n_split (gate and
// up as one [2I, K] product).
//
// Two kernels compute it: mma.sync over 32-row tiles (moe_grouped_gemm_fp8.cu) and warpgroup MMA
// over tiles of 16 to 128 rows (moe_grouped_gemm_fp8_wgmma.cu). With k_splits > 1 the K-blocks are
// cut into that many ranges (grid.z) and range z writes its fp32 partial sums to
// c + z * split_stride: few rows then still spread over the SMs, and the partials are summed in
// order by the next kernel (launch_moe_silu_mul_quant), so the result does not depend on the
// schedule.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mlaserve::cuda {

// How a product runs: the kernel, the rows of a tile (an expert's rows are cut into tiles; each
// tile streams the expert's weights once), the K ranges (grid.z) and the 128-column tiles a block
// runs in turn (so a short K still streams enough bytes a block to pay for finding its rows).
struct MoeFp8Launch {
  enum class Kernel : int32_t { MmaSync, Wgmma };
  Kernel kernel = Kernel::Wgmma;
  int32_t tile_rows = 16;  // MmaSync: 32; Wgmma: 16, 32, 64 or 128
  int32_t k_splits = 1;
  int32_t n_tiles_per_block = 1;
};
// "wgmma rows=16 k_splits=4 n_tiles=1"
std::string to_string(const MoeFp8Launch& l);

struct MoeFp8GemmParams {
  const void* a;         // e4m3 [., K], row stride lda
  const float* a_scale;  // [., K / 128], row stride ld_a_scale: the rows of a, scaled per 128 columns
  int64_t lda, ld_a_scale;
  // Row r of the product reads row a_rows[r] / a_rows_div of a and a_scale (the sorted pairs'
  // tokens, in place); nullptr: row r.
  const int32_t* a_rows;
  int32_t a_rows_div;
  const int32_t* offsets;          // [E + 1] on the device
  const void* const* w;            // [E] -> e4m3 [n_split, K], rows contiguous
  const float* const* w_scale;     // [E] -> F32 [n_split / 128, K / 128], rows ld_w_scale apart
  const void* const* w_hi;         // [E] -> e4m3 [N - n_split, K] for columns [n_split, N), or nullptr
  const float* const* w_hi_scale;  // their scales, rows ld_w_scale apart too
  int64_t ld_w_scale;
  void* c;  // [rows, ldc]: BF16, or F32 with c_f32 (then + z * split_stride)
  int64_t ldc, split_stride;
  bool c_f32;
  MoeFp8Launch launch;
  int32_t max_rows;  // an upper bound of offsets[E] (sizes the grid)
  int32_t num_experts, N, K, n_split;
  // Experts [0, tiled_experts) store w and w_hi block by block (launch_moe_fp8_tile_weights), the
  // others row-major.
  int32_t tiled_experts = 0;
};

// Whether the kernels take the shapes and p.launch: N, K and n_split multiples of 128, K < 2^20, lda,
// ld_a_scale and ld_w_scale set, a and a BF16 c 16-byte aligned (its ldc a multiple of 8), at most
// kMoeGroupedMaxExperts experts, K / 128 >= k_splits >= 1, split output only as F32, a tile size the
// kernel has, tiled_experts in [0, E].
bool moe_grouped_gemm_fp8_fits(const MoeFp8GemmParams& p);
void launch_moe_grouped_gemm_fp8(const MoeFp8GemmParams& p, cudaStream_t stream);
// The warpgroup-MMA kernel (launch_moe_grouped_gemm_fp8 calls it for Kernel::Wgmma).
void launch_moe_grouped_gemm_fp8_wgmma(const MoeFp8GemmParams& p, cudaStream_t stream);

// The launch used where none is tuned. Tiles as tall as the rows an expert averages (p.max_rows over
// the experts they can touch), at least 16; with allow_k_splits, enough K ranges that the launch
// fills the device (the blocks an SM the tile size fits, counting the row tiles p.max_rows may
// need), each range at least 4 K-blocks; where blocks are many and K short, as the down GEMM's,
// several column tiles a block, so each block streams at least 16 K-blocks of weights after finding
// its rows.
MoeFp8Launch plan_moe_grouped_gemm_fp8(const MoeFp8GemmParams& p, int num_sms, bool allow_k_splits);

// Every launch the kernels have for p's shapes (what tune-moe times); k_splits > 1 only with
// allow_k_splits.
std::vector<MoeFp8Launch> moe_grouped_gemm_fp8_launches(const MoeFp8GemmParams& p, bool allow_k_splits);

// An FP8 weight [N, K] (N, K multiples of 128, rows contiguous) rearranged block by block, as
// LinearWeight::tiled describes: each 16 KB block one contiguous read for the kernels, where
// row-major rows scatter a block's 128-byte rows K bytes apart (4% more of the copy bandwidth
// for gate/up at 512 tokens on H200). src and dst must not overlap.
void launch_moe_fp8_tile_weights(const void* src, int64_t N, int64_t K, void* dst, cudaStream_t stream);

// The activation between the expert GEMMs, quantized for the down GEMM: for rows r < *count,
//   act[r, n] = e4m3(silu(g) * u / s),  act_scale[r, n / 128] = s = max(amax of the 128, 1e-10) / 448
// with g = sum_z gu[z][r, n], u = sum_z gu[z][r, I + n] (z < splits, in order; gu rows 2I wide,
// splits split_stride apart). act [rows, I] e4m3, act_scale [rows, I / 128]; I % 128 == 0.
void launch_moe_silu_mul_quant(const float* gu, int64_t split_stride, int32_t splits, int32_t I, const int32_t* count,
                               int32_t max_rows, void* act, float* act_scale, cudaStream_t stream);

}  // namespace mlaserve::cuda
