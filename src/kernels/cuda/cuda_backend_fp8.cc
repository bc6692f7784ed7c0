// CudaBackend's FP8 W8A8 linear: per-token-group activation quantization (fp8_quant.cu, or fused
// into the rmsnorm / silu_and_mul that makes the activation, elementwise.cu) and the block-scaled
// GEMM of GemmRunner (cuBLASLt), or for decode's few tokens the skinny FP8 kernel
// (skinny_gemm_fp8.cu), as the tuned table says; FP8 weights kept as e4m3 plus their block scales.
#include <cuda_runtime.h>

#include <algorithm>
#include <optional>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/fp8_gemm_wgmma.h"
#include "kernels/cuda/fp8_quant.h"
#include "kernels/cuda/gemm_runner.h"
#include "kernels/cuda/tensor_checks.h"

namespace mlaserve::cuda {

namespace {

// cuBLASLt's block-scaled GEMM takes 128 x 128 blocks. A ragged last block of rows (kv_a's 576, q_a
// stacked over it) gets rows of zeros after it (see fp8_block_gemm); weights of other blocks, or
// of a ragged K, run dequantized to BF16.
bool gemm_takes(const LinearWeight& w) { return w.block_n == 128 && w.block_k == 128 && w.in_features() % 128 == 0; }

int64_t whole_rows(int64_t N) { return (N + 127) / 128 * 128; }

// Whether w's last block of rows is whole, or made whole by its pad.
bool rows_whole(const LinearWeight& w) { return w.out_features() + w.pad_rows == whole_rows(w.out_features()); }

}  // namespace

bool CudaBackend::quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k, LinearWeight& out) {
  MLA_CHECK(w.defined() && w.device() == Device::CUDA && w.dtype() == DType::BF16 && w.ndim() == 2 &&
                w.is_contiguous() && block_n > 0 && block_k > 0,
            "quantize_fp8_blocks: expected a contiguous device BF16 matrix and positive blocks, got {} in {}x{}",
            w.defined() ? w.describe() : "nothing", block_n, block_k);
  const int64_t N = w.size(0), K = w.size(1), gn = (N + block_n - 1) / block_n, gk = (K + block_k - 1) / block_k;
  // Scales in the padded rows to_backend gives host weights (so it keeps these as they are).
  const int64_t ld = fp8_scale_row_stride(gk);
  Tensor scales = empty(DType::F32, {gn, ld});
  CUDA_CHECK(cudaMemsetAsync(scales.raw(), 0, scales.nbytes(), stream_));
  out = LinearWeight{};
  out.weight = empty(DType::F8_E4M3, {N, K});
  launch_quantize_fp8_blocks(w.raw(), N, K, block_n, block_k, out.weight.raw(), scales.data<float>(), ld, stream_);
  out.scale_inv = scales.narrow(1, 0, gk);
  out.block_n = block_n, out.block_k = block_k;
  return true;
}

LinearWeight CudaBackend::to_backend(const LinearWeight& w) {
  LinearWeight out;
  if (!w.is_fp8_block()) {
    out.weight = to_backend(w.weight);
    return out;
  }
  if (w.weight.device() == Device::CUDA) {
    // Quantized here (quantize_fp8_blocks): as it is if the GEMM takes it, else through the host.
    if (gemm_takes(w) && rows_whole(w) && w.scale_inv.device() == Device::CUDA &&
        w.scale_inv.stride(0) == fp8_scale_row_stride(w.scale_inv.size(1)))
      return w;
    return to_backend(host_copy(w));
  }
  if (!gemm_takes(w)) {
    out.weight = to_backend(dequantize(w));
    return out;
  }
  // cuBLASLt reads the block scales in rows of a multiple of 4 (16 bytes): with K / 128 not a
  // multiple of 4 (K = 256, 640, 768, ...) contiguous rows gave wrong products. So the scales sit
  // in padded rows, and scale_inv is the [N / 128, K / 128] view of them.
  const Tensor scales = w.scale_inv.to_f32();
  const int64_t rows = scales.size(0), cols = scales.size(1), ld = fp8_scale_row_stride(cols);
  Tensor padded = Tensor::zeros(DType::F32, {rows, ld});
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(scales.data<float>() + r * scales.stride(0), cols, padded.data<float>() + r * ld);
  const int64_t N = w.out_features(), K = w.in_features(), rows_padded = whole_rows(N);
  if (rows_padded == N) {
    out.weight = to_device(w.weight);
  } else {
    Tensor host = Tensor::zeros(DType::F8_E4M3, {rows_padded, K}), src = w.weight.contiguous();
    std::copy_n(src.data<uint8_t>(), src.nbytes(), host.data<uint8_t>());
    out.weight = to_device(host).narrow(0, 0, N);
    out.pad_rows = rows_padded - N;
  }
  out.scale_inv = to_device(padded).narrow(1, 0, cols);
  out.block_n = w.block_n, out.block_k = w.block_k;
  return out;
}

