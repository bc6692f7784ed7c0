// MLA prefill attention in MHA form (flash-attention style, tensor cores): per head, queries of
// 192 = nope 128 + rope 64 against keys [k_nope (per head), k_pe (shared by all heads)], values
// of 128. Varlen batch, causal with a cached prefix: query i of seq s (n_s queries, seq_len
// tokens) sits at position seq_len - n_s + i and sees keys [0, position].
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

constexpr int kMlaNope = 128, kMlaRope = 64, kMlaV = 128;

struct MlaPrefillParams {
  const void* q;     // [T, H, nope + rope] BF16, strides (q_st0, q_st1, 1)
  const void* kv;    // [S, H, nope + v] BF16, strides (kv_st0, kv_st1, 1): k_nope then v per head
  const void* k_pe;  // [S, rope] BF16, row stride kpe_st0 (a view of the gathered latent, 576)
  void* out;         // [T, H, v] BF16, strides (o_st0, o_st1, 1)
  const int32_t* query_start;  // [num_seqs + 1] device: each seq's first query row in T
  const int32_t* kv_start;     // [num_seqs + 1] device: each seq's first key row in S
  const int32_t* seq_lens;     // [num_seqs] device: keys of each seq (prefix + new)
  int64_t q_st0, q_st1, kv_st0, kv_st1, kpe_st0, o_st0, o_st1;  // in elements, multiples of 8
  int num_seqs, num_heads;
  int max_queries;  // upper bound on any seq's query count (sizes the grid)
  float scale;      // softmax scale applied to q·k
  int config = 0;   // tile configuration, 0 = default; see mla_prefill_num_configs()
};

// Number of tile configurations (for benchmarks) and the name of one.
int mla_prefill_num_configs();
const char* mla_prefill_config_name(int config);

void launch_mla_prefill(const MlaPrefillParams& p, cudaStream_t stream);

// The warp-specialized wgmma kernel (mla_prefill_wgmma.cu), configs "wgmma ...".
void launch_mla_prefill_wgmma(const MlaPrefillParams& p, bool ping_pong, cudaStream_t stream);

}  // namespace mlaserve::cuda
