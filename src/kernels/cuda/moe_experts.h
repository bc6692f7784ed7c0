// Routed experts on the device: out[t] = sum_j weights[t, j] * expert_{ids[t, j]}(x[t]).
//
// Two paths, chosen per call by MoeRunner (moe_experts.cc):
//  - decode (few tokens): two weight-streaming kernels over the touched experts only, each
//    expert's rows read once for all of its tokens (gate/up + SiLU fused, then down), and a
//    deterministic combine per token in slot order. No host sync, so it can be graph-captured.
//  - sorted (more tokens): an on-device counting sort of the (token, slot) pairs by expert, a
//    gather of the rows, the expert GEMMs, SiLU-and-mul, and the same combine through the pair ->
//    sorted position map. The GEMMs are two grouped launches (moe_grouped_gemm.h) that read the
//    per-expert row counts on the device, so decode batches of any size can be graph-captured;
//    shapes the grouped GEMM does not take (or `grouped_gemm` off) use cuBLASLt GEMMs per expert,
//    spread over a few streams, after a host sync for the counts.
// FP8 experts (e4m3 with 128 x 128 block scales) always take the sorted path, through the FP8
// grouped GEMM (moe_grouped_gemm_fp8.h). Expert weights are read through device arrays of
// per-expert pointers (no stacked copy).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/cuda/moe_grouped_gemm_fp8.h"
#include "kernels/cuda/moe_route.h"

namespace mlaserve {
class MoeTuning;
}

namespace mlaserve::cuda {

class GemmRunner;

struct MoeDecodeParams {
  const void* x;  // [T, H] BF16, row stride x_ld
  int64_t x_ld;
  const int32_t* ids;  // [T, k] contiguous (pair p = t * k + j)
  const void* const* gate;  // [E] device pointers to [I, H] BF16 (contiguous rows)
  const void* const* up;    // [E] -> [I, H]
  const void* const* down;  // [E] -> [H, I]
  void* act;  // [T * k, I] BF16 workspace: silu(gate x) * up x per pair
  float* y;   // [T * k, H] F32 workspace: down(act) per pair
  int32_t num_tokens, top_k, num_experts, hidden, inter;
};

// Most experts one call takes: routed ones plus the fused shared ones (V3 / R1: 256 + 1).
constexpr int kMoeMaxExperts = 512;

// Largest number of (token, slot) pairs the decode kernels take (their pair lists live in smem).
constexpr int kMoeDecodeMaxPairs = 1024;

// num_sms: the device's; at one token the grid keeps to the blocks resident at once.
// `route` (one token; moe_route_warp_fits): gate/up routes the token itself from the router's
// logits, with no route launch before it, and writes the ids and weights route names (p.ids).
void launch_moe_decode_gate_up(const MoeDecodeParams& p, cudaStream_t s, int num_sms,
                               const MoeRouteParams* route = nullptr);
void launch_moe_decode_down(const MoeDecodeParams& p, cudaStream_t s, int num_sms);
// At one token (and at most 32 slots): down and the combine in one launch (out [1, H] BF16; weights
// [k]). Same bits as launch_moe_decode_down then launch_moe_combine. `fits`: the shapes it takes and
// where it pays (its grid is one wave on the device's num_sms SMs). `route`: gate/up was launched
// with it just before, and this launch routes the token again rather than read what that wrote.
bool moe_decode_down_combine_fits(const MoeDecodeParams& p, int num_sms);
void launch_moe_decode_down_combine(const MoeDecodeParams& p, const float* weights, void* out, cudaStream_t s,
                                    const MoeRouteParams* route = nullptr);
// offsets [E + 1]: pairs of expert e sit at sorted positions [offsets[e], offsets[e+1]), in pair
// order; sorted_pairs [P]: the pair at each position; pair_pos [P]: the position of each pair.
// `scratch`: moe_align_scratch_ints device ints whose first kMoeAlignZeroedInts must be zero before
// the first launch on them (a grid barrier's counters; every launch leaves them zero again).
constexpr int kMoeAlignZeroedInts = 2;
// num_sms: the device's, which bounds the blocks of the one-launch sort (they must all be resident).
void launch_moe_align(const int32_t* ids, int32_t num_pairs, int32_t num_experts, int32_t* offsets,
                      int32_t* sorted_pairs, int32_t* pair_pos, cudaStream_t s, int32_t* scratch, int num_sms);
int64_t moe_align_scratch_ints(int32_t num_pairs, int32_t num_experts);
// xs[i] = x[sorted_pairs[i] / k] for i < P. x [T, H] (row stride x_ld), xs [P, H] BF16. With
// `routed` (a device count, offsets[E]), positions from it on are skipped.
void launch_moe_gather(const void* x, int64_t x_ld, const int32_t* sorted_pairs, int32_t num_pairs, int32_t top_k,
                       int32_t hidden, void* xs, cudaStream_t s, const int32_t* routed = nullptr);
// out[t] = bf16(sum_j weights[t, j] * y[pos(t * k + j)]) with fp32 sums in slot order.
// y [P, H] F32 or BF16 (y_f32); pair_pos [P] or nullptr for the identity; out [T, H] BF16.
void launch_moe_combine(const void* y, bool y_f32, const int32_t* pair_pos, const float* weights, int64_t w_ld,
                        int32_t num_tokens, int32_t top_k, int32_t hidden, void* out, int64_t out_ld, cudaStream_t s);

// A routing and the launch_moe_route threshold it runs with where it has a launch of its own.
struct MoeRoute {
  MoeRouteParams params;
  int64_t warp_per_token_from_scores;
};

// Host side of moe_experts: the per-expert pointer tables (cached per expert list), workspaces
// that only grow, and the side streams of the prefill path.
class MoeRunner {
 public:
  MoeRunner();
  ~MoeRunner();
  MoeRunner(const MoeRunner&) = delete;
  MoeRunner& operator=(const MoeRunner&) = delete;