namespace {

// cuBLASLt wants the tokens a multiple of 16 (it has no algorithm for T = 1) and the activation
// scales token-contiguous, [G, Tp].
int64_t padded_tokens(int64_t T) { return (T + 15) / 16 * 16; }

// Activation scales [T, G] as a device F32 view with any strides (empty_fp8_activation's are
// token-contiguous).
void check_scales(const Tensor& s, int64_t T, int64_t G, const char* what) {
  MLA_CHECK(s.defined() && s.device() == Device::CUDA && s.dtype() == DType::F32 && s.ndim() == 2 &&
                s.size(0) == T && s.size(1) == G,
            "{}: expected device F32 scales [{}, {}], got {}", what, T, G, s.defined() ? s.describe() : "nothing");
}

// Scales in empty_fp8_activation's layout: token-contiguous in columns of padded_tokens(T). That
// function also gives the codes padded_tokens(T) rows, which is what lets the GEMM read them as
// they are (no other maker of Fp8Activations lays scales out so).
bool in_gemm_layout(const Tensor& scales) {
  const int64_t T = scales.size(0);
  return scales.stride(0) == 1 && scales.stride(1) == padded_tokens(T) && T > 0;
}

// Where the fused producers write an Fp8Activation.
Fp8Output fp8_output(const Fp8Activation& a) {
  return {a.q.raw(), a.q.stride(0), a.scales.data<float>(), a.scales.stride(0), a.scales.stride(1)};
}

}  // namespace

void CudaBackend::quantize_fp8_per_token_group(const Tensor& x, int64_t group, Tensor& q, Tensor& scales) {
  int64_t T = x.defined() ? x.size(0) : 0, K = x.defined() && x.ndim() == 2 ? x.size(1) : 0;
  MLA_CHECK(group > 0, "quantize_fp8_per_token_group: group size {} must be positive", group);
  check_matrix(x, DType::BF16, T, K, "quantize_fp8 x");
  check_matrix(q, DType::F8_E4M3, T, K, "quantize_fp8 q");
  check_scales(scales, T, (K + group - 1) / group, "quantize_fp8 scales");
  launch_quantize_fp8_per_token_group(x.raw(), x.stride(0), T, K, group, q.raw(), q.stride(0), scales.data<float>(),
                                      scales.stride(0), scales.stride(1), stream_);
}

Fp8Activation CudaBackend::empty_fp8_activation(int64_t T, int64_t K, int64_t group) {
  if (group != 128 || K % 16 != 0 || T == 0) return Backend::empty_fp8_activation(T, K, group);
  const int64_t Tp = padded_tokens(T), G = (K + 127) / 128;
  Tensor q = empty(DType::F8_E4M3, {Tp, K}), scales = empty(DType::F32, {G, Tp});
  return {q.narrow(0, 0, T), scales.as_strided({T, G}, {1, Tp}), group};
}

void CudaBackend::rmsnorm_fp8(const Tensor& x, Tensor* residual, const Tensor& w, float eps, Tensor& out,
                              Fp8Activation& fp8) {
  const int64_t T = x.defined() ? x.size(0) : 0, D = x.defined() && x.ndim() == 2 ? x.size(1) : 0;
  check_matrix(x, DType::BF16, T, D, "rmsnorm_fp8 x");
  if (out.defined()) check_matrix(out, DType::BF16, T, D, "rmsnorm_fp8 out");
  if (residual) check_matrix(*residual, DType::BF16, T, D, "rmsnorm_fp8 residual");
  check_matrix(fp8.q, DType::F8_E4M3, T, D, "rmsnorm_fp8 q");
  check_scales(fp8.scales, T, (D + fp8.group - 1) / fp8.group, "rmsnorm_fp8 scales");
  MLA_CHECK(w.defined() && w.device() == Device::CUDA && (w.dtype() == DType::BF16 || w.dtype() == DType::F32) &&
                w.numel() == D,
            "rmsnorm_fp8: weight {} for rows of {}", w.defined() ? w.describe() : "nothing", D);
  const Fp8Output f = fp8_output(fp8);
  if (fp8.group == 128 && launch_rmsnorm(x.raw(), x.stride(0), residual ? residual->raw() : nullptr,
                                         residual ? residual->stride(0) : 0, w.raw(), w.dtype() == DType::F32, eps, T,
                                         D, out.defined() ? out.raw() : nullptr, out.defined() ? out.stride(0) : 0,
                                         stream_, &f))
    return;
  Backend::rmsnorm_fp8(x, residual, w, eps, out, fp8);
}

