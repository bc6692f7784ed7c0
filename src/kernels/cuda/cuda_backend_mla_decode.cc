// CudaBackend::mla_decode: checks the op's tensors, plans the batch once (MlaDecodePlan), launches;
// mla_decode_absorb_out: the same, then W_UV's projection, which merges split rows at few tokens.
#include <algorithm>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/mla_absorb.h"
#include "kernels/cuda/mla_decode.h"
#include "kernels/cuda/tensor_checks.h"
#include "kernels/cuda/tensor_map.h"

namespace mlaserve::cuda {

namespace {

void check_i32_dev(const Tensor& t, int64_t n, const char* what) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::I32 && t.ndim() == 1 &&
                t.is_contiguous() && (n < 0 || t.size(0) == n),
            "mla_decode {}: expected a contiguous device I32 vector of {}, got {}", what, n,
            t.defined() ? t.describe() : "nothing");
}

bool aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Rows a job takes: 64 when a sequence brings that many (128 heads, or several queries), so its
// cache rows are read once for all of them; 16 for one query of a TP shard's 16 heads, unless the
// batch has 128 seqs or more over a BF16 cache read by cp.async (pages of 1): 64-row jobs (3/4 of
// the rows padding) then stream long contexts faster on the paired kernel's pipeline
// (docs/benchmarks.md, fifteenth session, on an H200: 12-23% faster at 2048-8192 keys; 3-9% slower
// at 1024; FP8 caches 16% slower). Over the TMA (pages of 64) 16-row jobs are within 1% at 8192 keys
// and 5-11% faster at 1024-2048 (sixteenth session). The choice sees shapes only, so CUDA graphs
// replay it.
int pick_m_tiles(int64_t T, int64_t num_seqs, int64_t H, bool fp8, bool tma) {
  return T * H > 16 * num_seqs || (!fp8 && !tma && H == 16 && num_seqs >= 128) ? 4 : 1;
}

}  // namespace

MlaDecodePlan::MlaDecodePlan(int device) {
  CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device));
}

MlaDecodePlan::~MlaDecodePlan() = default;

void MlaDecodePlan::reserve(int64_t max_jobs, int64_t partial_rows) {
  if (max_jobs > cap_jobs_) {
    plan_buf_.ensure(size_t(max_jobs * 8 + num_sms_ * 4 + 4 + num_sms_ * kFirstTileInts) * sizeof(int32_t));
    cap_jobs_ = max_jobs;
  }
  if (partial_rows > cap_partial_rows_) {
    partial_buf_.ensure(size_t(partial_rows) * (kMlaLatentDim + 1) * sizeof(float));
    cap_partial_rows_ = partial_rows;
  }
}

void MlaDecodePlan::plan(const MlaDecodeParams& p, int64_t T, int64_t batch_id, cudaStream_t stream) {
  int64_t S = p.num_seqs, H = p.num_heads;
  // The device plan depends on the job size, which depends on the cache's dtype and layout too.
  int mt = force_m_tiles ? force_m_tiles : pick_m_tiles(T, S, H, p.cache_fp8, p.cache_tma);
  // Reused, the plan was written by an earlier launch; planned now, the plan kernel is the one
  // right before the attention kernel.
  sched_.plan_settled = batch_id != 0 && batch_id == batch_id_ && T == tokens_ && S == seqs_ && H == heads_ &&
                        p.seq_lens == seq_lens_ && p.query_start == query_start_ && mt == sched_.m_tiles;
  if (sched_.plan_settled) return;
  int64_t rows = 16 * mt;
  // A seq of n queries has ceil(n * H / rows) jobs: at most T * H / rows + S over the batch. A job
  // cut between CTAs leaves one partial per CTA it touches: at most jobs + CTAs - 1.
  int64_t max_jobs = (T * H + rows - 1) / rows + S;
  reserve(max_jobs, (max_jobs + num_sms_) * rows);
  sched_.jobs = static_cast<int32_t*>(plan_buf_.get());
  sched_.ctas = sched_.jobs + cap_jobs_ * 8;
  sched_.num_jobs = sched_.ctas + num_sms_ * 4;
  sched_.first_tiles = sched_.num_jobs + 4;
  sched_.partial_o = static_cast<float*>(partial_buf_.get());
  sched_.partial_lse = sched_.partial_o + cap_partial_rows_ * kMlaLatentDim;
  sched_.max_jobs = int(max_jobs);
  sched_.num_ctas = num_sms_;  // one persistent CTA per SM (the kernel takes most of its shared memory)
  sched_.m_tiles = mt;
  sched_.wgmma = !force_mma_sync;
  sched_.pairs = !force_two_stage;
  launch_mla_decode_plan(p, sched_, stream);
  batch_id_ = batch_id, tokens_ = T, seqs_ = S, heads_ = H;
  seq_lens_ = p.seq_lens, query_start_ = p.query_start;
}

