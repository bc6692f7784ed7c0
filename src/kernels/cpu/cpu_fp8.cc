// FP8 W8A8 on the CPU: per-token-group activation quantization and the block-scaled linear, the
// math the CUDA FP8 GEMMs must reproduce (e4m3 products summed in fp32 per 128-wide K-block,
// each block's sum scaled by its activation and weight scales, blocks summed in fp32).
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::cpu {

namespace {

// The fp32 value of every e4m3 code: decoding is a lookup in the inner loops.
const std::array<float, 256>& e4m3_values() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int code = 0; code < 256; ++code) t[size_t(code)] = e4m3_to_f32(uint8_t(code));
    return t;
  }();
  return table;
}

void check_fp8(const Tensor& t, const Shape& shape, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CPU && t.dtype() == DType::F8_E4M3,
            "{}: expected a host F8_E4M3 tensor, got {}", what, t.defined() ? t.describe() : "nothing");
  MLA_CHECK(t.shape() == shape && t.stride(-1) == 1, "{}: expected shape {} with contiguous rows, got {}", what,
            shape_str(shape), t.describe());
}

}  // namespace

void CpuBackend::quantize_fp8_per_token_group(const Tensor& x, int64_t group, Tensor& q, Tensor& scales) {
  int64_t T = x.size(0), K = x.size(1);
  MLA_CHECK(group > 0, "quantize_fp8_per_token_group: group size {} must be positive", group);
  int64_t G = (K + group - 1) / group;
  check_f32(x, {T, K}, "quantize_fp8 x");
  check_fp8(q, {T, K}, "quantize_fp8 q");
  check_f32(scales, {T, G}, "quantize_fp8 scales");
#pragma omp parallel for if (worth_threads(T * K * 4))
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = row_ptr(x, t);
    uint8_t* qr = q.data<uint8_t>() + t * q.stride(0);
    float* sr = row_ptr(scales, t);
    for (int64_t g = 0; g < G; ++g) {
      int64_t begin = g * group, end = std::min(K, begin + group);
      float amax = 0;
      for (int64_t k = begin; k < end; ++k) amax = std::max(amax, std::fabs(xr[k]));
      float s = std::max(amax, kFp8MinAmax) / kE4m3Max;
      sr[g] = s;
      // x / s can land a rounding step above 448 for the group's largest value: the conversion
      // saturates it to 448.
      for (int64_t k = begin; k < end; ++k) qr[k] = f32_to_e4m3(xr[k] / s);
    }
  }
}

void CpuBackend::linear_fp8_w8a8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out) {
  int64_t T = q.size(0), K = w.in_features(), N = w.out_features(), bk = w.block_k, bn = w.block_n;
  int64_t G = (K + bk - 1) / bk;
  check_fp8(q, {T, K}, "linear_fp8_w8a8 q");
  check_f32(scales, {T, G}, "linear_fp8_w8a8 scales");
  check_f32(out, {T, N}, "linear_fp8_w8a8 out");
  MLA_CHECK(w.is_fp8_block() && w.weight.dtype() == DType::F8_E4M3 && w.weight.stride(1) == 1,
            "linear_fp8_w8a8: weight {} is not an FP8 block-scaled matrix with contiguous rows", w.weight.describe());
  check_f32(w.scale_inv, {(N + bn - 1) / bn, G}, "linear_fp8_w8a8 weight scale_inv");
  const std::array<float, 256>& value = e4m3_values();
  // The activations' e4m3 values, decoded once (their scales stay apart, per group).
  std::vector<float> a(static_cast<size_t>(T * K));
  for (int64_t t = 0; t < T; ++t) {
    const uint8_t* qr = q.data<uint8_t>() + t * q.stride(0);
    for (int64_t k = 0; k < K; ++k) a[size_t(t * K + k)] = value[qr[k]];
  }
#pragma omp parallel if (worth_threads(T * N * K))
  {
    std::vector<float> wrow(static_cast<size_t>(K));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const uint8_t* wq = w.weight.data<uint8_t>() + n * w.weight.stride(0);
      for (int64_t k = 0; k < K; ++k) wrow[size_t(k)] = value[wq[k]];
      const float* wscale = row_ptr(w.scale_inv, n / bn);
      for (int64_t t = 0; t < T; ++t) {
        const float* ar = a.data() + t * K;
        const float* ascale = row_ptr(scales, t);
        float acc = 0;
        for (int64_t g = 0; g < G; ++g) {
          int64_t begin = g * bk, end = std::min(K, begin + bk);
          float block = 0;
#pragma omp simd reduction(+ : block)
          for (int64_t k = begin; k < end; ++k) block += ar[k] * wrow[size_t(k)];
          acc += block * (ascale[g] * wscale[g]);
        }
        row_ptr(out, t)[n] = acc;
      }
    }
  }
}

