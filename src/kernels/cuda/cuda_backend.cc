#include "kernels/cuda/cuda_backend.h"

#include <cuda_bf16.h>

#include "kernels/cuda/alignment.h"
#include "kernels/cuda/device_allocator.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/gemm_runner.h"
#include "kernels/cuda/skinny_gemm.h"
#include "kernels/cuda/tensor_checks.h"

namespace mlaserve {
namespace cuda {

namespace {

void check_dev(const Tensor& t, DType dtype, int ndim, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == dtype && t.ndim() == ndim &&
                t.stride(-1) == 1,
            "{}: expected a device {} tensor of {} dims with a contiguous last dim, got {}", what, dtype_name(dtype),
            ndim, t.defined() ? t.describe() : "nothing");
}

// A KV cache is BF16 (no scale) or FP8 e4m3 holding latent / kv_scale; true for FP8.
bool check_kv_cache(const Tensor& cache, float kv_scale, const char* what) {
  const bool fp8 = check_kv_scale(cache.defined() ? cache.dtype() : DType::BF16, kv_scale, what);
  check_dev(cache, fp8 ? DType::F8_E4M3 : DType::BF16, 2, what);
  return fp8;
}

void check_weight(const Tensor& t, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && (t.dtype() == DType::BF16 || t.dtype() == DType::F32),
            "{}: expected a device BF16 or F32 tensor, got {}", what, t.defined() ? t.describe() : "nothing");
}

}  // namespace

CudaBackend::CudaBackend(int device) : device_(device) {
  CUDA_CHECK(cudaSetDevice(device));
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  gemm_ = std::make_unique<GemmRunner>();
  allocator_ = std::make_shared<DeviceAllocator>();
  CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
  MLA_CHECK(2 * num_sms_ <= kSkinnyCounters, "{} SMs: more split-K row blocks than counters", num_sms_);
  CUDA_CHECK(cudaMalloc(&skinny_counters_, size_t(kSkinnyCounters) * sizeof(int)));
  CUDA_CHECK(cudaMemset(skinny_counters_, 0, size_t(kSkinnyCounters) * sizeof(int)));
}

CudaBackend::~CudaBackend() {
  gemm_.reset();
  if (staging_) {
    cudaEventSynchronize(staging_free_);
    cudaFreeHost(staging_);
  }
  cudaEventDestroy(staging_free_);
  cudaFree(skinny_counters_);
  if (stream_) cudaStreamDestroy(stream_);
}

std::string CudaBackend::device_name() const {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  return prop.name;
}

Tensor CudaBackend::empty(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::shared_ptr<void> block = allocator_->allocate(size_t(n) * dtype_size(dtype));
  void* p = block.get();
  return Tensor::wrap(p, dtype, std::move(shape), std::move(block), Device::CUDA);
}

