// How a linear layer runs: FP8 block-scaled weights as W8A8 where the backend has it, and the
// defaults of the FP8 ops for backends that do not.
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

void apply_linear(Backend& ops, const Tensor& x, const LinearWeight& w, Tensor& out) {
  if (w.is_fp8_block() && ops.supports_fp8_w8a8())
    ops.linear_w8a8(x, w, out);
  else
    ops.linear(x, w, out);
}

}  // namespace mlaserve
