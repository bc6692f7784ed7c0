#include "model/absorbed_weights.h"

#include <algorithm>
#include <cstring>

namespace mlaserve {

namespace {

// Whether kv_b's FP8 blocks fall within heads: every head's nope rows, v rows and the kv_lora
// columns whole blocks.
bool blocks_within_heads(const LinearWeight& kv_b, int64_t nope, int64_t v) {
  return kv_b.is_fp8_block() && nope % kv_b.block_n == 0 && v % kv_b.block_n == 0 &&
         kv_b.in_features() % kv_b.block_k == 0;
}

// The FP8 pair from the e4m3 codes and scales as they are (no requantization): W_UK's blocks
// transposed (block (j, l) of head h becomes block (l, j) of its w_uk_t rows, same scale), W_UV's
// rows copied.
void cut_fp8(const LinearWeight& kv_b, int64_t H, int64_t nope, int64_t v, LinearWeight& uk_t, LinearWeight& uv) {
  const Tensor w = kv_b.weight.contiguous(), s = kv_b.scale_inv.contiguous();
  const int64_t L = w.size(1), bn = kv_b.block_n, bk = kv_b.block_k, S = s.size(1);
  const uint8_t* src = w.data<uint8_t>();
  const float* scale = s.data<float>();
  uk_t.weight = Tensor::empty(DType::F8_E4M3, {H * L, nope});
  uk_t.scale_inv = Tensor::empty(DType::F32, {H * L / bk, nope / bn});
  uk_t.block_n = bk, uk_t.block_k = bn;
  uv.weight = Tensor::empty(DType::F8_E4M3, {H * v, L});
  uv.scale_inv = Tensor::empty(DType::F32, {H * v / bn, S});
  uv.block_n = bn, uv.block_k = bk;
  uint8_t* uk_dst = uk_t.weight.data<uint8_t>();
  float* uk_scale = uk_t.scale_inv.data<float>();
  for (int64_t h = 0; h < H; ++h) {
    const int64_t row0 = h * (nope + v);
    for (int64_t j = 0; j < nope; ++j)
      for (int64_t l = 0; l < L; ++l) uk_dst[(h * L + l) * nope + j] = src[(row0 + j) * L + l];
    for (int64_t lb = 0; lb < L / bk; ++lb)
      for (int64_t jb = 0; jb < nope / bn; ++jb)
        uk_scale[(h * L / bk + lb) * (nope / bn) + jb] = scale[(row0 / bn + jb) * S + lb];
    std::memcpy(uv.weight.data<uint8_t>() + h * v * L, src + (row0 + nope) * L, size_t(v * L));
    std::copy_n(scale + (row0 + nope) / bn * S, v / bn * S, uv.scale_inv.data<float>() + h * v / bn * S);
  }
}

}  // namespace

AbsorbedWeights make_absorbed_weights(const LinearWeight& kv_b, int64_t H, int64_t nope, int64_t v,
                                      Backend& backend, bool fp8_bmm) {
  AbsorbedWeights out;
  if (fp8_bmm && backend.supports_fp8_w8a8() && blocks_within_heads(kv_b, nope, v)) {
    LinearWeight uk_t, uv;
    cut_fp8(kv_b, H, nope, v, uk_t, uv);
    out.w_uk_t = backend.to_backend(uk_t);
    out.w_uv_fp8 = backend.to_backend(uv);
    // A backend whose FP8 GEMMs do not take these blocks (CUDA: only 128 x 128) dequantizes them:
    // then the dense pair serves alone.
    if (!out.w_uk_t.is_fp8_block() || !out.w_uv_fp8.is_fp8_block()) out.w_uk_t = out.w_uv_fp8 = LinearWeight{};
  }
  const Tensor w = dequantize(kv_b);
  const int64_t L = w.size(1);
  Tensor uk = Tensor::empty(DType::F32, {H, nope, L}), uv = Tensor::empty(DType::F32, {H, v, L});
  for (int64_t h = 0; h < H; ++h) {
    const float* src = w.data<float>() + h * (nope + v) * L;
    std::copy_n(src, nope * L, uk.data<float>() + h * nope * L);
    std::copy_n(src + nope * L, v * L, uv.data<float>() + h * v * L);
  }
  out.w_uk = backend.to_backend(uk);
  out.w_uv = backend.to_backend(uv);
  return out;
}

void absorb_q(Backend& ops, const AbsorbedWeights& w, const Tensor& q_nope, const Tensor& q_pe, Tensor& q_latent) {
  if (w.fp8() && q_nope.size(0) <= kFp8BmmMaxTokens)
    ops.mla_absorb_q_w8a8(q_nope, q_pe, w.w_uk_t, q_latent);
  else
    ops.mla_absorb_q(q_nope, q_pe, w.w_uk, q_latent);
}

void decode_absorbed(Backend& ops, const AbsorbedWeights& w, const Tensor& q_latent, const Tensor& cache,
                     float kv_scale, const AttentionMetadata& md, float scale, Tensor& o_latent, Tensor& out) {
  if (w.fp8() && q_latent.size(0) <= kFp8BmmMaxTokens) {
    ops.mla_decode(q_latent, cache, kv_scale, md, scale, o_latent);
    ops.mla_absorb_out_w8a8(o_latent, w.w_uv_fp8, out);
  } else {
    ops.mla_decode_absorb_out(q_latent, cache, kv_scale, md, scale, w.w_uv, o_latent, out);
  }
}

}  // namespace mlaserve
