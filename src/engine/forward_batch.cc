#include "engine/forward_batch.h"

#include <algorithm>

#include "common/error.h"

namespace mlaserve {

ForwardBatch make_forward_batch(const std::vector<SequenceInput>& seqs, AttentionForm form) {
  std::vector<int32_t> ids, pos, out_slots, rows, seq_lens, q_start{0}, kv_start{0}, kv_indices;
  bool decode = !seqs.empty();
  int32_t max_len = 0;
  for (const SequenceInput& s : seqs) {
    int32_t n = int32_t(s.new_tokens.size()), len = int32_t(s.slots.size()), prefix = len - n;
    MLA_CHECK(n > 0 && prefix >= 0, "forward batch: a sequence with {} new tokens and {} slots", n, len);
    decode = decode && n == 1;
    for (int32_t i = 0; i < n; ++i) {
      if (s.all_logits || i == n - 1) rows.push_back(int32_t(ids.size()));
      ids.push_back(s.new_tokens[i]);
      pos.push_back(prefix + i);
      out_slots.push_back(s.slots[prefix + i]);
    }
    seq_lens.push_back(len);
    max_len = std::max(max_len, len);
    q_start.push_back(q_start.back() + n);
    kv_start.push_back(kv_start.back() + len);
    kv_indices.insert(kv_indices.end(), s.slots.begin(), s.slots.end());
  }
  ForwardBatch b;
  b.input_ids = Tensor::from_i32(ids);
  b.positions = Tensor::from_i32(pos);
  b.out_slots = Tensor::from_i32(out_slots);
  b.logit_rows = Tensor::from_i32(rows);
  b.attn.num_seqs = int32_t(seqs.size());
  b.attn.seq_lens = Tensor::from_i32(seq_lens);
  b.attn.query_start = Tensor::from_i32(q_start);
  b.attn.kv_start = Tensor::from_i32(kv_start);
  b.attn.kv_indices = Tensor::from_i32(kv_indices);
  b.attn.max_seq_len = max_len;
  b.is_decode = decode;
  b.form = form;
  return b;
}

}  // namespace mlaserve