void CudaBackend::silu_and_mul_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Activation& fp8) {
  const int64_t T = gate.defined() ? gate.size(0) : 0, I = gate.defined() && gate.ndim() == 2 ? gate.size(1) : 0;
  check_matrix(gate, DType::BF16, T, I, "silu_and_mul_fp8 gate");
  check_matrix(up, DType::BF16, T, I, "silu_and_mul_fp8 up");
  if (out.defined()) check_matrix(out, DType::BF16, T, I, "silu_and_mul_fp8 out");
  check_matrix(fp8.q, DType::F8_E4M3, T, I, "silu_and_mul_fp8 q");
  check_scales(fp8.scales, T, (I + fp8.group - 1) / fp8.group, "silu_and_mul_fp8 scales");
  const Fp8Output f = fp8_output(fp8);
  if (fp8.group == 128 && launch_silu_and_mul(gate.raw(), gate.stride(0), up.raw(), up.stride(0),
                                              out.defined() ? out.raw() : nullptr, out.defined() ? out.stride(0) : 0,
                                              T, I, stream_, &f))
    return;
  Backend::silu_and_mul_fp8(gate, up, out, fp8);
}

void CudaBackend::linear_fp8_w8a8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out) {
  if (check_fp8_codes_linear(q, scales, w, out) == 0) return;
  // Few tokens: the skinny kernel reads the codes and scales where they are.
  const SkinnyFp8Problem few = skinny_problem_fp8(q, scales, w, out);
  if (std::optional<SkinnyFp8Pick> c = skinny_fp8_choice(few, false))
    launch_skinny_gemm_fp8(few, c->config, stream_);
  else
    fp8_codes_gemm(q, scales, w, out, std::nullopt);
}

void CudaBackend::linear_fp8_w8a8_cublaslt(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                                           const std::optional<CublasLtConfig>& lt) {
  if (check_fp8_codes_linear(q, scales, w, out) > 0) fp8_codes_gemm(q, scales, w, out, lt);
}

void CudaBackend::linear_fp8_w8a8_wgmma(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                                        int waves, int group_m, int cluster) {
  const int64_t T = check_fp8_codes_linear(q, scales, w, out), G = (w.in_features() + 127) / 128;
  if (T == 0) return;
  MLA_CHECK(in_gemm_layout(scales) && out.dtype() == DType::BF16,
            "linear_fp8_w8a8_wgmma: scales as empty_fp8_activation lays them out and a BF16 out");
  const int64_t Tp = padded_tokens(T);
  MLA_CHECK(fp8_wgmma_gemm(q.raw(), q.stride(0), scales.as_strided({G, Tp}, {Tp, 1}), w, out, waves, group_m, cluster),
            "linear_fp8_w8a8_wgmma: T={} N={} K={} waves={} cluster={} does not fit the kernel", T, w.out_features(),
            w.in_features(), waves, cluster);
}

std::vector<CublasLtConfig> CudaBackend::fp8_gemm_configs(int64_t T, const LinearWeight& w, bool out_f32,
                                                          const std::vector<CublasLtConfig>* among) {
  const int64_t Tp = padded_tokens(T), N = w.out_features(), K = w.in_features();
  Tensor scales_t = empty(DType::F32, {(K + 127) / 128, Tp});
  return gemm_->fp8_configs(scales_t.data<float>(), K, w.scale_inv.data<float>(), w.weight.stride(0), N, out_f32, Tp,
                            N, K, among);
}

