#include "engine/decode_graphs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "common/error.h"

namespace mlaserve {

struct DecodeGraphs::Graph {
  int size = 0;
  std::unique_ptr<BackendGraph> graph;
  Tensor logits;  // [size, vocab], the graph's output
};

namespace {

int64_t aligned4(int64_t n) { return (n + 3) / 4 * 4; }

}  // namespace

DecodeGraphs::DecodeGraphs(DeepseekModel& model, KvPool& kv, std::vector<int> batch_sizes, int32_t scratch_slot,
                           int64_t max_kv_indices)
    : model_(model), kv_(kv), scratch_slot_(scratch_slot) {
  Backend& b = model_.backend();
  MLA_CHECK(b.supports_graphs(), "the {} backend has no graphs: CUDA graphs need --device cuda", b.name());
  std::sort(batch_sizes.begin(), batch_sizes.end());
  batch_sizes.erase(std::unique(batch_sizes.begin(), batch_sizes.end()), batch_sizes.end());
  if (batch_sizes.empty()) return;
  max_size_ = batch_sizes.back();
  max_kv_ = std::max<int64_t>(max_kv_indices, max_size_);
  int64_t B = max_size_, at = 0;
  for (int64_t* off : {&off_ids_, &off_pos_, &off_slots_, &off_rows_, &off_lens_}) {
    *off = at;
    at += aligned4(B);
  }
  off_qstart_ = at;
  at += aligned4(B + 1);
  off_kvstart_ = at;
  at += aligned4(B + 1);
  off_kv_ = at;
  inputs_ = b.empty(DType::I32, {off_kv_ + max_kv_});

  auto t0 = std::chrono::steady_clock::now();
  std::vector<int> failed;
  std::string reason;
  for (auto it = batch_sizes.rbegin(); it != batch_sizes.rend(); ++it) {
    int size = *it;
    // A padding-only batch: every row is a scratch row.
    Tensor host = host_inputs({}, size);
    Tensor dst = inputs_.narrow(0, 0, host.numel());
    b.copy_from_host(host, dst);
    ForwardBatch batch = batch_view(size);
    auto g = std::make_unique<Graph>();
    g->size = size;
    try {
      // The warm-up sizes what the ops keep between calls (plans, tables, GEMM heuristics), so the
      // capture itself allocates nothing that outlives it.
      model_.forward_on_backend(batch, kv_);
      b.synchronize();
      // By value: a backend may keep the work to run it again at replay.
      Graph* graph = g.get();
      g->graph = b.capture([this, batch, graph] { graph->logits = model_.forward_on_backend(batch, kv_); });
      g->graph->replay();
      b.synchronize();
    } catch (const std::exception& e) {
      failed.insert(failed.begin(), size);
      reason = e.what();
      continue;
    }
    graphs_.push_back(std::move(g));
  }
  std::reverse(graphs_.begin(), graphs_.end());
  for (auto& g : graphs_) sizes_.push_back(g->size);
  if (!failed.empty())
    spdlog::warn("no CUDA graphs for decode batch sizes [{}] ({}): such batches run eagerly", fmt::join(failed, ", "),
                 reason);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("captured {} CUDA graphs for decode batch sizes [{}] in {:.1f} s ({:.1f} MB graph pool)",
               sizes_.size(), fmt::join(sizes_, ", "), secs, double(b.graph_pool_bytes()) / 1e6);
}

DecodeGraphs::~DecodeGraphs() = default;

Tensor DecodeGraphs::host_inputs(const std::vector<SequenceInput>& seqs, int size) const {
  int64_t n = int64_t(seqs.size()), kv_total = 0;
  for (const SequenceInput& s : seqs) kv_total += int64_t(s.slots.size());
  kv_total += size - n;  // one scratch slot per padding row
  if (n > size || kv_total > max_kv_) return {};
  // Filled where the backend uploads from (pinned memory on CUDA): one host write, no second copy.
  Tensor host = model_.backend().upload_buffer(DType::I32, {off_kv_ + kv_total});
  int32_t* h = host.data<int32_t>();
  std::fill_n(h, off_kv_, 0);
  h[off_qstart_] = 0;
  h[off_kvstart_] = 0;
  int32_t* kv = h + off_kv_;
  int64_t kv_at = 0;
  for (int64_t i = 0; i < size; ++i) {
    bool real = i < n;
    int32_t len = real ? int32_t(seqs[size_t(i)].slots.size()) : 1;
    if (real) {
      const SequenceInput& s = seqs[size_t(i)];
      h[off_ids_ + i] = s.new_tokens[0];
      h[off_slots_ + i] = s.slots.back();
      std::copy(s.slots.begin(), s.slots.end(), kv + kv_at);
    } else {
      h[off_ids_ + i] = 0;
      h[off_slots_ + i] = scratch_slot_;
      kv[kv_at] = scratch_slot_;
    }
    h[off_pos_ + i] = len - 1;
    h[off_rows_ + i] = int32_t(i);
    h[off_lens_ + i] = len;
    kv_at += len;
    h[off_qstart_ + i + 1] = int32_t(i + 1);
    h[off_kvstart_ + i + 1] = int32_t(kv_at);
  }
  return host;
}

ForwardBatch DecodeGraphs::batch_view(int size) const {
  ForwardBatch b;
  b.input_ids = inputs_.narrow(0, off_ids_, size);
  b.positions = inputs_.narrow(0, off_pos_, size);
  b.out_slots = inputs_.narrow(0, off_slots_, size);
  b.logit_rows = inputs_.narrow(0, off_rows_, size);
  b.attn.num_seqs = size;
  b.attn.seq_lens = inputs_.narrow(0, off_lens_, size);
  b.attn.query_start = inputs_.narrow(0, off_qstart_, size + 1);
  b.attn.kv_start = inputs_.narrow(0, off_kvstart_, size + 1);
  b.attn.kv_indices = inputs_.narrow(0, off_kv_, max_kv_);
  b.is_decode = true;
  return b;
}

DecodeGraphs::Graph* DecodeGraphs::graph_for(int64_t num_seqs) {
  for (auto& g : graphs_)
    if (g->size >= num_seqs) return g.get();
  return nullptr;
}

Tensor DecodeGraphs::run(const std::vector<SequenceInput>& seqs) {
  if (seqs.empty()) return {};
  for (const SequenceInput& s : seqs)
    if (s.new_tokens.size() != 1 || s.all_logits) return {};
  Graph* g = graph_for(int64_t(seqs.size()));
  if (!g) return {};
  Tensor host = host_inputs(seqs, g->size);
  if (!host.defined()) return {};
  Backend& b = model_.backend();
  Tensor dst = inputs_.narrow(0, 0, host.numel());
  b.copy_from_host(host, dst);
  g->graph->replay();
  return g->logits.narrow(0, 0, int64_t(seqs.size()));
}

}  // namespace mlaserve
