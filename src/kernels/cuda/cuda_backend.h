// The CUDA backend: BF16 activations, fp32 accumulation, one stream. Each op's kernels live in
// their own files (elementwise.cu, gemm_runner, mla_*.cu, moe_*.cu, sampling.cu) and the member
// that checks and launches them in cuda_backend[_<op>].cc.
#pragma once

#include <map>
#include <optional>
#include <tuple>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_route.h"
#include "kernels/cuda/skinny_gemm_fp8.h"
#include "kernels/ops.h"

namespace mlaserve::cuda {

struct MlaPrefillParams;
// The prefill kernel's parameters for the op's arguments, after checking them (used by the op and
// by tests that launch each tile configuration).
MlaPrefillParams mla_prefill_params(const Tensor& q, const Tensor& kv, const Tensor& k_pe,
                                    const AttentionMetadata& md, float scale, Tensor& out);

struct MlaAbsorbOutParams;
// mla_absorb_out's kernel parameters for its arguments, after checking them.
MlaAbsorbOutParams mla_absorb_out_params(const Tensor& latent, const Tensor& w_uv, Tensor& out);

class GemmRunner;
class DeviceAllocator;
class MoeRunner;
struct MoeRoute;
class SamplerState;
class MlaDecodePlan;
class MlaAbsorbRunner;

class CudaBackend final : public Backend {
 public:
  // Split-K arrival counters of the skinny GEMMs, one a row block, all zero between launches: a
  // split launch may have at most this many CTAs a split.
  static constexpr int64_t kSkinnyCounters = 4096;
  explicit CudaBackend(int device = 0);
  ~CudaBackend() override;

  Device device() const override { return Device::CUDA; }
  const char* name() const override { return "cuda"; }
  DType activation_dtype() const override { return DType::BF16; }
  Tensor empty(DType dtype, Shape shape) override;
  cudaStream_t stream() const { return stream_; }
  void synchronize() override;
  bool memory_info(uint64_t& free, uint64_t& total) override;
  bool fill_normal(Tensor& t, uint64_t stream, float mean, float stddev) override;  // cuda_backend_fill.cc
  void bind_thread() override { CUDA_CHECK(cudaSetDevice(device_)); }

  void copy_from_host(const Tensor& host, Tensor& dst) override;  // cuda_backend_graphs.cc
  Tensor upload_buffer(DType dtype, Shape shape) override;         // cuda_backend_graphs.cc
  bool supports_graphs() const override { return true; }
  std::unique_ptr<BackendGraph> capture(const std::function<void()>& work) override;
  uint64_t graph_pool_bytes() const override;

  // Host <-> device copies of whole tensors, dtype kept.
  Tensor to_device(const Tensor& host);
  Tensor to_host(const Tensor& device) override;
  Tensor to_backend(const Tensor& host) override;
  // cuda_backend_fp8.cc: FP8 blocks stay FP8, their scales in rows of fp8_scale_row_stride floats.
  LinearWeight to_backend(const LinearWeight& w) override;
  static int64_t fp8_scale_row_stride(int64_t k_blocks) { return (k_blocks + 3) / 4 * 4; }
  bool quantize_fp8_blocks(const Tensor& w, int64_t block_n, int64_t block_k, LinearWeight& out) override;

