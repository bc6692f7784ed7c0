// Weights as the kernels see them: a linear layer's matrix with its optional FP8 block scales,
// and the three matrices of a gated (SiLU) MLP. Built by the loader, read by every backend.
#pragma once

#include <vector>

#include "common/tensor.h"

namespace mlaserve {

struct LinearWeight {
  Tensor weight;     // [out, in]: F32, BF16, F16, or F8_E4M3 with scale_inv
  Tensor scale_inv;  // [ceil(out/block_n), ceil(in/block_k)] F32; defined only for F8_E4M3 weights
  int64_t block_n = 128;
  int64_t block_k = 128;
  // FP8 128 x 128 blocks stored block by block: block (n, k) is the 16 KB at (n * in / 128 + k) *
  // 16384, its 128 rows 128 bytes each. The CUDA expert kernels stream it in whole-block reads
  // (Backend::pack_moe_experts makes it); every other op takes row-major weights only.
  bool tiled = false;
  // Rows of zeros after the last row, with a ragged last block of FP8 rows (out % block_n != 0):
  // GEMMs that read whole blocks (cuBLASLt's block-scaled mode) may read them. Backends that need
  // them make them (CudaBackend::to_backend); 0 elsewhere.
  int64_t pad_rows = 0;

  int64_t out_features() const { return weight.size(0); }
  int64_t in_features() const { return weight.size(1); }
  bool is_fp8_block() const { return scale_inv.defined(); }
};

// down(silu(gate(x)) * up(x))
struct GatedMlpWeights {
  LinearWeight gate;  // [inter, hidden]
  LinearWeight up;    // [inter, hidden]
  LinearWeight down;  // [hidden, inter]
  // gate and up stacked, [2 * inter, hidden], when the model made it (then gate and up are left
  // undefined): one GEMM instead of two.
  LinearWeight gate_up = {};
};

// Rows [begin, begin + count) of w, a view, with their FP8 block scales (begin and count whole
// blocks of rows then).
LinearWeight row_range(const LinearWeight& w, int64_t begin, int64_t count);

// Weight (r, c) of a block-scaled FP8 matrix in fp32: e4m3 value times its block's scale.
float dequant_fp8_block(const LinearWeight& w, int64_t r, int64_t c);
// The whole matrix in fp32 (any dtype), [out, in].
Tensor dequantize(const LinearWeight& w);

}  // namespace mlaserve
