#include "kernels/cpu/cpu_backend.h"

#include <cmath>

#include "common/error.h"

namespace mlaserve {

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<cpu::CpuBackend>(); }

namespace cpu {

void check_f32(const Tensor& t, const Shape& shape, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CPU && t.dtype() == DType::F32,
            "{}: expected a host F32 tensor, got {}", what, t.defined() ? t.describe() : "nothing");
  MLA_CHECK(t.shape() == shape, "{}: expected shape {}, got {}", what, shape_str(shape), shape_str(t.shape()));
  MLA_CHECK(t.ndim() == 0 || t.stride(-1) == 1, "{}: last dim must be contiguous", what);
}

void check_i32(const Tensor& t, int64_t n, const char* what) {
  MLA_CHECK(t.defined() && t.dtype() == DType::I32 && t.ndim() == 1 && t.size(0) == n && t.is_contiguous(),
            "{}: expected I32[{}], got {}", what, n, t.defined() ? t.describe() : "nothing");
}

void load_cache_row(const Tensor& cache, float kv_scale, int64_t slot, float* out) {
  load_row_f32(cache, slot, out);
  if (kv_scale == 1.0f) return;
  for (int64_t i = 0; i < cache.size(1); ++i) out[i] *= kv_scale;
}

void load_row_f32(const Tensor& t, int64_t r, float* out) {
  int64_t n = t.size(-1);
  const char* base = static_cast<const char*>(t.raw()) + r * t.stride(0) * int64_t(dtype_size(t.dtype()));
  if (t.dtype() == DType::F32) {
    const float* src = reinterpret_cast<const float*>(base);
    for (int64_t i = 0; i < n; ++i) out[i] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = load_as_f32(base, t.dtype(), size_t(i));
  }
}

void CpuBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  int64_t T = ids.numel(), V = table.size(0), H = table.size(1);
  check_i32(ids, T, "embedding ids");
  check_f32(out, {T, H}, "embedding out");
  const int32_t* id = ids.data<int32_t>();
  for (int64_t t = 0; t < T; ++t) {
    MLA_CHECK(id[t] >= 0 && id[t] < V, "token id {} is outside the vocabulary ({})", id[t], V);
    load_row_f32(table, id[t], row_ptr(out, t));
  }
}

static void rmsnorm_row(const float* x, const float* w, float eps, int64_t d, float* out) {
  double sum = 0;
  for (int64_t i = 0; i < d; ++i) sum += double(x[i]) * x[i];
  float inv = 1.0f / std::sqrt(float(sum / double(d)) + eps);
  for (int64_t i = 0; i < d; ++i) out[i] = w[i] * (x[i] * inv);
}

void CpuBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  int64_t T = x.size(0), D = x.size(1);
  check_f32(x, {T, D}, "rmsnorm x");
  check_f32(out, {T, D}, "rmsnorm out");
  Tensor wf = w.to_f32();
  MLA_CHECK(wf.numel() == D, "rmsnorm weight has {} values for rows of {}", wf.numel(), D);
#pragma omp parallel for if (worth_threads(T * D))
  for (int64_t t = 0; t < T; ++t) rmsnorm_row(row_ptr(x, t), wf.data<float>(), eps, D, row_ptr(out, t));
}

void CpuBackend::add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) {
  int64_t T = x.size(0), D = x.size(1);
  check_f32(residual, {T, D}, "add_rmsnorm residual");
  add(residual, x);
  rmsnorm(residual, w, eps, out);
}

void CpuBackend::silu_and_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  int64_t T = gate.size(0), I = gate.size(1);
  check_f32(gate, {T, I}, "silu_and_mul gate");
  check_f32(up, {T, I}, "silu_and_mul up");
  check_f32(out, {T, I}, "silu_and_mul out");
#pragma omp parallel for if (worth_threads(T * I * 8))
  for (int64_t t = 0; t < T; ++t) {
    const float *g = row_ptr(gate, t), *u = row_ptr(up, t);
    float* o = row_ptr(out, t);
    for (int64_t i = 0; i < I; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void CpuBackend::add(Tensor& x, const Tensor& y) {
  int64_t T = x.size(0), D = x.size(1);
  check_f32(x, {T, D}, "add x");
  check_f32(y, {T, D}, "add y");
  for (int64_t t = 0; t < T; ++t) {
    float* a = row_ptr(x, t);
    const float* b = row_ptr(y, t);
    for (int64_t i = 0; i < D; ++i) a[i] += b[i];
  }
}

void CpuBackend::rope(Tensor& x, const Tensor& positions, const RopeTable& table) {
  MLA_CHECK(x.ndim() == 3 && x.dtype() == DType::F32 && x.stride(2) == 1, "rope: x must be F32 [T, heads, dim], got {}",
            x.describe());
  int64_t T = x.size(0), heads = x.size(1), half = x.size(2) / 2;
  check_i32(positions, T, "rope positions");
  MLA_CHECK(table.inv_freq.numel() == half, "rope: table has {} frequencies for a rotary dim of {}",
            table.inv_freq.numel(), x.size(2));
  const float* inv_freq = table.inv_freq.data<float>();
  const int32_t* pos = positions.data<int32_t>();
#pragma omp parallel for if (worth_threads(T * heads * half * 8))
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      float angle = float(pos[t]) * inv_freq[i];  // fp32 product, as the reference computes it
      float c = std::cos(angle) * table.mscale, s = std::sin(angle) * table.mscale;
      for (int64_t h = 0; h < heads; ++h) {
        float* p = row_ptr(x, t, h) + 2 * i;
        float a = p[0], b = p[1];
        p[0] = a * c - b * s;
        p[1] = b * c + a * s;
      }
    }
  }
}

void CpuBackend::kv_store(const Tensor& latent, const Tensor& slots, Tensor& cache, float kv_scale) {
  int64_t T = latent.size(0), D = latent.size(1), N = cache.size(0);
  check_f32(latent, {T, D}, "kv_store latent");
  check_i32(slots, T, "kv_store slots");
  MLA_CHECK(cache.ndim() == 2 && cache.size(1) == D && cache.is_contiguous(), "kv_store: cache {} for latents of {}",
            cache.describe(), D);
  MLA_CHECK(kv_scale > 0 && std::isfinite(kv_scale), "kv_store: KV cache scale {} must be positive", kv_scale);
  for (int64_t t = 0; t < T; ++t) {
    int32_t s = slots.data<int32_t>()[t];
    MLA_CHECK(s >= 0 && s < N, "kv_store: slot {} outside the pool of {}", s, N);
    const float* src = row_ptr(latent, t);
    for (int64_t i = 0; i < D; ++i) store_from_f32(cache.raw(), cache.dtype(), size_t(s * D + i), src[i] / kv_scale);
  }
}

void CpuBackend::kv_gather(const Tensor& cache, float kv_scale, const Tensor& indices, Tensor& out) {
  int64_t S = indices.numel(), D = cache.size(1), N = cache.size(0);
  check_i32(indices, S, "kv_gather indices");
  check_f32(out, {S, D}, "kv_gather out");
  for (int64_t i = 0; i < S; ++i) {
    int32_t s = indices.data<int32_t>()[i];
    MLA_CHECK(s >= 0 && s < N, "kv_gather: slot {} outside the pool of {}", s, N);
    load_cache_row(cache, kv_scale, s, row_ptr(out, i));
  }
}

}  // namespace cpu
}  // namespace mlaserve
