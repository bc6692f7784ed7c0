// CudaBackend::mla_absorb_q and mla_absorb_out: check the views, then run the batched GEMMs of
// MlaAbsorbRunner (mla_absorb.cu), made on first use; their FP8 forms (the FP8 BMM) on the skinny
// FP8 kernel batched over heads (skinny_gemm_fp8.cu).
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/mla_absorb.h"

namespace mlaserve::cuda {

namespace {

// A device BF16 tensor of `shape` with a contiguous last dim (and wholly contiguous for weights).
void check_bf16(const Tensor& t, const Shape& shape, bool contiguous, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::BF16 && t.shape() == shape &&
                t.stride(-1) == 1 && (!contiguous || t.is_contiguous()),
            "{}: expected a device BF16 {}{}, got {}", what, contiguous ? "contiguous " : "", shape_str(shape),
            t.defined() ? t.describe() : "nothing");
}

}  // namespace

MlaAbsorbRunner& CudaBackend::mla_absorb() {
  if (!absorb_) absorb_ = std::make_shared<MlaAbsorbRunner>();
  return *absorb_;
}

void CudaBackend::mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) {
  MLA_CHECK(q_nope.defined() && q_nope.ndim() == 3 && q_pe.defined() && q_pe.ndim() == 3 && w_uk.defined() &&
                w_uk.ndim() == 3,
            "mla_absorb_q: q_nope, q_pe and w_uk must be 3-D");
  int64_t T = q_nope.size(0), H = q_nope.size(1), nope = q_nope.size(2), R = q_pe.size(2), L = w_uk.size(2);
  check_bf16(q_nope, {T, H, nope}, false, "mla_absorb_q q_nope");
  check_bf16(q_pe, {T, H, R}, false, "mla_absorb_q q_pe");
  check_bf16(w_uk, {H, nope, L}, true, "mla_absorb_q w_uk");
  check_bf16(q_latent, {T, H, L + R}, false, "mla_absorb_q q_latent");
  MlaAbsorbQParams p{q_nope.raw(),      q_pe.raw(),       w_uk.raw(),        q_latent.raw(),
                     q_nope.stride(0),  q_nope.stride(1), q_pe.stride(0),    q_pe.stride(1),
                     q_latent.stride(0), q_latent.stride(1), T, H, nope, R, L};
  mla_absorb().absorb_q(p, stream_);
}

MlaAbsorbOutParams mla_absorb_out_params(const Tensor& latent, const Tensor& w_uv, Tensor& out) {
  MLA_CHECK(latent.defined() && latent.ndim() == 3 && w_uv.defined() && w_uv.ndim() == 3,
            "mla_absorb_out: latent and w_uv must be 3-D");
  int64_t T = latent.size(0), H = latent.size(1), L = latent.size(2), V = w_uv.size(1);
  check_bf16(latent, {T, H, L}, false, "mla_absorb_out latent");
  check_bf16(w_uv, {H, V, L}, true, "mla_absorb_out w_uv");
  check_bf16(out, {T, H, V}, false, "mla_absorb_out out");
  return {latent.raw(), w_uv.raw(), out.raw(), latent.stride(0), latent.stride(1), out.stride(0), out.stride(1),
          T, H, V, L};
}

void CudaBackend::mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) {
  const MlaAbsorbOutParams p = mla_absorb_out_params(latent, w_uv, out);
  mla_absorb().absorb_out(p, stream_);
}

namespace {

// A device FP8 weight of H heads x N rows by K, 128 x 128 blocks, scales as to_backend lays them.
void check_head_weight(const LinearWeight& w, int64_t H, int64_t K, const char* what) {
  MLA_CHECK(w.is_fp8_block() && w.block_n == 128 && w.block_k == 128 && !w.tiled && w.weight.defined() &&
                w.weight.device() == Device::CUDA && w.weight.dtype() == DType::F8_E4M3 && w.weight.ndim() == 2 &&
                w.weight.is_contiguous() && w.in_features() == K && H > 0 && w.out_features() % (H * 128) == 0 &&
                w.scale_inv.defined() && w.scale_inv.device() == Device::CUDA && w.scale_inv.dtype() == DType::F32 &&
                w.scale_inv.ndim() == 2 && w.scale_inv.size(0) == w.out_features() / 128 &&
                w.scale_inv.size(1) == K / 128 && w.scale_inv.stride(1) == 1,
            "{}: expected a device FP8 [{} heads x a multiple of 128 rows, {}] weight in 128 x 128 blocks, rows in "
            "order, got {}",
            what, H, K, w.weight.defined() ? w.weight.describe() : "nothing");
}

// x [T, H, K] (BF16, rows contiguous) times the heads' weights into out [T, H, N]: one batch a head.
SkinnyFp8Problem head_problem(const Tensor& x, const LinearWeight& w, const Tensor& out, int64_t N) {
  SkinnyFp8Problem p = CudaBackend::skinny_problem(x, w, &out, N);
  p.batch = x.size(1), p.x_batch = x.stride(1), p.w_batch = N * w.weight.stride(0);
  p.ws_batch = N / 128 * w.scale_inv.stride(0), p.out_batch = out.stride(1);
  return p;
}

}  // namespace

