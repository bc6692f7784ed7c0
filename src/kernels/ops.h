// The one interface the model calls. A Backend implements every op for one device; the CPU
// backend (kernels/cpu) is the plain fp32 reference that tests compare the CUDA one against.
//
// Conventions: activations are 2-D or 3-D tensors whose last dim is contiguous and whose rows may
// be strided (narrow() views); shapes are checked at the op boundary; outputs are preallocated by
// the caller with Backend::empty. Index tensors are I32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/tensor.h"
#include "kernels/gemm_tuning.h"
#include "kernels/moe_tuning.h"
#include "kernels/linear_weight.h"
#include "kernels/moe_params.h"

namespace mlaserve {

// Where each sequence of a batch keeps its tokens' latents in the KV pool, and which of its
// tokens are queries in this forward. Sequences are laid out one after another.
struct AttentionMetadata {
  int32_t num_seqs = 0;
  Tensor seq_lens;      // [num_seqs] I32: tokens in the cache after this forward (prefix + new)
  Tensor query_start;   // [num_seqs + 1] I32: offsets of each seq's query tokens in the token dim
  Tensor kv_start;      // [num_seqs + 1] I32: offsets of each seq's slots in kv_indices
  // [sum(seq_lens)] I32: cache slot of every token of every seq, in order. The absorbed form
  // (mla_decode) also takes a longer buffer and ignores what follows kv_start[num_seqs] (the
  // fixed-size buffers of CUDA graphs).
  Tensor kv_indices;
  int32_t max_seq_len = 0;
  // Set by whoever builds the batch: a fresh nonzero value whenever seq_lens / query_start change,
  // so a backend may compute its attention plan once per batch and reuse it in every layer
  // (0: plan at every call).
  int64_t batch_id = 0;
  // How the slots of a seq are laid out: keys [k P, (k + 1) P) of every seq sit in P consecutive
  // slots (P = kv_page_size; 1 says nothing). A backend may then read a run of keys as one block.
  int32_t kv_page_size = 1;
  // Query i of seq s (of n_s queries) sits at position seq_len - n_s + i and sees keys [0, pos].
};

// YaRN / plain rotary: angle of pair i at position p is p * inv_freq[i]; cos and sin are
// multiplied by mscale. Pairs are interleaved (x[2i], x[2i+1]) as in DeepSeek's checkpoints.
struct RopeTable {
  Tensor inv_freq;  // [rope_dim / 2] F32
  float mscale = 1.0f;
};

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = -1;        // -1: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;   // with `step`, makes each draw reproducible
  uint64_t step = 0;   // index of the token being drawn
};

// An activation quantized for FP8 W8A8 linears, as quantize_fp8_per_token_group makes it: q [T, K]
// F8_E4M3 and scales [T, ceil(K / group)] F32, with the strides of Backend::empty_fp8_activation
// (a backend lays them out as its GEMMs read them).
struct Fp8Activation {
  Tensor q, scales;
  int64_t group = 128;
  bool defined() const { return q.defined(); }
};

