// The absorbed-form (decode) projections of an MLA layer, cut from its kv_b_proj: W_UK turns
// q_nope into a latent query, W_UV turns the latent attention output back into per-head values.
#pragma once

#include "kernels/linear_weight.h"
#include "kernels/ops.h"

namespace mlaserve {

// Decode batches of up to this many tokens run the FP8 BMM where the layer has it; larger ones the
// dense pair. On CUDA its kernel takes up to 16 tokens a CTA, and past that it lost to the BF16
// batched GEMM by 2-7x (H200, docs/benchmarks.md); the CPU follows the same rule, so both backends
// compute the same thing.
inline constexpr int64_t kFp8BmmMaxTokens = 16;

struct AbsorbedWeights {
  // Dense, dequantized (fp32 on the CPU, BF16 on CUDA).
  Tensor w_uk;  // [H, nope, kv_lora]
  Tensor w_uv;  // [H, v, kv_lora]
  // An FP8 kv_b_proj's own e4m3 blocks, cut by head, for the FP8 BMM (Backend::mla_absorb_q_w8a8):
  // set where the backend runs FP8 W8A8 and the blocks fall within heads (nope, v and kv_lora
  // multiples of the block, as in DeepSeek-V2/V3).
  LinearWeight w_uk_t;    // [H * kv_lora, nope]: W_UK[h]^T stacked by head
  LinearWeight w_uv_fp8;  // [H * v, kv_lora]

  bool fp8() const { return w_uk_t.is_fp8_block(); }
};

// kv_b [H * (nope + v), kv_lora] on the host; the result on the backend (the FP8 pair only with
// fp8_bmm).
AbsorbedWeights make_absorbed_weights(const LinearWeight& kv_b, int64_t H, int64_t nope, int64_t v,
                                      Backend& backend, bool fp8_bmm = true);

// q_latent [T, H, kv_lora + rope] from q_nope [T, H, nope] and q_pe [T, H, rope]; then attention
// over the cache into o_latent [T, H, kv_lora] and out [T, H, v] = W_UV · o_latent: the FP8 pair up
// to kFp8BmmMaxTokens tokens, else the dense one.
void absorb_q(Backend& ops, const AbsorbedWeights& w, const Tensor& q_nope, const Tensor& q_pe, Tensor& q_latent);
void decode_absorbed(Backend& ops, const AbsorbedWeights& w, const Tensor& q_latent, const Tensor& cache,
                     float kv_scale, const AttentionMetadata& md, float scale, Tensor& o_latent, Tensor& out);

}  // namespace mlaserve