void MlaDecodePlan::run(const MlaDecodeParams& p, cudaStream_t stream, bool combine) const {
  launch_mla_decode_run(p, sched_, stream, combine);
}

const MlaDecodePlan::RowMaps& MlaDecodePlan::row_maps(std::unordered_map<const void*, RowMaps>& maps,
                                                     const void* base, int64_t rows) {
  auto it = maps.find(base);
  if (it == maps.end() || it->second.rows != rows) {
    const RowMaps made{rows, bf16_tensor_map_sw128(base, rows, kMlaKvDim, kMlaKvDim * 2, kMlaBlockKeys, 64),
                       bf16_tensor_map_sw128_blocks(base, rows, kMlaKvDim, kMlaKvDim * 2, kMlaBlockKeys, 4)};
    it = maps.insert_or_assign(base, made).first;
  }
  return it->second;
}

void MlaDecodePlan::set_cache_maps(MlaDecodeParams& p, int64_t num_slots) {
  const RowMaps& maps = row_maps(cache_maps_, p.cache, num_slots);
  p.cache_map = maps.one_block;
  p.cache_map4 = maps.four_blocks;
}

void MlaDecodePlan::set_q_maps(MlaDecodeParams& p, int64_t rows) {
  // q buffers come and go with the activations (one a layer's workspace, or a fresh one a call
  // without graphs): a few maps kept, not one for every buffer ever seen.
  if (q_maps_.size() >= 16 && q_maps_.find(p.q) == q_maps_.end()) q_maps_.clear();
  const RowMaps& maps = row_maps(q_maps_, p.q, rows);
  p.q_map = maps.one_block;
  p.q_map4 = maps.four_blocks;
}

MlaDecodePlan& CudaBackend::mla_decode_plan() {
  if (!mla_decode_plan_) mla_decode_plan_ = std::make_shared<MlaDecodePlan>(device_);
  return *mla_decode_plan_;
}

