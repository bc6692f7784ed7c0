#include "weights/fp8_block_quant.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace mlaserve {

LinearWeight quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k) {
  MLA_CHECK(w.ndim() == 2 && is_float(w.dtype()) && w.dtype() != DType::F8_E4M3,
            "quantize_fp8_blocks: expected a 2-D float matrix, got {}", w.describe());
  MLA_CHECK(block_n > 0 && block_k > 0, "quantize_fp8_blocks: block {}x{} must be positive", block_n, block_k);
  Tensor f = w.to_f32();
  int64_t N = f.size(0), K = f.size(1), gn = (N + block_n - 1) / block_n, gk = (K + block_k - 1) / block_k;
  LinearWeight q;
  q.weight = Tensor::empty(DType::F8_E4M3, {N, K});
  q.scale_inv = Tensor::empty(DType::F32, {gn, gk});
  q.block_n = block_n;
  q.block_k = block_k;
  const float* v = f.data<float>();
  uint8_t* codes = q.weight.data<uint8_t>();
#pragma omp parallel for collapse(2) if (N * K >= (int64_t(1) << 16))
  for (int64_t bi = 0; bi < gn; ++bi) {
    for (int64_t bj = 0; bj < gk; ++bj) {
      int64_t r0 = bi * block_n, r1 = std::min(N, r0 + block_n), c0 = bj * block_k, c1 = std::min(K, c0 + block_k);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(v[r * K + c]));
      float scale = amax > 0 ? amax / kE4m3Max : 1.0f;
      q.scale_inv.data<float>()[bi * gk + bj] = scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) codes[r * K + c] = f32_to_e4m3(v[r * K + c] / scale);
    }
  }
  return q;
}

}  // namespace mlaserve