void CudaBackend::synchronize() { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

bool CudaBackend::memory_info(uint64_t& free, uint64_t& total) {
  size_t f = 0, t = 0;
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  free = uint64_t(f) + uint64_t(allocator_->cached_bytes());
  total = uint64_t(t);
  return true;
}

Tensor CudaBackend::to_device(const Tensor& host) {
  Tensor src = host.contiguous();
  Tensor d = empty(src.dtype(), src.shape());
  CUDA_CHECK(cudaMemcpyAsync(d.raw(), src.raw(), src.nbytes(), cudaMemcpyHostToDevice, stream_));
  synchronize();  // the host tensor may be a temporary
  return d;
}

Tensor CudaBackend::to_backend(const Tensor& host) {
  if (host.device() == Device::CUDA) return host;
  bool keep = !is_float(host.dtype()) || (host.ndim() <= 1 && host.dtype() != DType::F8_E4M3);
  if (keep) return to_device(host);
  // Float matrices become BF16, the activation type the kernels read.
  Tensor f = host.to_f32();
  Tensor b = Tensor::empty(DType::BF16, f.shape());
  const float* src = f.data<float>();
  uint16_t* dst = b.data<uint16_t>();
  int64_t n = f.numel();
#pragma omp parallel for if (n >= (int64_t(1) << 20))
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
  return to_device(b);
}

Tensor CudaBackend::to_host(const Tensor& dev) {
  if (dev.device() == Device::CPU) return dev;
  // Contiguous, or rows apart (a column view such as FP8 weight scales in padded rows).
  const bool rows = dev.ndim() == 2 && dev.stride(1) == 1 && dev.stride(0) >= dev.size(1);
  MLA_CHECK(dev.is_contiguous() || rows, "to_host: {} is neither contiguous nor a view of rows", dev.describe());
  Tensor h = Tensor::empty(dev.dtype(), dev.shape());
  if (dev.is_contiguous()) {
    CUDA_CHECK(cudaMemcpyAsync(h.raw(), dev.raw(), dev.nbytes(), cudaMemcpyDeviceToHost, stream_));
  } else {
    const size_t elem = dtype_size(dev.dtype()), width = size_t(dev.size(1)) * elem;
    CUDA_CHECK(cudaMemcpy2DAsync(h.raw(), width, dev.raw(), size_t(dev.stride(0)) * elem, width, size_t(dev.size(0)),
                                 cudaMemcpyDeviceToHost, stream_));
  }
  synchronize();
  return h;
}

void CudaBackend::embedding(const Tensor& ids, const Tensor& table, Tensor& out) {
  check_dev(ids, DType::I32, 1, "embedding ids");
  check_weight(table, "embedding table");
  check_dev(out, DType::BF16, 2, "embedding out");
  MLA_CHECK(out.size(0) == ids.size(0) && out.size(1) == table.size(1), "embedding: out {} for {} ids of {}",
            out.describe(), ids.size(0), table.describe());
  launch_embedding(ids.data<int32_t>(), ids.size(0), table.raw(), table.dtype() == DType::F32, table.stride(0),
                   table.size(1), out.raw(), out.stride(0), stream_);
}

void CudaBackend::rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) {
  check_dev(x, DType::BF16, 2, "rmsnorm x");
  check_dev(out, DType::BF16, 2, "rmsnorm out");
  check_weight(w, "rmsnorm weight");
  MLA_CHECK(out.shape() == x.shape() && w.numel() == x.size(1), "rmsnorm: x {}, w {}, out {}", x.describe(),
            w.describe(), out.describe());
  launch_rmsnorm(x.raw(), x.stride(0), nullptr, 0, w.raw(), w.dtype() == DType::F32, eps, x.size(0), x.size(1),
                 out.raw(), out.stride(0), stream_);
}

void CudaBackend::add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) {
  check_dev(x, DType::BF16, 2, "add_rmsnorm x");
  check_dev(residual, DType::BF16, 2, "add_rmsnorm residual");
  check_dev(out, DType::BF16, 2, "add_rmsnorm out");
  check_weight(w, "add_rmsnorm weight");
  MLA_CHECK(out.shape() == x.shape() && residual.shape() == x.shape() && w.numel() == x.size(1),
            "add_rmsnorm: x {}, residual {}, w {}, out {}", x.describe(), residual.describe(), w.describe(),
            out.describe());
  launch_rmsnorm(x.raw(), x.stride(0), residual.raw(), residual.stride(0), w.raw(), w.dtype() == DType::F32, eps,
                 x.size(0), x.size(1), out.raw(), out.stride(0), stream_);
}

void CudaBackend::linear(const Tensor& x, const LinearWeight& w, Tensor& out) {
  check_dev(x, DType::BF16, 2, "linear x");
  MLA_CHECK(out.defined() && out.device() == Device::CUDA &&
                (out.dtype() == DType::BF16 || out.dtype() == DType::F32) && out.ndim() == 2 && out.stride(1) == 1,
            "linear out: expected a device BF16 or F32 matrix, got {}", out.defined() ? out.describe() : "nothing");
  if (w.is_fp8_block()) {  // W8A8, as the model's layers run it
    linear_w8a8(x, w, out);
    return;
  }
  check_dev(w.weight, DType::BF16, 2, "linear weight");
  int64_t T = x.size(0), K = x.size(1), N = w.out_features();
  MLA_CHECK(w.in_features() == K && out.size(0) == T && out.size(1) == N, "linear: x {} · W {} -> out {}",
            x.describe(), w.weight.describe(), out.describe());
  if (T == 0) return;
  bool out_f32 = out.dtype() == DType::F32;
  if (skinny_gemm_fits(x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), T, K)) {
    SkinnySplit split;
    split.splits = skinny_gemm_splits(N, K, num_sms_);
    Tensor partials;  // lives until the launch is queued: the allocator reuses blocks in stream order
    if (split.splits > 1) {
      partials = empty(DType::F32, {int64_t(skinny_gemm_partial_floats(N, split.splits))});
      split.partials = partials.data<float>();
      split.counters = skinny_counters_;
    }
    launch_skinny_gemm(x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), out.raw(), out.stride(0), out_f32, T,
                       N, K, split, stream_);
  } else {
    gemm_->bf16_nt(x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), out.raw(), out.stride(0), out_f32, T, N,
                   K, stream_);
  }
}

