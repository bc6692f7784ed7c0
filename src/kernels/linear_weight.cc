#include "kernels/linear_weight.h"

#include "common/error.h"

namespace mlaserve {

LinearWeight row_range(const LinearWeight& w, int64_t begin, int64_t count) {
  LinearWeight out = w;
  out.weight = w.weight.narrow(0, begin, count);
  out.pad_rows = 0;  // whole blocks: the pad rows lie past the last one
  if (!w.is_fp8_block()) return out;
  MLA_CHECK(begin % w.block_n == 0 && count % w.block_n == 0,
            "row_range: rows [{}, {}) of an FP8 weight cut its blocks of {} rows", begin, begin + count, w.block_n);
  out.scale_inv = w.scale_inv.narrow(0, begin / w.block_n, count / w.block_n);
  return out;
}

float dequant_fp8_block(const LinearWeight& w, int64_t r, int64_t c) {
  const auto* q = w.weight.data<uint8_t>() + r * w.weight.stride(0);
  const float* s = w.scale_inv.data<float>() + (r / w.block_n) * w.scale_inv.stride(0);
  return e4m3_to_f32(q[c]) * s[c / w.block_k];
}

Tensor dequantize(const LinearWeight& w) {
  MLA_CHECK(w.weight.device() == Device::CPU, "dequantize: weight {} is not on the host", w.weight.describe());
  if (!w.is_fp8_block()) return w.weight.to_f32();
  MLA_CHECK(!w.tiled, "dequantize: the FP8 weight {} is stored block by block (tiled)", w.weight.describe());
  int64_t n = w.out_features(), k = w.in_features();
  Tensor out = Tensor::empty(DType::F32, {n, k});
  float* o = out.data<float>();
#pragma omp parallel for if (n * k >= (int64_t(1) << 16))
  for (int64_t r = 0; r < n; ++r)
    for (int64_t c = 0; c < k; ++c) o[r * k + c] = dequant_fp8_block(w, r, c);
  return out;
}

}  // namespace mlaserve