void CudaBackend::fp8_codes_gemm(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                                 const std::optional<CublasLtConfig>& lt) {
  const int64_t T = q.size(0), K = w.in_features(), G = (K + 127) / 128;
  const int64_t Tp = padded_tokens(T);
  MLA_CHECK(q.stride(0) % 16 == 0, "linear_fp8_w8a8: the codes' rows must be 16-byte aligned");
  if (in_gemm_layout(scales)) {
    fp8_block_gemm(q.raw(), q.stride(0), scales.as_strided({G, Tp}, {Tp, 1}), w, out, lt);
    return;
  }
  MLA_CHECK(scales.is_contiguous(), "linear_fp8_w8a8: scales must be contiguous or as empty_fp8_activation lays them");
  Tensor scales_t = empty(DType::F32, {G, Tp});
  launch_transpose_scales(scales.data<float>(), scales.stride(0), T, G, scales_t.data<float>(), Tp, stream_);
  if (Tp == T) {
    fp8_block_gemm(q.raw(), q.stride(0), scales_t, w, out, lt);
    return;
  }
  // Rows T..Tp-1 stay unset: a GEMM's output row reads only its own input row and scale, and those
  // rows of the result are dropped.
  Tensor q_pad = empty(DType::F8_E4M3, {Tp, K});
  CUDA_CHECK(cudaMemcpy2DAsync(q_pad.raw(), K, q.raw(), q.stride(0), K, T, cudaMemcpyDeviceToDevice, stream_));
  fp8_block_gemm(q_pad.raw(), K, scales_t, w, out, lt);
}

void CudaBackend::linear_w8a8(const Tensor& x, const LinearWeight& w, Tensor& out) {
  const bool skinny_kind = x.defined() && x.ndim() == 2 && x.dtype() == DType::BF16 && w.is_fp8_block() &&
                           w.weight.defined();
  std::optional<SkinnyFp8Pick> c;
  if (skinny_kind) c = skinny_fp8_choice(skinny_problem(x, w, nullptr, w.out_features()), true);
  if (!c) {
    linear_w8a8_cublaslt(x, w, out);
  } else if (c->codes_in) {
    // Tuned so: the rows quantized once by their own launch, where each of the skinny launch's CTAs
    // would quantize all of them again (9-16 tokens on the long-K shapes).
    Fp8Activation codes = empty_fp8_activation(x.size(0), w.in_features(), 128);
    quantize_fp8_per_token_group(x, 128, codes.q, codes.scales);
    linear_fp8_w8a8_skinny(codes.q, codes.scales, w, out, c->config);
  } else {
    linear_w8a8_skinny(x, w, out, c->config);
  }
}

bool CudaBackend::wants_fp8_input(int64_t T, const LinearWeight& w) const {
  if (!w.is_fp8_block() || !w.weight.defined()) return true;
  // The skinny kernel takes BF16 rows, quantizing them as it reads them, unless the tuned launch
  // was faster from codes behind a producer writing them (Fp8GemmChoice::codes_in); cuBLASLt
  // takes codes (else a quantization launch). The problem's x is only looked at for its
  // alignment, which the producers' rows have.
  SkinnyFp8Problem p{w.weight.raw(), w.in_features(), w.weight.raw(), w.weight.stride(0), w.scale_inv.data<float>(),
                     w.scale_inv.stride(0), nullptr, 0, false, T, w.out_features(), w.in_features()};
  const std::optional<SkinnyFp8Pick> c = skinny_fp8_choice(p, false);
  return !c || c->codes_in;
}

SkinnyFp8Problem CudaBackend::skinny_problem_fp8(const Tensor& q, const Tensor& scales, const LinearWeight& w,
                                                 Tensor& out) {
  SkinnyFp8Problem p = skinny_problem(q, w, &out, w.out_features());
  p.x_scales = scales.data<float>(), p.xs_t = scales.stride(0), p.xs_g = scales.stride(1);
  return p;
}

void CudaBackend::linear_fp8_w8a8_skinny(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                                         const SkinnyFp8Config& c) {
  check_fp8_codes_linear(q, scales, w, out);
  launch_skinny_gemm_fp8(skinny_problem_fp8(q, scales, w, out), c, stream_);
}