void CudaBackend::rmsnorm_linear(const Tensor& x, Tensor* residual, const Tensor& norm, float eps, Tensor* normed,
                                 const LinearWeight& w, Tensor& out) {
  auto rows_ok = [&](const Tensor& t) {
    return t.defined() && t.device() == Device::CUDA && t.dtype() == DType::BF16 && t.ndim() == 2 &&
           t.shape() == x.shape() && t.stride(1) == 1 && t.stride(0) % 8 == 0 && aligned16(t.raw());
  };
  const int64_t T = x.size(0), K = x.size(1), N = w.out_features();
  const bool fold = fold_norm_into_linear && !w.is_fp8_block() && w.weight.defined() &&
                    w.weight.dtype() == DType::BF16 && w.in_features() == K && rows_ok(x) &&
                    (!residual || rows_ok(*residual)) && norm.defined() &&
                    norm.device() == Device::CUDA && norm.dtype() == DType::BF16 && norm.numel() == K &&
                    aligned16(norm.raw()) && out.defined() && out.device() == Device::CUDA && out.ndim() == 2 &&
                    (out.dtype() == DType::BF16 || out.dtype() == DType::F32) && out.stride(1) == 1 &&
                    out.size(0) == T && out.size(1) == N &&
                    skinny_gemm_fits(x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), T, K) &&
                    skinny_norm_fits(T, N, K, num_sms_);
  // Other CTAs still read x and the residual while one writes its share of the normalized rows.
  const bool normed_ok = !normed || (rows_ok(*normed) && normed->raw() != x.raw() &&
                                     (!residual || normed->raw() != residual->raw()));
  if (!fold || !normed_ok) {
    Backend::rmsnorm_linear(x, residual, norm, eps, normed, w, out);
    return;
  }
  SkinnyNorm n;
  n.weight = static_cast<const __nv_bfloat16*>(norm.raw()), n.eps = eps;
  Tensor sum;
  if (residual) {
    // Every CTA reads all of the old residual: the sum goes to a new buffer, which the stream is
    // rebound to.
    sum = empty(DType::BF16, {T, K});
    n.residual = static_cast<const __nv_bfloat16*>(residual->raw());
    n.residual_out = static_cast<__nv_bfloat16*>(sum.raw());
  }
  if (normed) n.normed = static_cast<__nv_bfloat16*>(normed->raw());
  launch_skinny_gemm(x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), out.raw(), out.stride(0),
                     out.dtype() == DType::F32, T, N, K, SkinnySplit{}, stream_, &n);
  if (residual) *residual = sum;
}

void CudaBackend::silu_and_mul(const Tensor& gate, const Tensor& up, Tensor& out) {
  check_dev(gate, DType::BF16, 2, "silu_and_mul gate");
  check_dev(up, DType::BF16, 2, "silu_and_mul up");
  check_dev(out, DType::BF16, 2, "silu_and_mul out");
  MLA_CHECK(up.shape() == gate.shape() && out.shape() == gate.shape(), "silu_and_mul: shapes differ");
  launch_silu_and_mul(gate.raw(), gate.stride(0), up.raw(), up.stride(0), out.raw(), out.stride(0), gate.size(0),
                      gate.size(1), stream_);
}

void CudaBackend::add(Tensor& x, const Tensor& y) {
  check_dev(x, DType::BF16, 2, "add x");
  check_dev(y, DType::BF16, 2, "add y");
  MLA_CHECK(x.shape() == y.shape(), "add: {} + {}", x.describe(), y.describe());
  launch_add(x.raw(), x.stride(0), y.raw(), y.stride(0), x.size(0), x.size(1), stream_);
}

void CudaBackend::rope(Tensor& x, const Tensor& positions, const RopeTable& table) {
  check_dev(x, DType::BF16, 3, "rope x");
  check_dev(positions, DType::I32, 1, "rope positions");
  MLA_CHECK(table.inv_freq.device() == Device::CUDA && table.inv_freq.numel() * 2 == x.size(2),
            "rope: the table must be on the device with {} frequencies", x.size(2) / 2);
  launch_rope(x.raw(), x.stride(0), x.stride(1), x.size(0), x.size(1), x.size(2) / 2, positions.data<int32_t>(),
              table.inv_freq.data<float>(), table.mscale, stream_);
}

