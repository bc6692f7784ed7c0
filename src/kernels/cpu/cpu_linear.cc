// Linear layers and the absorbed-MLA batched products on the CPU.
#include <vector>

#include "common/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace mlaserve::cpu {

void CpuBackend::linear(const Tensor& x, const LinearWeight& w, Tensor& out) {
  int64_t T = x.size(0), K = w.in_features(), N = w.out_features();
  check_f32(x, {T, K}, "linear x");
  check_f32(out, {T, N}, "linear out");
  MLA_CHECK(w.weight.stride(1) == 1, "linear: weight rows must be contiguous");
  if (w.weight.dtype() == DType::F8_E4M3)
    MLA_CHECK(w.is_fp8_block(), "linear: F8_E4M3 weight {} has no block scales", w.weight.describe());
  bool direct = w.weight.dtype() == DType::F32;
#pragma omp parallel if (worth_threads(T * N * K))
  {
    // Each thread turns one weight row at a time into fp32 and uses it for every token.
    std::vector<float> wrow(direct ? 0 : size_t(K));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* wr;
      if (direct) {
        wr = w.weight.data<float>() + n * w.weight.stride(0);
      } else if (w.is_fp8_block()) {
        for (int64_t k = 0; k < K; ++k) wrow[k] = dequant_fp8_block(w, n, k);
        wr = wrow.data();
      } else {
        load_row_f32(w.weight, n, wrow.data());
        wr = wrow.data();
      }
      for (int64_t t = 0; t < T; ++t) {
        const float* xr = row_ptr(x, t);
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t k = 0; k < K; ++k) acc += xr[k] * wr[k];
        row_ptr(out, t)[n] = acc;
      }
    }
  }
}

void CpuBackend::mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) {
  int64_t T = q_nope.size(0), H = q_nope.size(1), nope = q_nope.size(2), R = q_pe.size(2), L = w_uk.size(2);
  check_f32(q_nope, {T, H, nope}, "mla_absorb_q q_nope");
  check_f32(q_pe, {T, H, R}, "mla_absorb_q q_pe");
  check_f32(w_uk, {H, nope, L}, "mla_absorb_q w_uk");
  check_f32(q_latent, {T, H, L + R}, "mla_absorb_q q_latent");
  MLA_CHECK(w_uk.is_contiguous(), "mla_absorb_q: w_uk must be contiguous");
#pragma omp parallel for collapse(2) if (worth_threads(T * H * nope * L))
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* qn = row_ptr(q_nope, t, h);
      float* o = row_ptr(q_latent, t, h);
      const float* w = w_uk.data<float>() + h * nope * L;
      for (int64_t c = 0; c < L; ++c) o[c] = 0;
      for (int64_t j = 0; j < nope; ++j) {
        float a = qn[j];
        const float* wj = w + j * L;
        for (int64_t c = 0; c < L; ++c) o[c] += a * wj[c];
      }
      const float* qp = row_ptr(q_pe, t, h);
      for (int64_t r = 0; r < R; ++r) o[L + r] = qp[r];
    }
  }
}

void CpuBackend::mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) {
  int64_t T = latent.size(0), H = latent.size(1), L = latent.size(2), V = w_uv.size(1);
  check_f32(latent, {T, H, L}, "mla_absorb_out latent");
  check_f32(w_uv, {H, V, L}, "mla_absorb_out w_uv");
  check_f32(out, {T, H, V}, "mla_absorb_out out");
  MLA_CHECK(w_uv.is_contiguous(), "mla_absorb_out: w_uv must be contiguous");
#pragma omp parallel for collapse(2) if (worth_threads(T * H * V * L))
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < H; ++h) {
      const float* x = row_ptr(latent, t, h);
      float* o = row_ptr(out, t, h);
      for (int64_t d = 0; d < V; ++d) {
        const float* w = w_uv.data<float>() + (h * V + d) * L;
        float acc = 0;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < L; ++c) acc += w[c] * x[c];
        o[d] = acc;
      }
    }
  }
}

}  // namespace mlaserve::cpu