void CudaBackend::mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                                   Tensor& q_latent) {
  // Shapes as the checks of the overload below expect them (which reject anything else).
  const bool ok = q_nope.defined() && q_nope.ndim() == 3 && q_nope.size(1) > 0 && w_uk_t.weight.defined();
  const int64_t T = ok ? q_nope.size(0) : 1, H = ok ? q_nope.size(1) : 1, K = ok ? q_nope.size(2) : 128;
  const int64_t N = ok ? w_uk_t.out_features() / H : 128;
  mla_absorb_q_w8a8(q_nope, q_pe, w_uk_t, q_latent, absorb_fp8_default(T, H, N, K));
}

void CudaBackend::mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out) {
  const bool ok = latent.defined() && latent.ndim() == 3 && latent.size(1) > 0 && w_uv.weight.defined();
  const int64_t T = ok ? latent.size(0) : 1, H = ok ? latent.size(1) : 1, K = ok ? latent.size(2) : 128;
  const int64_t N = ok ? w_uv.out_features() / H : 128;
  mla_absorb_out_w8a8(latent, w_uv, out, absorb_fp8_default(T, H, N, K));
}

void CudaBackend::mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                                   Tensor& q_latent, const SkinnyFp8Config& c) {
  MLA_CHECK(q_nope.defined() && q_nope.ndim() == 3 && q_pe.defined() && q_pe.ndim() == 3,
            "mla_absorb_q_w8a8: q_nope and q_pe must be 3-D");
  const int64_t T = q_nope.size(0), H = q_nope.size(1), nope = q_nope.size(2), R = q_pe.size(2);
  check_head_weight(w_uk_t, H, nope, "mla_absorb_q_w8a8 w_uk_t");
  const int64_t L = w_uk_t.out_features() / H;
  check_bf16(q_nope, {T, H, nope}, false, "mla_absorb_q_w8a8 q_nope");
  check_bf16(q_pe, {T, H, R}, false, "mla_absorb_q_w8a8 q_pe");
  check_bf16(q_latent, {T, H, L + R}, false, "mla_absorb_q_w8a8 q_latent");
  if (T == 0) return;
  launch_skinny_gemm_fp8(head_problem(q_nope, w_uk_t, q_latent, L), c, stream_);
  MlaAbsorbQParams p{q_nope.raw(),       q_pe.raw(),         nullptr,         q_latent.raw(),
                     q_nope.stride(0),   q_nope.stride(1),   q_pe.stride(0),  q_pe.stride(1),
                     q_latent.stride(0), q_latent.stride(1), T, H, nope, R, L};
  launch_copy_q_pe(p, stream_);
}

void CudaBackend::mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out,
                                     const SkinnyFp8Config& c) {
  MLA_CHECK(latent.defined() && latent.ndim() == 3, "mla_absorb_out_w8a8: latent must be 3-D");
  const int64_t T = latent.size(0), H = latent.size(1), L = latent.size(2);
  check_head_weight(w_uv, H, L, "mla_absorb_out_w8a8 w_uv");
  const int64_t V = w_uv.out_features() / H;
  check_bf16(latent, {T, H, L}, false, "mla_absorb_out_w8a8 latent");
  check_bf16(out, {T, H, V}, false, "mla_absorb_out_w8a8 out");
  if (T == 0) return;
  launch_skinny_gemm_fp8(head_problem(latent, w_uv, out, V), c, stream_);
}

}  // namespace mlaserve::cuda
