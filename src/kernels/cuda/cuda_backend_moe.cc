// CudaBackend::moe_route and ::moe_experts: validation at the op boundary, then the launchers of
// moe_route.cu and the MoeRunner of moe_experts.cc.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gemm_runner.h"
#include "kernels/cuda/moe_experts.h"
#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/tensor_checks.h"

namespace mlaserve::cuda {

namespace {

// All experts BF16, or all FP8 with 128 x 128 block scales over whole blocks (what to_backend keeps
// as FP8), as the first expert's gate; FP8 scales in rows scale_ld apart.
void check_expert_weight(const LinearWeight& w, bool fp8, int64_t rows, int64_t cols, int64_t scale_ld,
                         const char* what, size_t e) {
  const DType dt = fp8 ? DType::F8_E4M3 : DType::BF16;
  MLA_CHECK(w.is_fp8_block() == fp8 && w.weight.defined() && w.weight.device() == Device::CUDA &&
                w.weight.dtype() == dt && w.weight.shape() == Shape({rows, cols}) && w.weight.is_contiguous(),
            "moe_experts: expert {} {} must be a contiguous device {}[{}, {}] like expert 0's gate, got {}", e, what,
            dtype_name(dt), rows, cols, w.weight.defined() ? w.weight.describe() : "nothing");
  if (!fp8) return;
  MLA_CHECK(w.block_n == 128 && w.block_k == 128 && rows % 128 == 0 && cols % 128 == 0 && w.scale_inv.defined() &&
                w.scale_inv.device() == Device::CUDA && w.scale_inv.dtype() == DType::F32 &&
                w.scale_inv.shape() == Shape({rows / 128, cols / 128}) && w.scale_inv.stride(1) == 1 &&
                w.scale_inv.stride(0) == scale_ld,
            "moe_experts: FP8 expert {} {} needs 128 x 128 blocks over a [{}, {}] weight and device F32 scales "
            "[{}, {}] in rows {} apart (as expert 0's), got blocks {} x {} and scales {}",
            e, what, rows, cols, rows / 128, cols / 128, scale_ld, w.block_n, w.block_k,
            w.scale_inv.defined() ? w.scale_inv.describe() : "none");
}

// The grouped FP8 expert kernels stream whole 128 x 128 blocks, and moe_experts takes one dtype
// for all experts: a list with FP8 weights is kept FP8 only if every gate, up and down is FP8 in
// such blocks (a tiny model's ragged last block of rows, or a K that to_backend already
// dequantized, rule it out).
bool fp8_experts_whole(const std::vector<GatedMlpWeights>& experts) {
  for (const GatedMlpWeights& m : experts)
    for (const LinearWeight* w : {&m.gate, &m.up, &m.down})
      if (!w->is_fp8_block() || w->block_n != 128 || w->block_k != 128 || w->out_features() % 128 != 0 ||
          w->in_features() % 128 != 0)
        return false;
  return true;
}

// Every FP8 expert weight in BF16, through the host (once, at load).
void dequantize_fp8_experts(std::vector<GatedMlpWeights>& experts, CudaBackend& b) {
  for (GatedMlpWeights& m : experts)
    for (LinearWeight* w : {&m.gate, &m.up, &m.down}) {
      if (!w->is_fp8_block()) continue;
      const Tensor dense = dequantize(b.host_copy(*w));
      *w = LinearWeight{};
      w->weight = b.to_backend(dense);
    }
}

// The routing's launch parameters, after checking the tensors against it.
MoeRouteParams route_params(const Tensor& logits, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                            Tensor& weights) {
  int64_t T = logits.defined() ? logits.size(0) : 0, E = r.num_experts, k = r.top_k, S = r.slots();
  MLA_CHECK(r.num_fused_shared >= 0, "moe_route: num_fused_shared {} is negative", r.num_fused_shared);
  check_matrix(logits, DType::F32, T, E, "moe_route logits");
  // ids and weights hold the top-k slots, then the fused shared experts'.
  check_matrix(ids, DType::I32, T, S, "moe_route ids");
  MLA_CHECK(ids.is_contiguous(), "moe_route: ids must be contiguous");
  check_matrix(weights, DType::F32, T, S, "moe_route weights");
  MLA_CHECK(r.num_groups > 0 && E % r.num_groups == 0 && r.topk_groups <= r.num_groups && k <= E && k > 0,
            "moe_route: inconsistent routing");
  MLA_CHECK(r.method != TopkMethod::NoauxTc || E / r.num_groups >= 2,
            "moe_route: noaux_tc ranks groups by their top-2 scores and needs 2 experts a group");
  if (bias.defined())
    MLA_CHECK(bias.device() == Device::CUDA && bias.dtype() == DType::F32 && bias.numel() == E && bias.is_contiguous(),
              "moe_route: the correction bias must be a contiguous device F32[{}], got {}", E, bias.describe());
  MoeRouteParams p{logits.data<float>(), logits.stride(0), bias.defined() ? bias.data<float>() : nullptr,
                   ids.data<int32_t>(), weights.data<float>(), weights.stride(0), int32_t(T), int32_t(E),
                   int32_t(k), r.num_fused_shared, r.num_groups, r.topk_groups, int32_t(r.method),
                   r.scoring == ScoringFunc::Softmax, r.renormalize, r.routed_scaling_factor};
  return p;
}

}  // namespace

void CudaBackend::moe_route(const Tensor& logits, const Tensor& bias, const MoeRouting& r, Tensor& ids,
                            Tensor& weights) {
  launch_moe_route(route_params(logits, bias, r, ids, weights), route_warp_per_token_from_scores, stream_);
}

void CudaBackend::moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                              const std::vector<GatedMlpWeights>& experts, Tensor& out) {
  run_moe_experts(x, ids, weights, experts, out, nullptr);
}