// One recorded sequence of a backend's ops (Backend::capture), replayed as one launch.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
  virtual void replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual const char* name() const = 0;
  // Activation dtype this backend computes in (F32 on the CPU).
  virtual DType activation_dtype() const = 0;
  virtual Tensor empty(DType dtype, Shape shape) = 0;
  // Moving data in and out. A host tensor becomes one this backend's ops take: the CPU keeps it;
  // the CUDA backend copies it to the device, float matrices as BF16 (1-D F32 vectors such as
  // norms, biases and frequencies stay F32; index tensors keep their type).
  virtual Tensor to_backend(const Tensor& host) { return host; }
  // A linear layer's weight as this backend's linear op takes it (CUDA: FP8 blocks stay FP8 where
  // its GEMMs take them, else they are dequantized to BF16).
  virtual LinearWeight to_backend(const LinearWeight& w) { return w; }
  // A host copy (the CPU returns the tensor itself).
  virtual Tensor to_host(const Tensor& t) { return t; }
  // A host copy of a linear weight (dummy weights may have been made on the device): its rows and
  // FP8 block scales, without the pad rows a backend added.
  LinearWeight host_copy(const LinearWeight& w) {
    LinearWeight h = w;
    h.weight = to_host(w.weight);
    h.pad_rows = 0;
    if (w.is_fp8_block()) h.scale_inv = to_host(w.scale_inv);
    return h;
  }
  virtual void synchronize() {}
  // Makes the calling thread able to run this backend's ops (CUDA: selects its device).
  virtual void bind_thread() {}
  // Device memory for the memory plan: bytes free (blocks this backend caches count as free) and
  // in all. The CPU has no device memory of its own: false.
  virtual bool memory_info(uint64_t& free, uint64_t& total) { return false; }
  // t[i] = mean + stddev * normal01(stream, i) over the flat index i of a contiguous F32, BF16 or
  // F16 tensor of this backend (rounded to nearest even): the dummy weights, made where they are
  // used. false: not done here (the CPU, whose host path is this very loop); t is left untouched.
  virtual bool fill_normal(Tensor& t, uint64_t stream, float mean, float stddev) { return false; }
  // w [N, K], a matrix of this backend, quantized to e4m3 in block_n x block_k blocks with the
  // codes and scales of the host's quantize_fp8_blocks (weights/fp8_block_quant.h), into a weight
  // to_backend keeps as it is: --quantization fp8 of dummy weights made here. false: not done here.
  virtual bool quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k, LinearWeight& out) {
    return false;
  }

  // Copies a host tensor into `dst`, a backend tensor of the same dtype and element count, in
  // the order of this backend's work (the host tensor may be dropped right after the call).
  virtual void copy_from_host(const Tensor& host, Tensor& dst);
  // A host tensor to fill and hand to copy_from_host: where uploads are staged in pinned memory
  // (CUDA), that is where it lives, so the upload makes no second host copy. It stays valid until
  // the next call of either member.
  virtual Tensor upload_buffer(DType dtype, Shape shape) { return Tensor::empty(dtype, std::move(shape)); }

  // Graphs (CUDA graphs): the ops `work` calls are recorded, not run, and the graph replays them
  // with the same arguments, reading whatever the tensors they were given hold at replay time.
  // Tensors allocated while capturing come from a pool kept for graphs, so they stay valid for
  // every replay; graphs share that pool and must replay one at a time. If `work` throws, nothing
  // is kept and the exception passes on.
  virtual bool supports_graphs() const { return false; }
  virtual std::unique_ptr<BackendGraph> capture(const std::function<void()>& work);
  // Device bytes held by the graph pool (for the memory plan's log).
  virtual uint64_t graph_pool_bytes() const { return 0; }

  // Tuned kernel choices (kernels/gemm_tuning.h). device_name() names the tuning file of this
  // backend's device ("": nothing here is tuned); set_fp8_gemm_tuning gives the table the FP8
  // linear follows where it has an entry. tune_fp8_gemm times every kernel this backend has for
  // the FP8 W8A8 linear on each (N, K) weight at each token count and returns the fastest, checked
  // against the reference kernel; `progress` gets a line per measurement.
  virtual std::string device_name() const { return ""; }
  virtual void set_fp8_gemm_tuning(Fp8GemmTuning tuning) {}
  virtual Fp8GemmTuning tune_fp8_gemm(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                      const std::vector<int64_t>& tokens,
                                      const std::function<void(const std::string&)>& progress);

  // The FP8 fused MoE's tuned launches (kernels/moe_tuning.h): set_moe_tuning gives the table its
  // grouped expert GEMMs follow; tune_moe times every launch this backend has for both GEMMs of
  // each case (FP8 experts, random weights and even routing; the whole layer timed, as a CUDA graph
  // replays it) and returns the fastest, each checked against the planned launch's output.
  virtual void set_moe_tuning(MoeTuning tuning) {}
  virtual MoeTuning tune_moe(const std::vector<MoeTuneCase>& cases,
                             const std::function<void(const std::string&)>& progress);

  // Rank and world size of this backend's tensor-parallel group (1 GPU: 0 and 1).
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }

  // out[t] = table[ids[t]]. ids [T], table [V, H], out [T, H].
  virtual void embedding(const Tensor& ids, const Tensor& table, Tensor& out) = 0;
  // out = x / rms(x) * w. x, out [T, D]; w [D].
  virtual void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) = 0;
  // residual += x; out = rmsnorm(residual). x, residual, out [T, D].
  virtual void add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) = 0;
  // out = x · W^T. x [T, K], out [T, N]; W any weight dtype (FP8 blocks dequantized on the fly).
  virtual void linear(const Tensor& x, const LinearWeight& w, Tensor& out) = 0;
  // A block's first linear with its input's normalization: n = rmsnorm(x) (residual null) or
  // add_rmsnorm (residual given: it ends holding x + residual, possibly in a buffer it is rebound
  // to), then out = n · W^T. n goes to *normed where given (later linears read it), else it may never
  // exist: a backend may fold the norm into the GEMM. The default runs the ops in turn
  // (backend_fused.cc).
  virtual void rmsnorm_linear(const Tensor& x, Tensor* residual, const Tensor& norm, float eps, Tensor* normed,
                              const LinearWeight& w, Tensor& out);

  // FP8 W8A8, as FP8 checkpoints are meant to run (callers go through apply_linear below). A
  // backend without it leaves supports_fp8_w8a8() false and keeps FP8 weights in another form.
  virtual bool supports_fp8_w8a8() const { return false; }
  // Per-token-group activation quantization: for row t and group g of `group` channels,
  // s = max(amax, 1e-10) / 448 and q = e4m3(x / s), saturating, rounded to nearest even.
  //   x [T, K] activation dtype; q [T, K] F8_E4M3; scales [T, ceil(K / group)] F32.
  virtual void quantize_fp8_per_token_group(const Tensor& x, int64_t group, Tensor& q, Tensor& scales);
  // out[t, n] = sum over K-blocks b of (q[t, b] · W[n, b]) * scales[t, b] * scale_inv[n / block_n, b]:
  // each block's dot product in fp32, scaled, summed in fp32. q and scales come from
  // quantize_fp8_per_token_group with group = w.block_k; W is F8_E4M3 with block scales; out [T, N].
  virtual void linear_fp8_w8a8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out);
  // Both of the above from the activation x [T, K]. The default runs them in turn; a backend whose
  // GEMM wants the activation in another layout quantizes straight into it.
  virtual void linear_w8a8(const Tensor& x, const LinearWeight& w, Tensor& out);
  // Whether a W8A8 linear of T tokens on w is better fed its input quantized by the producer
  // (below) than as BF16 rows: true where the backend would quantize in a launch of its own.
  virtual bool wants_fp8_input(int64_t T, const LinearWeight& w) const { return true; }
  // An uninitialized Fp8Activation of T x K in groups of `group`, for the fused producers below and
  // linear_fp8_w8a8 (default: contiguous q and scales).
  virtual Fp8Activation empty_fp8_activation(int64_t T, int64_t K, int64_t group);
  // The producers of a linear's input, with the input also quantized for FP8 W8A8 (saves a pass
  // over the activation and a launch where fused): rmsnorm (residual null) or add_rmsnorm
  // (residual given), and silu_and_mul; then fp8 = quantize_fp8_per_token_group(out, fp8.group).
  // out may be undefined where only the quantized form is wanted. The defaults run the ops in turn.
  virtual void rmsnorm_fp8(const Tensor& x, Tensor* residual, const Tensor& w, float eps, Tensor& out,
                           Fp8Activation& fp8);
  virtual void silu_and_mul_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Activation& fp8);
  // out = silu(x[:, :I]) * x[:, I:]. x [T, 2I] (or gate and up given apart), out [T, I].
  virtual void silu_and_mul(const Tensor& gate, const Tensor& up, Tensor& out) = 0;
  // x += y. [T, D].
  virtual void add(Tensor& x, const Tensor& y) = 0;
  // Rotates x[t, h, :] pairwise in place. x [T, heads, rope_dim] (a narrow() view), positions [T].
  virtual void rope(Tensor& x, const Tensor& positions, const RopeTable& table) = 0;

  // Latent KV cache: cache[slots[t]] = latent[t] / kv_scale. latent [T, kv_dim], cache
  // [num_slots, kv_dim] in the pool's dtype (FP8 rows round and saturate). kv_scale is the layer's
  // cache scale (1 unless a checkpoint gives one); every op that reads the cache multiplies it back.
  virtual void kv_store(const Tensor& latent, const Tensor& slots, Tensor& cache, float kv_scale) = 0;
  // What MLA does to the new tokens between the projections and attention, as one op: the
  // latent's first kv_lora columns become rmsnorm(them) * norm, its last rope columns (k_pe) and
  // q_pe are rotated in place, then kv_store(latent, slots, cache, kv_scale). latent [T, kv_lora +
  // rope], q_pe [T, H, rope]. The default runs those ops in turn (backend_fused.cc); a backend may
  // do it in one pass a token.
  virtual void mla_norm_rope_store(Tensor& latent, Tensor& q_pe, const Tensor& norm, float eps,
                                   const Tensor& positions, const RopeTable& rope, const Tensor& slots, Tensor& cache,
                                   float kv_scale);
  // out[i] = cache[indices[i]] * kv_scale. indices [S], out [S, kv_dim] F32/activation dtype.
  virtual void kv_gather(const Tensor& cache, float kv_scale, const Tensor& indices, Tensor& out) = 0;
  // MLA in MHA form (prefill): keys and values decompressed per head.
  //   q [T, H, nope + rope]; kv [S, H, nope + v] (kv_b of the context, rows by kv_start);
  //   k_pe [S, rope] (shared by all heads); out [T, H, v]. Causal, with the cached prefix.
  virtual void mla_prefill(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const AttentionMetadata& md,
                           float scale, Tensor& out) = 0;
  // MLA in absorbed form: queries in latent space attend over the cache directly.
  //   q [T, H, kv_lora + rope]; cache [num_slots, kv_lora + rope] holding latent / kv_scale (see
  //   kv_store); scale: the softmax scale; out [T, H, kv_lora].
  virtual void mla_decode(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                          float scale, Tensor& out) = 0;
  // q_latent[t, h, :kv_lora] = q_nope[t, h] · w_uk[h]; q_latent[t, h, kv_lora:] = q_pe[t, h].
  //   q_nope [T, H, nope], q_pe [T, H, rope], w_uk [H, nope, kv_lora], q_latent [T, H, kv_lora + rope].
  virtual void mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) = 0;
  // out[t, h] = w_uv[h] · latent[t, h]. latent [T, H, kv_lora], w_uv [H, v, kv_lora], out [T, H, v].
  virtual void mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) = 0;
  // mla_decode(q, ..., o_latent) then mla_absorb_out(o_latent, w_uv, out), as one op so that a
  // backend may merge a split attention's partials inside the projection. The default runs the two
  // ops (backend_fused.cc).
  virtual void mla_decode_absorb_out(const Tensor& q, const Tensor& cache, float kv_scale,
                                     const AttentionMetadata& md, float scale, const Tensor& w_uv, Tensor& o_latent,
                                     Tensor& out);
  // The same products with FP8 weights (the FP8 BMM): W8A8 as apply_linear runs an FP8 linear, one
  // linear a head, each head's input quantized per token per w.block_k channels. The weights are a
  // block-scaled FP8 kv_b_proj's own e4m3 blocks, cut by head (no block straddles two heads):
  //   w_uk_t [H * kv_lora, nope]: W_UK[h]^T stacked by head, so q_latent[t, h, :kv_lora] =
  //   q_nope[t, h] · w_uk_t[h]^T, and q_latent[t, h, kv_lora:] = q_pe[t, h];
  //   w_uv [H * v, kv_lora]: out[t, h] = latent[t, h] · w_uv[h]^T.
  // Backends with supports_fp8_w8a8() have them.
  virtual void mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                                 Tensor& q_latent);
  virtual void mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out);

  // Router: logits [T, E] F32 (and the V3 correction bias [E] or undefined) -> ids [T, s] I32,
  // weights [T, s] F32 (scaled by routed_scaling_factor), s = routing.slots(): the top_k routed
  // experts, then the num_fused_shared shared ones (ids E, E + 1, ..., weight 1).
  virtual void moe_route(const Tensor& logits, const Tensor& bias, const MoeRouting& routing, Tensor& ids,
                         Tensor& weights) = 0;
  // out[t] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]). x, out [T, H].
  virtual void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const std::vector<GatedMlpWeights>& experts, Tensor& out) = 0;
  // moe_route then moe_experts on the ids and weights it wrote (which it still writes). The default
  // runs those ops in turn (backend_fused.cc); the CUDA backend routes inside the expert kernels at
  // one token, so that no launch stands between the router and the experts.
  virtual void moe_route_experts(const Tensor& logits, const Tensor& bias, const MoeRouting& routing,
                                 const Tensor& x, const std::vector<GatedMlpWeights>& experts, Tensor& ids,
                                 Tensor& weights, Tensor& out);
  // Rearranges the weights of experts [0, count) into the layout this backend's moe_experts reads
  // fastest (the CUDA backend: FP8 ones block by block, LinearWeight::tiled). Only moe_experts
  // reads them afterwards; the model leaves out the shared chunks, which also run as dense MLPs.
  // A list this backend's expert kernels cannot run in FP8 (the CUDA backend: a ragged block) is
  // made BF16 whole, the chunks too.
  virtual void pack_moe_experts(std::vector<GatedMlpWeights>& experts, size_t count) {}
  // The most experts one moe_experts call takes: the model fuses the shared experts into the
  // routed ones only where routed + shared fit.
  virtual int64_t max_moe_experts() const { return INT32_MAX; }

  // One token per row of logits [B, V] (F32); out [B] I32.
  virtual void sample(const Tensor& logits, const std::vector<SamplingParams>& params, Tensor& out) = 0;

  // Sum over the tensor-parallel group (identity on one device).
  virtual void all_reduce(Tensor& x) {}
};

// out = x · W^T as the weight is meant to run: FP8 block weights as W8A8 (activations quantized per
// token per w.block_k channels) where the backend supports it, everything else by Backend::linear.
void apply_linear(Backend& ops, const Tensor& x, const LinearWeight& w, Tensor& out);
// Whether apply_linear runs w as FP8 W8A8 on this backend (so its input may come quantized).
bool runs_w8a8(const Backend& ops, const LinearWeight& w);
// apply_linear of an input that may already be quantized: xq where defined and w runs as W8A8,
// else x (which must then be defined).
void apply_linear(Backend& ops, const Tensor& x, const Fp8Activation& xq, const LinearWeight& w, Tensor& out);

std::unique_ptr<Backend> make_cpu_backend();
// "cpu" or "cuda" (the latter only in builds with CUDA); an unknown name is an Error.
std::unique_ptr<Backend> make_backend(const std::string& device);
// Gives a backend with a device_name() the tuned configs of its device from
// tuning_dir(tuning_dir_flag), where that folder has them; a file there that cannot be read is an
// Error (refused at start, not ignored).
void load_tuned_configs(Backend& backend, const std::string& tuning_dir_flag);

}  // namespace mlaserve