  // Pointers of one layer's experts: gate[e], up[e], down[e] (device BF16 matrices, or e4m3 ones
  // with their F32 128 x 128 block scales in gate_scale[e], up_scale[e], down_scale[e]).
  struct Experts {
    const void* key;  // the caller's vector data pointer
    std::vector<const void*> gate, up, down;
    std::vector<const void*> gate_scale, up_scale, down_scale;  // FP8 experts only
    int64_t gate_up_scale_ld = 0, down_scale_ld = 0;              // their scales' row strides
    int32_t tiled = 0;  // FP8 experts [0, tiled) are stored block by block (LinearWeight::tiled)
    bool fp8() const { return !gate_scale.empty(); }
  };
  // x [T, H], ids [T, k], weights [T, k] (row stride w_ld), out [T, H]; all device pointers.
  // FP8 experts always take the sorted path through the FP8 grouped GEMM (graph-capturable; H and I
  // multiples of 128). For BF16 ones, decode kernels run when T * k <= decode_pair_limit(E) and the
  // rows are 16-byte aligned; they and the grouped GEMM can run inside a CUDA graph, the per-expert
  // GEMMs cannot.
  // With `route`, the routing that writes ids and weights runs here too: at one token on the decode
  // path inside the expert kernels (route_in_experts; no launch of its own between the router and
  // the experts), else as launch_moe_route first.
  void run(const Experts& experts, const void* x, int64_t x_ld, const int32_t* ids, const float* weights,
           int64_t w_ld, int32_t T, int32_t k, int32_t H, int32_t I, void* out, int64_t out_ld, GemmRunner& gemm,
           cudaStream_t stream, const MoeRoute* route = nullptr);

  // Whether this exact expert list (pointers and dims) was run before: the caller may skip
  // re-validating the weights.
  bool knows(const Experts& experts, int32_t H, int32_t I) const;

  // The decode kernels take at most this many pairs; -1: max(24, E / 8). With its 32-row tiles the
  // grouped GEMM streams the touched experts faster from 8 tokens on (H200, 2026-11-22, in graphs,
  // V2-Lite: 0.166 vs 0.222 ms a layer at 8 tokens, 0.229 vs 0.352 at 16; 0.122 vs 0.112 at 4).
  int decode_max_pairs = -1;
  // At one token, down and the combine in one launch where it pays (moe_decode_down_combine_fits);
  // off: two (tests compare the bits).
  bool fuse_one_token_down = true;
  // At one token on the decode path, a given routing runs inside the expert kernels (run's `route`);
  // off: its own launch first (tests compare the bits).
  bool route_in_experts = true;
  int decode_pair_limit(int num_experts) const {
    return decode_max_pairs >= 0 ? decode_max_pairs : std::max(24, num_experts / 8);
  }
  // Prefill through the grouped GEMM (no host sync, so graph-capturable); the per-expert cuBLASLt
  // path remains for shapes it does not take.
  bool grouped_gemm = true;
  int num_streams = 4;         // prefill: experts' GEMMs spread over this many streams
  // FP8 experts: the launches tune-moe measured (kernels/moe_tuning.h), keyed by the experts, the
  // GEMM's N and K and its rows (token-expert pairs); products it lacks run the planned launch
  // (plan_moe_grouped_gemm_fp8). A forced launch overrides both (tests, the tuner).
  std::shared_ptr<const MoeTuning> tuning;  // null: nothing tuned
  std::optional<MoeFp8Launch> fp8_gate_up_launch, fp8_down_launch;

 private:
  // The prefill path through the grouped GEMM (after the align); false if the shapes do not fit it.
  bool run_grouped(const void* const* dptr, int32_t E, const void* x, int64_t x_ld, const float* weights, int64_t w_ld,
                   int32_t T, int32_t k, int32_t H, int32_t I, const int32_t* offsets, const int32_t* sorted,
                   const int32_t* pos, void* out, int64_t out_ld, cudaStream_t stream);

  // FP8 experts (after the align, and x quantized per token per 128 channels into xq / x_scale
  // beside it): gate/up (split over K when few rows), SiLU-and-mul quantizing the activation, down,
  // combine.
  void run_fp8(const Experts& ex, const void* const* dptr, int32_t E, const void* x, int64_t x_ld,
               const float* weights, int64_t w_ld, int32_t T, int32_t k, int32_t H, int32_t I,
               const int32_t* offsets, const int32_t* sorted, const int32_t* pos, void* out, int64_t out_ld,
               cudaStream_t stream);

  // The launch of one FP8 product: forced, else tuned (when it fits p), else planned.
  MoeFp8Launch fp8_launch(const MoeFp8GemmParams& p, const std::optional<MoeFp8Launch>& forced,
                          bool allow_k_splits) const;

  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace mlaserve::cuda
