// MLA decode attention in absorbed form over the paged latent cache (mla_decode.cu).
//
// Every query head attends over the one shared latent KV head (576 = 512 c_kv + 64 k_pe wide), so a
// block takes many query rows at once (a row is one (query token, head) pair of one sequence) and
// reads each cache row once for all of them, on tensor cores (BF16, fp32 accumulation, online
// softmax in fp32; an FP8 cache is widened to BF16 in shared memory): jobs of 64 rows (128 heads,
// or several queries a seq) on Hopper warpgroup MMA (mla_decode_pairs.cu over a BF16 cache,
// mla_decode_wgmma.cu over an FP8 one), jobs of 16 rows (one query of a TP shard's 16 heads,
// memory-bound) on mma.sync m16n8k16 (mla_decode.cu). The work is
// split plan / run (mla_decode_plan.cu plans):
//   plan: a kernel reads seq_lens and query_start (on the device) and cuts the batch into jobs
//         (one sequence x up to 16 * m_tiles rows) of 64-key tiles, then hands every persistent
//         block (one per SM) an equal, contiguous run of tiles; a job cut between blocks leaves
//         fp32 partials that a combine kernel merges by their log-sum-exp. Where jobs are no more
//         than the blocks and about even (uniform lengths), each goes whole to a block instead,
//         and nothing is combined. Its prefix sums run in parallel (a few blocks of 512 threads,
//         each computing the whole plan and writing its share): a few microseconds for a decode
//         batch.
//   run:  the attention kernel and the combine kernel; their grids depend only on the batch's
//         shape (tokens, seqs, heads), never on its lengths, so a CUDA graph can replay them.
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <utility>

#include "kernels/cuda/growing_buffer.h"

namespace mlaserve::cuda {

constexpr int kMlaLatentDim = 512;  // c_kv: the value part of a cache row
constexpr int kMlaKvDim = 576;      // c_kv + k_pe
constexpr int kMlaBlockKeys = 64;   // keys per tile

struct MlaDecodeParams {
  const void* q;            // [T, H, 576] BF16, strides (q_stride_t, q_stride_h, 1) in elements
  int64_t q_stride_t, q_stride_h;
  // [num_slots, 576] contiguous: BF16, or e4m3 holding latent / kv_scale (cache_fp8). The kernels
  // stage e4m3 tiles in shared memory and widen them to BF16 there (exact), then run as for BF16.
  const void* cache;
  bool cache_fp8;
  float kv_scale;              // the cache's values times this are the latents (1 for BF16)
  // Caches whose seqs keep each 64-key tile in 64 consecutive slots (AttentionMetadata::
  // kv_page_size a multiple of 64): a BF16 tile comes as nine TMA boxes of 64 rows x 64 columns
  // through cache_map (the paired kernel takes blocks 0-3 and 4-7 through cache_map4), an e4m3 tile
  // (16-row jobs) as one bulk copy of its 64 rows (tma.cuh), instead of each thread copying 16-byte
  // pieces.
  bool cache_tma;
  CUtensorMap cache_map;   // a BF16 cache as [num_slots, 576], 64 x 64 boxes, 128-byte swizzle
  CUtensorMap cache_map4;  // the same, boxes of four 64-column blocks of 64 rows, block after block
  int64_t cache_rows;     // num_slots: bulk copies stop there
  // With a BF16 cache, where q's rows are contiguous ([T * H, 576]: a job's 64 rows are consecutive)
  // the paired kernel takes Q by the TMA, through maps of q as of the cache, in three copies each
  // with its own barrier, so that S starts on Q's first blocks as they land.
  bool q_tma;
  CUtensorMap q_map, q_map4;
  const int32_t* kv_indices;   // [sum(seq_lens)] cache slot of each token of each seq
  const int32_t* kv_start;     // [num_seqs + 1] offsets into kv_indices
  const int32_t* seq_lens;     // [num_seqs] keys in the cache per seq
  const int32_t* query_start;  // [num_seqs + 1] offsets of each seq's queries in T
  void* out;                // [T, H, 512] BF16, strides (out_stride_t, out_stride_h, 1)
  int64_t out_stride_t, out_stride_h;
  int num_seqs, num_heads;
  float scale;  // softmax scale of q·k
};

constexpr int kFirstTileInts = 16 + kMlaBlockKeys;  // a FirstTile (mla_decode_device.cuh)

// Device view of a plan's buffers (all written by the plan kernel).
struct MlaDecodeSchedule {
  int32_t* jobs;         // [max_jobs, 8]: seq, row0, num_rows, num_tiles, num_keys, first_cta, num_splits, split_offset
  // [num_ctas, 4] by blockIdx: first job, first tile in it, number of tiles, the CTA's index in the
  // plan's cut (Job::first_cta counts in it; the plan may launch a seq's jobs' CTAs side by side)
  int32_t* ctas;
  int32_t* num_jobs;     // [1]
  // [num_ctas] FirstTile records (mla_decode_device.cuh): what a 16-row attention CTA finds of its
  // first tile through four dependent loads (its run, its job, the job's seq, the keys' slots),
  // stored by the attention launch right after the plan kernel; later launches of the same plan
  // (plan_settled) read it in one.
  int32_t* first_tiles;
  float* partial_o;      // [max_partials, rows_per_job, 512]: normalized partial outputs
  float* partial_lse;    // [max_partials, rows_per_job]: log2-sum-exp2 of the scaled scores
  int max_jobs = 0, num_ctas = 0, m_tiles = 1;  // rows per job = 16 * m_tiles
  bool wgmma = true;  // 64-row jobs on warpgroup MMA rather than mma.sync
  bool pairs = true;  // BF16 caches: the paired kernel (mla_decode_pairs.cu) rather than the 2-stage one
  // The plan kernel ran before the kernel that precedes this launch (an earlier layer planned this
  // batch), so the attention kernel may read the plan before its PDL wait.
  bool plan_settled = false;
};

void launch_mla_decode_plan(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream);
// combine false: split jobs' partials stay unmerged (the few-token absorb_out merges them).
void launch_mla_decode_run(const MlaDecodeParams& p, const MlaDecodeSchedule& s, cudaStream_t stream,
                           bool combine = true);

// The persistent plan buffers of one backend, sized for the largest batch seen (they only grow,
// and graphs captured before a growth keep the buffers they saw).
class MlaDecodePlan {
 public:
  explicit MlaDecodePlan(int device);
  ~MlaDecodePlan();
  MlaDecodePlan(const MlaDecodePlan&) = delete;
  MlaDecodePlan& operator=(const MlaDecodePlan&) = delete;

