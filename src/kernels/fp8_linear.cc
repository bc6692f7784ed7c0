// How a linear layer runs: FP8 block-scaled weights as W8A8 where the backend has it, from BF16 rows
// or from codes its input's producer quantized; and the defaults of the FP8 ops (the fused
// producers as the plain op, then the quantize op; failures for backends without FP8).
#include "common/error.h"
#include "kernels/ops.h"

namespace mlaserve {

void Backend::quantize_fp8_per_token_group(const Tensor&, int64_t, Tensor&, Tensor&) {
  fail("the {} backend has no FP8 activation quantization", name());
}

void Backend::linear_fp8_w8a8(const Tensor&, const Tensor&, const LinearWeight&, Tensor&) {
  fail("the {} backend has no FP8 W8A8 linear (its FP8 weights are converted when loaded)", name());
}

void Backend::mla_absorb_q_w8a8(const Tensor&, const Tensor&, const LinearWeight&, Tensor&) {
  fail("the {} backend has no FP8 BMM for the absorbed MLA projections", name());
}

void Backend::mla_absorb_out_w8a8(const Tensor&, const LinearWeight&, Tensor&) {
  fail("the {} backend has no FP8 BMM for the absorbed MLA projections", name());
}

Fp8GemmTuning Backend::tune_fp8_gemm(const std::vector<std::pair<int64_t, int64_t>>&, const std::vector<int64_t>&,
                                     const std::function<void(const std::string&)>&) {
  fail("the {} backend has no FP8 GEMM kernels to tune (tune-fp8-gemm runs with --device cuda)", name());
}

MoeTuning Backend::tune_moe(const std::vector<MoeTuneCase>&, const std::function<void(const std::string&)>&) {
  fail("the {} backend has no FP8 MoE kernels to tune (tune-moe runs with --device cuda)", name());
}

void Backend::linear_w8a8(const Tensor& x, const LinearWeight& w, Tensor& out) {
  int64_t T = x.size(0), K = x.size(1), groups = (K + w.block_k - 1) / w.block_k;
  // Activation groups line up with the weight's K-blocks, so each block's product needs one scale
  // of each side.
  Tensor q = empty(DType::F8_E4M3, {T, K}), scales = empty(DType::F32, {T, groups});
  quantize_fp8_per_token_group(x, w.block_k, q, scales);
  linear_fp8_w8a8(q, scales, w, out);
}

Fp8Activation Backend::empty_fp8_activation(int64_t T, int64_t K, int64_t group) {
  MLA_CHECK(T >= 0 && K > 0 && group > 0, "empty_fp8_activation: {} x {} in groups of {}", T, K, group);
  return {empty(DType::F8_E4M3, {T, K}), empty(DType::F32, {T, (K + group - 1) / group}), group};
}

namespace {

// Where a fused producer was asked for the quantized form only, the plain op still needs an output.
Tensor& output_or_scratch(Backend& ops, Tensor& out, Tensor& scratch, int64_t T, int64_t D) {
  if (out.defined()) return out;
  scratch = ops.empty(ops.activation_dtype(), {T, D});
  return scratch;
}

}  // namespace

void Backend::rmsnorm_fp8(const Tensor& x, Tensor* residual, const Tensor& w, float eps, Tensor& out,
                          Fp8Activation& fp8) {
  Tensor scratch;
  Tensor& normed = output_or_scratch(*this, out, scratch, x.size(0), x.size(1));
  if (residual)
    add_rmsnorm(x, *residual, w, eps, normed);
  else
    rmsnorm(x, w, eps, normed);
  quantize_fp8_per_token_group(normed, fp8.group, fp8.q, fp8.scales);
}

void Backend::silu_and_mul_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Activation& fp8) {
  Tensor scratch;
  Tensor& h = output_or_scratch(*this, out, scratch, gate.size(0), gate.size(1));
  silu_and_mul(gate, up, h);
  quantize_fp8_per_token_group(h, fp8.group, fp8.q, fp8.scales);
}

bool runs_w8a8(const Backend& ops, const LinearWeight& w) { return w.is_fp8_block() && ops.supports_fp8_w8a8(); }

void apply_linear(Backend& ops, const Tensor& x, const LinearWeight& w, Tensor& out) {
  if (runs_w8a8(ops, w))
    ops.linear_w8a8(x, w, out);
  else
    ops.linear(x, w, out);
}

void apply_linear(Backend& ops, const Tensor& x, const Fp8Activation& xq, const LinearWeight& w, Tensor& out) {
  if (xq.defined() && runs_w8a8(ops, w) && xq.group == w.block_k) {
    ops.linear_fp8_w8a8(xq.q, xq.scales, w, out);
    return;
  }
  MLA_CHECK(x.defined(), "apply_linear: the input was quantized only, but the {} weight does not run as FP8 W8A8",
            w.weight.defined() ? w.weight.describe() : "missing");
  apply_linear(ops, x, w, out);
}

}  // namespace mlaserve