void CudaBackend::moe_route_experts(const Tensor& logits, const Tensor& bias, const MoeRouting& routing,
                                    const Tensor& x, const std::vector<GatedMlpWeights>& experts, Tensor& ids,
                                    Tensor& weights, Tensor& out) {
  const MoeRoute route{route_params(logits, bias, routing, ids, weights), route_warp_per_token_from_scores};
  run_moe_experts(x, ids, weights, experts, out, &route);
}

void CudaBackend::run_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                                  const std::vector<GatedMlpWeights>& experts, Tensor& out,
                                  const MoeRoute* route) {
  MLA_CHECK(!experts.empty(), "moe_experts: no experts");
  int64_t T = x.defined() ? x.size(0) : 0, H = x.defined() ? x.size(1) : 0, k = ids.defined() ? ids.size(1) : 0;
  int64_t I = experts[0].gate.out_features();
  check_matrix(x, DType::BF16, T, H, "moe_experts x");
  check_matrix(out, DType::BF16, T, H, "moe_experts out");
  check_matrix(ids, DType::I32, T, k, "moe_experts ids");
  MLA_CHECK(ids.is_contiguous(), "moe_experts: ids must be contiguous");
  check_matrix(weights, DType::F32, T, k, "moe_experts weights");
  const bool fp8 = experts[0].gate.is_fp8_block();
  MoeRunner::Experts ex{experts.data(), {}, {}, {}, {}, {}, {}};
  if (fp8 && experts[0].down.is_fp8_block()) {
    ex.gate_up_scale_ld = experts[0].gate.scale_inv.stride(0);
    ex.down_scale_ld = experts[0].down.scale_inv.stride(0);
  }
  auto tiled = [](const GatedMlpWeights& w) { return w.gate.tiled || w.up.tiled || w.down.tiled; };
  while (size_t(ex.tiled) < experts.size() && tiled(experts[size_t(ex.tiled)])) ++ex.tiled;
  for (const GatedMlpWeights& w : experts) {
    ex.gate.push_back(w.gate.weight.raw());
    ex.up.push_back(w.up.weight.raw());
    ex.down.push_back(w.down.weight.raw());
    if (!fp8) continue;
    ex.gate_scale.push_back(w.gate.scale_inv.defined() ? w.gate.scale_inv.raw() : nullptr);
    ex.up_scale.push_back(w.up.scale_inv.defined() ? w.up.scale_inv.raw() : nullptr);
    ex.down_scale.push_back(w.down.scale_inv.defined() ? w.down.scale_inv.raw() : nullptr);
  }
  MoeRunner& moe = moe_runner();
  // The weights are checked when a list is first seen (192 checks cost ~10 us a call at decode).
  if (!moe.knows(ex, int32_t(H), int32_t(I)))
    for (size_t e = 0; e < experts.size(); ++e) {
      check_expert_weight(experts[e].gate, fp8, I, H, ex.gate_up_scale_ld, "gate", e);
      check_expert_weight(experts[e].up, fp8, I, H, ex.gate_up_scale_ld, "up", e);
      check_expert_weight(experts[e].down, fp8, H, I, ex.down_scale_ld, "down", e);
      const GatedMlpWeights& w = experts[e];
      const bool want = int64_t(e) < ex.tiled;
      MLA_CHECK(w.gate.tiled == want && w.up.tiled == want && w.down.tiled == want,
                "moe_experts: expert {} has gate, up, down {}, {}, {}; tiled (pack_moe_experts) must be all three "
                "weights of experts [0, n), here n = {}", e, w.gate.tiled ? "tiled" : "row-major",
                w.up.tiled ? "tiled" : "row-major", w.down.tiled ? "tiled" : "row-major", ex.tiled);
    }
  // ids must lie in [0, E): the device does not check them (pairs outside are dropped or garbage).
  moe.run(ex, x.raw(), x.stride(0), ids.data<int32_t>(), weights.data<float>(), weights.stride(0), int32_t(T),
            int32_t(k), int32_t(H), int32_t(I), out.raw(), out.stride(0), *gemm_, stream_, route);
}

int64_t CudaBackend::max_moe_experts() const { return kMoeMaxExperts; }

void CudaBackend::pack_moe_experts(std::vector<GatedMlpWeights>& experts, size_t count) {
  MLA_CHECK(count <= experts.size(), "pack_moe_experts: {} of {} experts", count, experts.size());
  if (!fp8_experts_whole(experts)) {
    dequantize_fp8_experts(experts, *this);
    return;
  }
  for (size_t e = 0; e < count; ++e)
    for (LinearWeight* w : {&experts[e].gate, &experts[e].up, &experts[e].down}) {
      // What the FP8 expert kernels take; anything else stays as it is (and moe_experts judges it).
      const Tensor& t = w->weight;
      if (!w->is_fp8_block() || w->tiled || !t.defined() || t.device() != Device::CUDA ||
          t.dtype() != DType::F8_E4M3 || t.ndim() != 2 || !t.is_contiguous())
        continue;
      Tensor tiled = empty(DType::F8_E4M3, t.shape());
      launch_moe_fp8_tile_weights(t.raw(), t.size(0), t.size(1), tiled.raw(), stream_);
      w->weight = tiled;  // the row-major block returns to the allocator's cache, reused in stream order
      w->tiled = true;
    }
}

void CudaBackend::set_moe_tuning(MoeTuning tuning) {
  moe_runner().tuning = std::make_shared<const MoeTuning>(std::move(tuning));
}

MoeRunner& CudaBackend::moe_runner() {
  if (!moe_) moe_ = std::make_shared<MoeRunner>();
  return *moe_;
}

}  // namespace mlaserve::cuda