  void embedding(const Tensor& ids, const Tensor& table, Tensor& out) override;
  void rmsnorm(const Tensor& x, const Tensor& w, float eps, Tensor& out) override;
  void add_rmsnorm(const Tensor& x, Tensor& residual, const Tensor& w, float eps, Tensor& out) override;
  void linear(const Tensor& x, const LinearWeight& w, Tensor& out) override;
  // One row (decode at batch 1) into a BF16 weight that skinny_norm_fits: the norm folded into the
  // skinny GEMM (SkinnyNorm), the residual sum into a new buffer. Else the ops in turn.
  void rmsnorm_linear(const Tensor& x, Tensor* residual, const Tensor& norm, float eps, Tensor* normed,
                      const LinearWeight& w, Tensor& out) override;
  // Tests and benchmarks: false runs rmsnorm_linear as the ops in turn.
  bool fold_norm_into_linear = true;
  bool supports_fp8_w8a8() const override { return true; }
  void quantize_fp8_per_token_group(const Tensor& x, int64_t group, Tensor& q, Tensor& scales) override;
  void linear_fp8_w8a8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out) override;
  void linear_w8a8(const Tensor& x, const LinearWeight& w, Tensor& out) override;
  // False where the skinny kernel would run on BF16 rows (it quantizes them as it reads them).
  bool wants_fp8_input(int64_t T, const LinearWeight& w) const override;
  // Codes in rows padded to cuBLASLt's 16 tokens and scales token-contiguous ([G, Tp] seen as
  // [T, G]), so linear_fp8_w8a8 hands them to the GEMM without a copy.
  Fp8Activation empty_fp8_activation(int64_t T, int64_t K, int64_t group) override;
  // One kernel each where the rows allow it (elementwise.cu), else the defaults.
  void rmsnorm_fp8(const Tensor& x, Tensor* residual, const Tensor& w, float eps, Tensor& out,
                   Fp8Activation& fp8) override;
  void silu_and_mul_fp8(const Tensor& gate, const Tensor& up, Tensor& out, Fp8Activation& fp8) override;
  // linear_w8a8 through one kernel (tests and the tuner; the op picks by the tuned table): the
  // skinny kernel with a given launch (T <= 16), or quantization and cuBLASLt's block-scaled GEMM in
  // configuration `lt` (nothing: the tuned table's, else the heuristic's; fp8_gemm_configs lists them).
  void linear_w8a8_skinny(const Tensor& x, const LinearWeight& w, Tensor& out, const SkinnyFp8Config& c);
  void linear_w8a8_cublaslt(const Tensor& x, const LinearWeight& w, Tensor& out,
                            const std::optional<CublasLtConfig>& lt = std::nullopt);
  // linear_fp8_w8a8 through one kernel: the skinny kernel with a given launch, or cuBLASLt.
  void linear_fp8_w8a8_skinny(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                              const SkinnyFp8Config& c);
  void linear_fp8_w8a8_cublaslt(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                                const std::optional<CublasLtConfig>& lt = std::nullopt);
  // ... or the warp-specialized kernel (fp8_gemm_wgmma.h), BF16 out; scales as empty_fp8_activation
  // lays them out.
  void linear_fp8_w8a8_wgmma(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out, int waves,
                             int group_m, int cluster);
  // The configurations cuBLASLt accepts for the block-scaled GEMM of T tokens by w, of all or of
  // `among` (CublasLt::configs).
  std::vector<CublasLtConfig> fp8_gemm_configs(int64_t T, const LinearWeight& w, bool out_f32,
                                               const std::vector<CublasLtConfig>* among = nullptr);
  std::string device_name() const override;
  void set_moe_tuning(MoeTuning tuning) override;                                     // cuda_backend_moe.cc
  MoeTuning tune_moe(const std::vector<MoeTuneCase>& cases,
                     const std::function<void(const std::string&)>& progress) override;  // cuda_backend_tune_moe.cc
  void set_fp8_gemm_tuning(Fp8GemmTuning tuning) override { fp8_tuning_ = std::move(tuning); }
  // cuda_backend_tune.cc
  Fp8GemmTuning tune_fp8_gemm(const std::vector<std::pair<int64_t, int64_t>>& shapes,
                              const std::vector<int64_t>& tokens,
                              const std::function<void(const std::string&)>& progress) override;
  void silu_and_mul(const Tensor& gate, const Tensor& up, Tensor& out) override;
  void add(Tensor& x, const Tensor& y) override;
  void rope(Tensor& x, const Tensor& positions, const RopeTable& table) override;
  // KV caches: BF16 (kv_scale 1) or F8_E4M3 holding latent / kv_scale.
  void kv_store(const Tensor& latent, const Tensor& slots, Tensor& cache, float kv_scale) override;
  void kv_gather(const Tensor& cache, float kv_scale, const Tensor& indices, Tensor& out) override;
  void mla_norm_rope_store(Tensor& latent, Tensor& q_pe, const Tensor& norm, float eps, const Tensor& positions,
                           const RopeTable& rope, const Tensor& slots, Tensor& cache, float kv_scale) override;
  void mla_prefill(const Tensor& q, const Tensor& kv, const Tensor& k_pe, const AttentionMetadata& md, float scale,
                   Tensor& out) override;
  void mla_decode(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md, float scale,
                  Tensor& out) override;
  // The mla_decode plan (tests force its tiling; graph runners plan the largest batch first).
  MlaDecodePlan& mla_decode_plan();
  void mla_decode_absorb_out(const Tensor& q, const Tensor& cache, float kv_scale, const AttentionMetadata& md,
                             float scale, const Tensor& w_uv, Tensor& o_latent, Tensor& out) override;
  // Tests and benchmarks: false keeps the combine kernel where the few-token projection would merge.
  bool merge_splits_in_absorb_out = true;
  void mla_absorb_q(const Tensor& q_nope, const Tensor& q_pe, const Tensor& w_uk, Tensor& q_latent) override;
  void mla_absorb_out(const Tensor& latent, const Tensor& w_uv, Tensor& out) override;
  // The FP8 BMM: the skinny FP8 kernel batched over heads (any token count, in tiles of 16).
  void mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t,
                         Tensor& q_latent) override;
  void mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out) override;
  // Those with a given launch of the kernel (tests, benchmarks); the ops take
  // skinny_gemm_fp8_default.
  void mla_absorb_q_w8a8(const Tensor& q_nope, const Tensor& q_pe, const LinearWeight& w_uk_t, Tensor& q_latent,
                         const SkinnyFp8Config& c);
  void mla_absorb_out_w8a8(const Tensor& latent, const LinearWeight& w_uv, Tensor& out, const SkinnyFp8Config& c);
  // The launches the ops take by default: x [T, H, K] through FP8 weights of H heads x N rows.
  SkinnyFp8Config absorb_fp8_default(int64_t T, int64_t H, int64_t N, int64_t K) const {
    return skinny_gemm_fp8_default(N, K, T, H, num_sms_);
  }
  // The skinny FP8 kernel's operands for x [T, ..., K] (rows x.stride(0) apart) times N rows of w
  // into out (nullptr: none yet), one batch.
  static SkinnyFp8Problem skinny_problem(const Tensor& x, const LinearWeight& w, const Tensor* out, int64_t N);
  void moe_route(const Tensor& logits, const Tensor& bias, const MoeRouting& routing, Tensor& ids,
                 Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const std::vector<GatedMlpWeights>& experts, Tensor& out) override;
  // At one token on the decode path the expert kernels route the token themselves.
  void moe_route_experts(const Tensor& logits, const Tensor& bias, const MoeRouting& routing, const Tensor& x,
                         const std::vector<GatedMlpWeights>& experts, Tensor& ids, Tensor& weights,
                         Tensor& out) override;
  int64_t max_moe_experts() const override;
  void pack_moe_experts(std::vector<GatedMlpWeights>& experts, size_t count) override;
  // The routed experts' runner (tests and benchmarks choose its paths).
  MoeRunner& moe_runner();
  int num_sms() const { return num_sms_; }
  // Scores (tokens x experts) from which moe_route runs a warp a token rather than a block (tests
  // and benchmarks set it).
  int64_t route_warp_per_token_from_scores = kRouteWarpPerTokenFromScores;
  void sample(const Tensor& logits, const std::vector<SamplingParams>& params, Tensor& out) override;

 private:
  // cuda_backend_moe.cc: moe_experts, with the routing that writes ids and weights (or nullptr).
  void run_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                       const std::vector<GatedMlpWeights>& experts, Tensor& out, const MoeRoute* route);
  // cuda_backend_fp8.cc
  void check_fp8_linear(int64_t T, const LinearWeight& w, const Tensor& out) const;
  // check_fp8_linear plus the codes and scales of linear_fp8_w8a8; their token count.
  int64_t check_fp8_codes_linear(const Tensor& q, const Tensor& scales, const LinearWeight& w,
                                 const Tensor& out) const;
  // linear_fp8_w8a8 past the skinny kernel (cuBLASLt, or the warp-specialized kernel where tuned so),
  // its operands checked already (check_fp8_codes_linear) and T > 0.
  void fp8_codes_gemm(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out,
                      const std::optional<CublasLtConfig>& lt);
  void fp8_block_gemm(const void* q, int64_t ldq, const Tensor& scales_t, const LinearWeight& w, Tensor& out,
                      const std::optional<CublasLtConfig>& lt);
  // fp8_block_gemm's operands on the warp-specialized kernel, into BF16 out; false where it does not fit.
  bool fp8_wgmma_gemm(const void* q, int64_t ldq, const Tensor& scales_t, const LinearWeight& w, Tensor& out,
                      int waves, int group_m, int cluster);
  // The skinny launch of a W8A8 linear (the tuned one, else the default) and whether it was tuned
  // from codes (Fp8GemmChoice::codes_in), or nothing where cuBLASLt runs it. from_rows: x comes as
  // BF16 rows whatever the table prefers (the entry's launch from rows).
  struct SkinnyFp8Pick {
    SkinnyFp8Config config;
    bool codes_in = false;
  };
  std::optional<SkinnyFp8Pick> skinny_fp8_choice(const SkinnyFp8Problem& p, bool from_rows) const;
  // The skinny problem of linear_fp8_w8a8 (x quantized already).
  SkinnyFp8Problem skinny_problem_fp8(const Tensor& q, const Tensor& scales, const LinearWeight& w, Tensor& out);

  int device_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<DeviceAllocator> allocator_;  // every empty(): freed blocks are reused
  std::unique_ptr<GemmRunner> gemm_;
  std::shared_ptr<MoeRunner> moe_;         // made on first use (cuda_backend_moe.cc)
  std::shared_ptr<SamplerState> sampler_;  // made on first use (cuda_backend_sampling.cc)
  // Split-KV schedule of mla_decode, made once per batch (md.batch_id) and reused by every layer.
  std::shared_ptr<MlaDecodePlan> mla_decode_plan_;
  MlaAbsorbRunner& mla_absorb();  // absorb_, made on first use
  std::shared_ptr<MlaAbsorbRunner> absorb_;
  int num_sms_ = 0;
  int* skinny_counters_ = nullptr;  // kSkinnyCounters of them
  Fp8GemmTuning fp8_tuning_;  // from tune-fp8-gemm's file for this device (backend_factory.cc)
  // Pinned staging of copy_from_host, reused once the event says its last copy is done.
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  cudaEvent_t staging_free_ = nullptr;
  // Waits until the staging buffer's last copy is done and makes it at least `bytes` long.
  void reserve_staging(size_t bytes);
};

}  // namespace mlaserve::cuda