namespace {

// Head h of a [T, H, D] activation as a [T, D] matrix (a view).
Tensor head(const Tensor& t, int64_t h) {
  return t.narrow(1, h, 1).as_strided({t.size(0), t.size(2)}, {t.stride(0), t.stride(2)});
}

void check_head_rows(const LinearWeight& w, int64_t H, int64_t K, const char* what) {
  MLA_CHECK(w.is_fp8_block() && w.weight.ndim() == 2 && H > 0 && w.out_features() % H == 0 &&
                w.in_features() == K && (w.out_features() / H) % w.block_n == 0,
            "{}: expected an FP8 block-scaled [{} heads x rows, {}] weight whose blocks of rows fall within a "
            "head, got {} in blocks of {}x{}",
            what, H, K, w.weight.describe(), w.block_n, w.block_k);
}

}  // namespace

// One W8A8 linear a head: exactly the FP8 linear's math, which the CUDA BMM must match.
void CpuBackend::mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                                  Tensor& q_latent) {
  MLA_CHECK(q_nope.ndim() == 3 && q_pe.ndim() == 3, "mla_absorb_q_w8a8: q_nope and q_pe must be 3-D");
  const int64_t T = q_nope.size(0), H = q_nope.size(1), nope = q_nope.size(2), R = q_pe.size(2);
  check_head_rows(w_uk_t, H, nope, "mla_absorb_q_w8a8 w_uk_t");
  const int64_t L = w_uk_t.out_features() / H;
  check_f32(q_nope, {T, H, nope}, "mla_absorb_q_w8a8 q_nope");
  check_f32(q_pe, {T, H, R}, "mla_absorb_q_w8a8 q_pe");
  check_f32(q_latent, {T, H, L + R}, "mla_absorb_q_w8a8 q_latent");
  for (int64_t h = 0; h < H; ++h) {
    Tensor out = head(q_latent, h).narrow(1, 0, L);
    linear_w8a8(head(q_nope, h), row_range(w_uk_t, h * L, L), out);
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) std::copy_n(row_ptr(q_pe, t, h), R, row_ptr(q_latent, t, h) + L);
}

void CpuBackend::mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out) {
  MLA_CHECK(latent.ndim() == 3, "mla_absorb_out_w8a8: latent must be 3-D");
  const int64_t T = latent.size(0), H = latent.size(1), L = latent.size(2);
  check_head_rows(w_uv, H, L, "mla_absorb_out_w8a8 w_uv");
  const int64_t V = w_uv.out_features() / H;
  check_f32(latent, {T, H, L}, "mla_absorb_out_w8a8 latent");
  check_f32(out, {T, H, V}, "mla_absorb_out_w8a8 out");
  for (int64_t h = 0; h < H; ++h) {
    Tensor o = head(out, h);
    linear_w8a8(head(latent, h), row_range(w_uv, h * V, V), o);
  }
}

}  // namespace mlaserve::cpu
