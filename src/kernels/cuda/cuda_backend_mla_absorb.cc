// CudaBackend::mla_absorb_q and mla_absorb_out: check the views, then run the batched GEMMs of
// MlaAbsorbRunner (mla_absorb.cu), made on first use.
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

void CudaBackend::mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) {
  MLA_CHECK(q_nope.defined() && q_nope.ndim() == 3 && q_pe.defined() && q_pe.ndim() == 3 && w_uk.defined() &&
                w_uk.ndim() == 3,
            "mla_absorb_q: q_nope, q_pe and w_uk must be 3-D");
  int64_t T = q_nope.size(0), H = q_nope.size(1), nope = q_nope.size(2), R = q_pe.size(2), L = w_uk.size(2);
  check_bf16(q_nope, {T, H, nope}, false, "mla_absorb_q q_nope");
  check_bf16(q_pe, {T, H, R}, false, "mla_absorb_q q_pe");
  check_bf16(w_uk, {H, nope, L}, true, "mla_absorb_q w_uk");
  check_bf16(q_latent, {T, H, L + R}, false, "mla_absorb_q q_latent");
  if (!absorb_) absorb_ = std::make_shared<MlaAbsorbRunner>();
  MlaAbsorbQParams p{q_nope.raw(),      q_pe.raw(),       w_uk.raw(),        q_latent.raw(),
                     q_nope.stride(0),  q_nope.stride(1), q_pe.stride(0),    q_pe.stride(1),
                     q_latent.stride(0), q_latent.stride(1), T, H, nope, R, L};
  absorb_->absorb_q(p, stream_);
}

void CudaBackend::mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) {
  MLA_CHECK(latent.defined() && latent.ndim() == 3 && w_uv.defined() && w_uv.ndim() == 3,
            "mla_absorb_out: latent and w_uv must be 3-D");
  int64_t T = latent.size(0), H = latent.size(1), L = latent.size(2), V = w_uv.size(1);
  check_bf16(latent, {T, H, L}, false, "mla_absorb_out latent");
  check_bf16(w_uv, {H, V, L}, true, "mla_absorb_out w_uv");
  check_bf16(out, {T, H, V}, false, "mla_absorb_out out");
  if (!absorb_) absorb_ = std::make_shared<MlaAbsorbRunner>();
  MlaAbsorbOutParams p{latent.raw(), w_uv.raw(), out.raw(), latent.stride(0), latent.stride(1),
                       out.stride(0), out.stride(1), T, H, V, L};
  absorb_->absorb_out(p, stream_);
}

}  // namespace mlaserve::cuda