void CudaBackend::kv_store(const Tensor& latent, const Tensor& slots, Tensor& cache, float kv_scale) {
  check_dev(latent, DType::BF16, 2, "kv_store latent");
  check_dev(slots, DType::I32, 1, "kv_store slots");
  const bool fp8 = check_kv_cache(cache, kv_scale, "kv_store cache");
  MLA_CHECK(cache.size(1) == latent.size(1) && cache.is_contiguous() && slots.size(0) == latent.size(0),
            "kv_store: latent {} into cache {}", latent.describe(), cache.describe());
  if (fp8)
    launch_kv_store_fp8(latent.raw(), latent.stride(0), slots.data<int32_t>(), latent.size(0), latent.size(1), kv_scale,
                        cache.raw(), stream_);
  else
    launch_kv_store(latent.raw(), latent.stride(0), slots.data<int32_t>(), latent.size(0), latent.size(1), cache.raw(),
                    stream_);
}

void CudaBackend::mla_norm_rope_store(Tensor& latent, Tensor& q_pe, const Tensor& norm, float eps,
                                      const Tensor& positions, const RopeTable& rope, const Tensor& slots,
                                      Tensor& cache, float kv_scale) {
  check_dev(latent, DType::BF16, 2, "mla_norm_rope_store latent");
  check_dev(q_pe, DType::BF16, 3, "mla_norm_rope_store q_pe");
  int64_t T = latent.size(0), R = q_pe.size(2), L = latent.size(1) - R;
  MlaNormRopeStoreParams p{};
  p.latent = latent.raw();
  p.latent_ld = latent.stride(0);
  p.q_pe = q_pe.raw();
  p.q_st0 = q_pe.stride(0);
  p.q_st1 = q_pe.stride(1);
  p.positions = positions.defined() ? positions.data<int32_t>() : nullptr;
  p.slots = slots.defined() ? slots.data<int32_t>() : nullptr;
  p.inv_freq = rope.inv_freq.defined() ? rope.inv_freq.data<float>() : nullptr;
  p.cache = cache.raw();
  p.cache_fp8 = cache.defined() && cache.dtype() == DType::F8_E4M3;
  p.kv_scale = kv_scale;
  p.num_tokens = int(T), p.heads = int(q_pe.size(1)), p.kv_lora = int(L), p.rope = int(R);
  p.eps = eps, p.mscale = rope.mscale;
  // The fused kernel takes the usual cases (a BF16 cache without scale or an FP8 one, aligned rows,
  // a BF16 or F32 norm weight); anything else runs the separate ops, which check and explain their
  // inputs.
  bool fused = (p.cache_fp8 || kv_scale == 1.0f) && L > 0 && q_pe.size(0) == T && q_pe.stride(2) == 1 &&
               latent.stride(1) == 1 && cache.defined() && cache.device() == Device::CUDA &&
               (cache.dtype() == DType::BF16 || p.cache_fp8) && cache.is_contiguous() && cache.ndim() == 2 &&
               cache.size(1) == L + R && norm.defined() && norm.device() == Device::CUDA &&
               (norm.dtype() == DType::BF16 || norm.dtype() == DType::F32) && norm.numel() == L &&
               norm.is_contiguous() && positions.defined() && positions.device() == Device::CUDA &&
               positions.dtype() == DType::I32 && positions.numel() == T && positions.is_contiguous() &&
               slots.defined() && slots.device() == Device::CUDA && slots.dtype() == DType::I32 && slots.numel() == T &&
               slots.is_contiguous() && rope.inv_freq.defined() && rope.inv_freq.device() == Device::CUDA &&
               rope.inv_freq.numel() * 2 == R && mla_norm_rope_store_fits(p);
  if (!fused) {
    Backend::mla_norm_rope_store(latent, q_pe, norm, eps, positions, rope, slots, cache, kv_scale);
    return;
  }
  launch_mla_norm_rope_store(p, norm.raw(), norm.dtype() == DType::F32, stream_);
}

void CudaBackend::kv_gather(const Tensor& cache, float kv_scale, const Tensor& indices, Tensor& out) {
  const bool fp8 = check_kv_cache(cache, kv_scale, "kv_gather cache");
  check_dev(indices, DType::I32, 1, "kv_gather indices");
  check_dev(out, DType::BF16, 2, "kv_gather out");
  MLA_CHECK(cache.is_contiguous() && out.size(0) == indices.size(0) && out.size(1) == cache.size(1),
            "kv_gather: cache {} -> out {}", cache.describe(), out.describe());
  if (fp8)
    launch_kv_gather_fp8(cache.raw(), kv_scale, indices.data<int32_t>(), indices.size(0), cache.size(1), out.raw(),
                         out.stride(0), stream_);
  else
    launch_kv_gather(cache.raw(), indices.data<int32_t>(), indices.size(0), cache.size(1), out.raw(), out.stride(0),
                     stream_);
}

}  // namespace cuda

}  // namespace mlaserve