SkinnyFp8Problem CudaBackend::skinny_problem(const Tensor& x, const LinearWeight& w, const Tensor* out, int64_t N) {
  SkinnyFp8Problem p{x.raw(), x.stride(0), w.weight.raw(), w.weight.stride(0), w.scale_inv.data<float>(),
                     w.scale_inv.stride(0), nullptr, 0, false, x.size(0), N, x.size(-1)};
  if (out) p.out = out->raw(), p.ldo = out->stride(0), p.out_f32 = out->dtype() == DType::F32;
  return p;
}

std::optional<CudaBackend::SkinnyFp8Pick> CudaBackend::skinny_fp8_choice(const SkinnyFp8Problem& p,
                                                                         bool from_rows) const {
  if (p.T > kSkinnyFp8MaxRows || !skinny_gemm_fp8_fits(p)) return std::nullopt;
  if (std::optional<Fp8GemmChoice> tuned =
          from_rows ? fp8_tuning_.find_from_rows(p.N, p.K, p.T) : fp8_tuning_.find(p.N, p.K, p.T)) {
    if (tuned->kernel != Fp8GemmChoice::Kernel::Skinny) return std::nullopt;
    SkinnyFp8Config c{tuned->row_tiles, tuned->splits, tuned->k_warps, tuned->depth};
    if (skinny_gemm_fp8_valid(c, p.K) && (c.depth == 0 || skinny_gemm_fp8_staged_fits(p.T, p.K, c)))
      return SkinnyFp8Pick{c, tuned->codes_in};
  }
  if (p.T > kSkinnyFp8DefaultMaxRows) return std::nullopt;
  return SkinnyFp8Pick{skinny_gemm_fp8_default(p.N, p.K, p.T, 1, num_sms_)};
}

void CudaBackend::linear_w8a8_skinny(const Tensor& x, const LinearWeight& w, Tensor& out, const SkinnyFp8Config& c) {
  const int64_t T = x.defined() ? x.size(0) : 0;
  check_fp8_linear(T, w, out);
  check_matrix(x, DType::BF16, T, w.in_features(), "linear_w8a8 x");
  launch_skinny_gemm_fp8(skinny_problem(x, w, &out, w.out_features()), c, stream_);
}

void CudaBackend::linear_w8a8_cublaslt(const Tensor& x, const LinearWeight& w, Tensor& out,
                                       const std::optional<CublasLtConfig>& lt) {
  int64_t T = x.defined() ? x.size(0) : 0, K = w.in_features(), G = (K + 127) / 128;
  check_fp8_linear(T, w, out);
  check_matrix(x, DType::BF16, T, K, "linear_w8a8 x");
  if (T == 0) return;
  // Quantized straight into the GEMM's padded layout; the padding rows stay unset (see above).
  const int64_t Tp = padded_tokens(T);
  Tensor q = empty(DType::F8_E4M3, {Tp, K}), scales_t = empty(DType::F32, {G, Tp});
  launch_quantize_fp8_per_token_group(x.raw(), x.stride(0), T, K, 128, q.raw(), K, scales_t.data<float>(), 1, Tp,
                                      stream_);
  fp8_block_gemm(q.raw(), K, scales_t, w, out, lt);
}

int64_t CudaBackend::check_fp8_codes_linear(const Tensor& q, const Tensor& scales, const LinearWeight& w,
                                            const Tensor& out) const {
  const int64_t T = q.defined() ? q.size(0) : 0;
  check_fp8_linear(T, w, out);
  check_matrix(q, DType::F8_E4M3, T, w.in_features(), "linear_fp8_w8a8 q");
  check_scales(scales, T, (w.in_features() + 127) / 128, "linear_fp8_w8a8 scales");
  return T;
}

void CudaBackend::check_fp8_linear(int64_t T, const LinearWeight& w, const Tensor& out) const {
  MLA_CHECK(w.is_fp8_block() && w.block_n == 128 && w.block_k == 128 && !w.tiled,
            "FP8 linear: the weight must be FP8 with 128 x 128 block scales, rows in order (not tiled)");
  int64_t K = w.in_features(), N = w.out_features();
  check_matrix(w.weight, DType::F8_E4M3, N, K, "FP8 linear weight");
  check_matrix(w.scale_inv, DType::F32, (N + 127) / 128, (K + 127) / 128, "FP8 linear weight scale_inv");
  MLA_CHECK(w.scale_inv.stride(0) == fp8_scale_row_stride((K + 127) / 128) && K % 16 == 0,
            "FP8 linear: weight scales must lie in rows of {} floats (as to_backend makes them) and K ({}) be a "
            "multiple of 16",
            fp8_scale_row_stride((K + 127) / 128), K);
  MLA_CHECK(out.defined() && out.device() == Device::CUDA &&
                (out.dtype() == DType::BF16 || out.dtype() == DType::F32) && out.ndim() == 2 && out.stride(1) == 1 &&
                out.size(0) == T && out.size(1) == N,
            "FP8 linear out: expected a device BF16 or F32 [{}, {}], got {}", T, N,
            out.defined() ? out.describe() : "nothing");
}