  // Schedules the batch of `p` (T query tokens) with a kernel on `stream`, unless batch_id is
  // nonzero and names the batch planned last with the same shape and metadata tensors.
  void plan(const MlaDecodeParams& p, int64_t num_tokens, int64_t batch_id, cudaStream_t stream);
  // Launches attention (and, where `combine`, the combine) of the planned batch.
  void run(const MlaDecodeParams& p, cudaStream_t stream, bool combine = true) const;
  const MlaDecodeSchedule& schedule() const { return sched_; }

  int force_m_tiles = 0;  // tests: 1 or 4 fixes the rows per job; 0 picks by shape
  bool force_mma_sync = false;  // tests and benchmarks: 64-row jobs on the mma.sync kernel
  bool force_two_stage = false;  // tests and benchmarks: BF16 64-row jobs on the 2-stage wgmma kernel
  bool force_cp_async = false;   // tests and benchmarks: no TMA, whatever the page size
  // The TMA maps of a BF16 cache tensor (made once per tensor: one per layer) into p.
  void set_cache_maps(MlaDecodeParams& p, int64_t num_slots);
  // The same for q as [rows, 576] (rows = T * H), made once per q buffer and row count (a few kept).
  void set_q_maps(MlaDecodeParams& p, int64_t rows);
  int planned_ctas() const { return sched_.num_ctas; }
  int planned_rows_per_job() const { return 16 * sched_.m_tiles; }

 private:
  void reserve(int64_t max_jobs, int64_t partial_rows);

  int num_sms_ = 0;
  MlaDecodeSchedule sched_{};
  GrowingBuffer plan_buf_;  // jobs, ctas and num_jobs in one allocation
  GrowingBuffer partial_buf_;
  int64_t cap_jobs_ = 0, cap_partial_rows_ = 0;
  // What the last plan was made for.
  int64_t batch_id_ = 0, tokens_ = -1, seqs_ = -1, heads_ = -1;
  const void* seq_lens_ = nullptr;
  const void* query_start_ = nullptr;
  // A [rows, 576] BF16 tensor's maps: 64 x 64 boxes, and boxes of four 64-column blocks.
  struct RowMaps {
    int64_t rows;
    CUtensorMap one_block, four_blocks;
  };
  const RowMaps& row_maps(std::unordered_map<const void*, RowMaps>& maps, const void* base, int64_t rows);
  std::unordered_map<const void*, RowMaps> cache_maps_, q_maps_;
};

}  // namespace mlaserve::cuda