namespace {

// The attention kernels' parameters for mla_decode's arguments, after checking them.
MlaDecodeParams mla_decode_params(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                                  float scale, Tensor& out, MlaDecodePlan& plan) {
  MLA_CHECK(q.defined() && q.device() == Device::CUDA && q.dtype() == DType::BF16 && q.ndim() == 3 &&
                q.size(2) == kMlaKvDim && q.stride(2) == 1 && q.stride(0) % 8 == 0 && q.stride(1) % 8 == 0 &&
                aligned(q.raw(), 16),
            "mla_decode q: expected a device BF16 [T, H, {}] with 16-byte aligned rows, got {}", kMlaKvDim,
            q.defined() ? q.describe() : "nothing");
  int64_t T = q.size(0), H = q.size(1);
  const bool fp8 = check_kv_scale(cache.defined() ? cache.dtype() : DType::BF16, kv_scale, "mla_decode");
  MLA_CHECK(cache.defined() && cache.device() == Device::CUDA &&
                (cache.dtype() == DType::BF16 || cache.dtype() == DType::F8_E4M3) && cache.ndim() == 2 &&
                cache.size(1) == kMlaKvDim && cache.is_contiguous() && aligned(cache.raw(), 16),
            "mla_decode cache: expected a contiguous device BF16 or F8_E4M3 [num_slots, {}], got {}", kMlaKvDim,
            cache.defined() ? cache.describe() : "nothing");
  MLA_CHECK(out.defined() && out.device() == Device::CUDA && out.dtype() == DType::BF16 && out.ndim() == 3 &&
                out.size(0) == T && out.size(1) == H && out.size(2) == kMlaLatentDim && out.stride(2) == 1 &&
                out.stride(0) % 2 == 0 && out.stride(1) % 2 == 0 && aligned(out.raw(), 4),
            "mla_decode out: expected a device BF16 [{}, {}, {}], got {}", T, H, kMlaLatentDim,
            out.defined() ? out.describe() : "nothing");
  int64_t S = md.num_seqs;
  MLA_CHECK(S >= 0 && (S > 0 || T == 0), "mla_decode: {} query tokens in {} seqs", T, S);
  check_i32_dev(md.seq_lens, S, "seq_lens");
  check_i32_dev(md.query_start, S + 1, "query_start");
  check_i32_dev(md.kv_start, S + 1, "kv_start");
  check_i32_dev(md.kv_indices, -1, "kv_indices");
  MLA_CHECK(T * std::max<int64_t>(H, 1) < (int64_t(1) << 31) && md.kv_indices.numel() < (int64_t(1) << 31),
            "mla_decode: batch too large for 32-bit row indices");
  MlaDecodeParams p{};
  p.q = q.raw(), p.q_stride_t = q.stride(0), p.q_stride_h = q.stride(1);
  p.cache = cache.raw();
  p.cache_fp8 = fp8;
  p.kv_scale = kv_scale;
  p.cache_tma = md.kv_page_size % kMlaBlockKeys == 0 && !plan.force_cp_async;
  if (p.cache_tma && !fp8) plan.set_cache_maps(p, cache.size(0));
  p.q_tma = !fp8 && T > 0 && H > 0 && q.stride(1) == kMlaKvDim && q.stride(0) == H * kMlaKvDim;
  if (p.q_tma) plan.set_q_maps(p, T * H);
  p.cache_rows = cache.size(0);
  p.kv_indices = md.kv_indices.data<int32_t>();
  p.kv_start = md.kv_start.data<int32_t>();
  p.seq_lens = md.seq_lens.data<int32_t>();
  p.query_start = md.query_start.data<int32_t>();
  p.out = out.raw(), p.out_stride_t = out.stride(0), p.out_stride_h = out.stride(1);
  p.num_seqs = int(S), p.num_heads = int(H);
  p.scale = scale;
  return p;
}

}  // namespace

void CudaBackend::mla_decode(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                             float scale, Tensor& out) {
  MlaDecodePlan& plan = mla_decode_plan();
  const MlaDecodeParams p = mla_decode_params(q, cache, kv_scale, md, scale, out, plan);
  if (q.size(0) == 0) return;
  plan.plan(p, q.size(0), md.batch_id, stream_);
  plan.run(p, stream_);
}

void CudaBackend::mla_decode_absorb_out(const Tensor& q, const Tensor& cache, float kv_scale,
                                        const AttentionMetadata& md, float scale, const Tensor& w_uv,
                                        Tensor& o_latent, Tensor& out) {
  MlaDecodePlan& plan = mla_decode_plan();
  const MlaDecodeParams p = mla_decode_params(q, cache, kv_scale, md, scale, o_latent, plan);
  const MlaAbsorbOutParams a = mla_absorb_out_params(o_latent, w_uv, out);
  if (q.size(0) == 0) return;
  MlaAbsorbRunner& absorb = mla_absorb();
  plan.plan(p, q.size(0), md.batch_id, stream_);
  // A few tokens' projection merges the split rows itself: the combine's launch and its round trip
  // through o_latent leave the chain of dependent kernels.
  const bool merge = merge_splits_in_absorb_out && absorb.few_token_kernels && mla_absorb_out_merge_fits(a);
  plan.run(p, stream_, /*combine=*/!merge);
  if (merge)
    launch_mla_absorb_out_merge(a, p, plan.schedule(), stream_);
  else
    absorb.absorb_out(a, stream_);
}

}  // namespace mlaserve::cuda