// q [Tp, K] e4m3 (row stride ldq), scales_t [G, Tp]; the first out.size(0) rows of the product go
// to out, through a scratch [Tp, N] when out has fewer rows. A ragged last block of weight rows is
// given as it is (its products match the reference, Fp8Linear tests; a scratch of whole blocks and
// a copy made V2-Lite's 8192-token prefill 3% slower): the weight's rows of zeros keep any read of
// that block as a whole inside the allocation.
void CudaBackend::fp8_block_gemm(const void* q, int64_t ldq, const Tensor& scales_t, const LinearWeight& w,
                                 Tensor& out, const std::optional<CublasLtConfig>& lt) {
  const int64_t T = out.size(0), Tp = scales_t.size(1), N = w.out_features(), K = w.in_features();
  MLA_CHECK(rows_whole(w),
            "FP8 linear: a {}-row weight needs {} rows of zeros after it for the block-scaled GEMM (to_backend "
            "makes them), it has {}",
            N, whole_rows(N) - N, w.pad_rows);
  const bool out_f32 = out.dtype() == DType::F32, padded = Tp != T;
  // The tuned table's choice where its entry nearest T is the warp-specialized kernel or cuBLASLt's
  // (CublasLtConfig).
  CublasLtConfig config;
  if (lt) {
    config = *lt;
  } else if (std::optional<Fp8GemmChoice> tuned = fp8_tuning_.find(N, K, T)) {
    if (tuned->kernel == Fp8GemmChoice::Kernel::Wgmma &&  // BF16 out only: F32 falls to cuBLASLt
        fp8_wgmma_gemm(q, ldq, scales_t, w, out, tuned->waves, tuned->group_m, tuned->cluster))
      return;
    if (tuned->kernel == Fp8GemmChoice::Kernel::Cublaslt) config = tuned->lt;
  }
  Tensor dst = padded ? empty(out.dtype(), {Tp, N}) : out;
  gemm_->fp8_block_nt(q, ldq, scales_t.data<float>(), w.weight.raw(), w.weight.stride(0), w.scale_inv.data<float>(),
                      dst.raw(), dst.stride(0), out_f32, Tp, N, K, stream_, config);
  if (!padded) return;
  const size_t elem = dtype_size(out.dtype());
  CUDA_CHECK(cudaMemcpy2DAsync(out.raw(), out.stride(0) * elem, dst.raw(), N * elem, N * elem, T,
                               cudaMemcpyDeviceToDevice, stream_));
}

// The kernel reads T rows of codes and stores T rows of out (no padded scratch, unlike cuBLASLt).
bool CudaBackend::fp8_wgmma_gemm(const void* q, int64_t ldq, const Tensor& scales_t, const LinearWeight& w,
                                 Tensor& out, int waves, int group_m, int cluster) {
  Fp8GemmWgmmaArgs a;
  a.x = q, a.ldx = ldq;
  a.x_scales = scales_t.data<float>(), a.ld_x_scales = scales_t.stride(0);
  a.w = w.weight.raw(), a.ldw = w.weight.stride(0), a.w_rows = w.out_features();
  a.w_scales = w.scale_inv.data<float>(), a.ld_w_scales = w.scale_inv.stride(0);
  a.out = static_cast<__nv_bfloat16*>(out.raw()), a.ldo = out.stride(0);
  a.T = int(out.size(0)), a.N = int(w.out_features()), a.K = int(w.in_features());
  a.waves = waves, a.group_m = group_m, a.cluster = cluster, a.ctas = num_sms_;
  if (out.dtype() != DType::BF16 || !fp8_gemm_wgmma_fits(a)) return false;
  fp8_gemm_wgmma(a, stream_);
  return true;
}

}  // namespace mlaserve::cuda
