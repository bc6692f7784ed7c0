// ForwardBatch: the plain arrays one forward pass consumes, built by the scheduler (or by
// `generate`) and read by the model. Nothing here knows about requests or kernels.
#pragma once

#include <vector>

#include "kernels/ops.h"

namespace mlaserve {

// Which MLA form attention runs in. Auto: the absorbed form when every sequence adds one token
// (decode), the MHA form otherwise (prefill / extend), as the kernels are fastest that way.
enum class AttentionForm : uint8_t { Auto, Mha, Absorbed };

struct ForwardBatch {
  Tensor input_ids;    // [T] I32: new tokens of all seqs, seq after seq
  Tensor positions;    // [T] I32
  Tensor out_slots;    // [T] I32: KV slot each new token's latent is written to
  AttentionMetadata attn;
  Tensor logit_rows;   // [R] I32: rows of T whose logits are returned
  bool is_decode = false;
  AttentionForm form = AttentionForm::Auto;

  int64_t num_tokens() const { return input_ids.numel(); }
  bool use_absorbed() const {
    return form == AttentionForm::Absorbed || (form == AttentionForm::Auto && is_decode);
  }
};

// One sequence's part of a batch: its new tokens, the slots of all its tokens (cached prefix
// first, then one per new token), and whether every new token wants logits or only the last.
struct SequenceInput {
  std::vector<int32_t> new_tokens;
  std::vector<int32_t> slots;  // size = prefix + new tokens
  bool all_logits = false;
};

// Lays sequences out one after another on the host.
ForwardBatch make_forward_batch(const std::vector<SequenceInput>& seqs, AttentionForm form = AttentionForm::Auto);

}  // namespace mlaserve
