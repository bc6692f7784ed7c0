// The weights of a DeepSeek V2/V3 model, arranged as the forward pass reads them. Tensors are
// views into the checkpoint's mapped files (or dummy buffers) in their stored dtype.
#pragma once

#include <string>
#include <vector>

#include "config/model_config.h"
#include "kernels/linear_weight.h"

namespace mlaserve {

struct AttentionWeights {
  LinearWeight q_proj;    // [H * qk_head, hidden] when q_lora_rank == 0
  LinearWeight q_a_proj;  // [q_lora, hidden]
  Tensor q_a_norm;        // [q_lora]
  LinearWeight q_b_proj;  // [H * qk_head, q_lora]
  LinearWeight kv_a_proj; // [kv_lora + rope, hidden] (kv_a_proj_with_mqa)
  // q_proj (or q_a_proj) stacked over kv_a_proj, [N_q + kv_lora + rope, hidden], when the model
  // made it (then those two are left undefined): both read the same x, so one GEMM serves them.
  LinearWeight q_kv_a;
  Tensor kv_a_norm;       // [kv_lora]
  LinearWeight kv_b_proj; // [H * (nope + v), kv_lora]
  LinearWeight o_proj;    // [hidden, H * v]
  // An FP8 latent cache holds latent / kv_cache_scale: 1 unless the checkpoint has a calibrated
  // self_attn.k_scale (DeepSeek's own FP8 checkpoints have none).
  float kv_cache_scale = 1.0f;
};

struct MoeWeights {
  Tensor router;           // [E, hidden] (mlp.gate.weight)
  Tensor correction_bias;  // [E] F32 (e_score_correction_bias), V3 only
  std::vector<GatedMlpWeights> experts;
  bool has_shared = false;
  GatedMlpWeights shared;  // n_shared_experts * moe_intermediate wide
};

struct LayerWeights {
  Tensor input_norm;           // [hidden]
  Tensor post_attention_norm;  // [hidden]
  AttentionWeights attn;
  bool is_moe = false;
  GatedMlpWeights mlp;  // dense layers
  MoeWeights moe;       // MoE layers
};

// The NextN (MTP) module at layer index num_hidden_layers: the draft model of speculative decoding.
struct MtpWeights {
  Tensor enorm, hnorm;   // [hidden]
  LinearWeight eh_proj;  // [hidden, 2 * hidden]
  Tensor embed;          // [V, hidden]
  LayerWeights layer;
  Tensor head_norm;      // [hidden]
  LinearWeight head;     // [V, hidden]
};

struct ModelWeights {
  Tensor embed;  // [V, hidden]
  std::vector<LayerWeights> layers;
  Tensor final_norm;  // [hidden]
  LinearWeight lm_head;  // [V, hidden]
  std::vector<MtpWeights> mtp;
  uint64_t total_bytes = 0;
};

}  // namespace mlaserve
