#include "model/backend_weights.h"

#include <algorithm>

#include "engine/forward_batch.h"

namespace mlaserve {

namespace {

// Tensors already on the backend's device (dummy weights made there) are left as they are.
void move(Tensor& t, Backend& b) {
  if (t.defined() && t.device() != b.device()) t = b.to_backend(t);
}
// FP8 blocks quantized on the device still go through to_backend, which keeps or converts them.
void move(LinearWeight& w, Backend& b) {
  if (w.weight.defined() && (w.weight.device() != b.device() || w.is_fp8_block())) w = b.to_backend(w);
}
void move(GatedMlpWeights& m, Backend& b) {
  move(m.gate, b);
  move(m.up, b);
  move(m.down, b);
  move(m.gate_up, b);
}

void move(LayerWeights& l, Backend& b) {
  move(l.input_norm, b);
  move(l.post_attention_norm, b);
  AttentionWeights& a = l.attn;
  for (LinearWeight* w : {&a.q_proj, &a.q_a_proj, &a.q_b_proj, &a.kv_a_proj, &a.q_kv_a, &a.kv_b_proj, &a.o_proj})
    move(*w, b);
  move(a.q_a_norm, b);
  move(a.kv_a_norm, b);
  if (l.is_moe) {
    move(l.moe.router, b);
    move(l.moe.correction_bias, b);
    for (auto& e : l.moe.experts) move(e, b);
    if (l.moe.has_shared) move(l.moe.shared, b);
  } else {
    move(l.mlp, b);
  }
}

}  // namespace

void move_weights_to_backend(ModelWeights& w, Backend& b) {
  if (b.device() == Device::CPU) return;
  move(w.embed, b);
  for (auto& l : w.layers) move(l, b);
  move(w.final_norm, b);
  move(w.lm_head, b);
  for (auto& m : w.mtp) {
    move(m.enorm, b);
    move(m.hnorm, b);
    move(m.eh_proj, b);
    move(m.embed, b);
    move(m.layer, b);
    move(m.head_norm, b);
    move(m.head, b);
  }
}

ForwardBatch batch_to_backend(const ForwardBatch& batch, Backend& b) {
  if (b.device() == Device::CPU) return batch;
  // One upload for all index arrays (each starts 16-byte aligned): per-array copies would each wait
  // for the device. They are packed where the backend uploads from, so that is the only host copy.
  ForwardBatch d = batch;
  Tensor* parts[] = {&d.input_ids, &d.positions, &d.out_slots, &d.logit_rows, &d.attn.seq_lens,
                     &d.attn.query_start, &d.attn.kv_start, &d.attn.kv_indices};
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (Tensor* t : parts) {
    offsets.push_back(total);
    total += (t->numel() + 3) / 4 * 4;
  }
  Tensor host = b.upload_buffer(DType::I32, {std::max<int64_t>(total, 1)});
  for (size_t i = 0; i < offsets.size(); ++i) {
    Tensor src = parts[i]->contiguous();
    std::copy_n(src.data<int32_t>(), src.numel(), host.data<int32_t>() + offsets[i]);
  }
  Tensor dev = b.empty(DType::I32, host.shape());
  b.copy_from_host(host, dev);
  for (size_t i = 0; i < offsets.size(); ++i) *parts[i] = dev.narrow(0, offsets[i], parts[i]->numel());
  return d;
}

}  // namespace mlaserve
