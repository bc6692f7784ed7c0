// Token sampling on the device, drawing exactly what CpuBackend::sample draws: greedy arg-max
// (lowest index on ties), or temperature, top-k, top-p, min-p over the logits in descending order
// (ties by index) and an inverse-CDF draw with uniform01(seed, step).
//
// Nothing is sorted: every quantity the reference reads off the sorted order (the k-th logit, the
// prefix reaching top_p of the mass, the token where the cumulative mass passes u * mass) is found
// by a descent through histograms of counts and probability mass. Masses are fixed point (2^-46
// units, the best token's weight is exp(0) = 2^46), so sums are exact and the draw deterministic,
// whatever the order of the additions.
//
// A row is one thread-block cluster (8 or 16 blocks, each a slice of the vocabulary); histograms
// are merged through distributed shared memory, so no scratch memory is needed. Passes over the
// row: its maximum; every weight, once, into a 2048-bin coarse histogram whose bins are equal
// steps of logit below the maximum (the bulk of a row spreads over many bins); and per descent
// (top-k, top-p, the draw) a pass that collects the elements of the one coarse bin it lands in.
// The blocks keep those (key, index, weight) for the radix levels over the key bits that vary
// within that bin, mostly one or two. A block whose share of the bin overflows its list goes over
// its slice again in each level instead, with the same result.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace mlaserve::cuda {

// One row's parameters as the kernel reads them (SamplingParams, repacked).
struct SampleRow {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  uint64_t seed;
  uint64_t step;
};

struct SampleParams {
  const float* logits;  // [B, V] F32, row stride ld
  int64_t ld;
  int32_t batch, vocab;
  const SampleRow* rows;  // [B] on the device
  int32_t* out;           // [B] I32
};

void launch_sample(const SampleParams& p, cudaStream_t stream);

// The backend's per-call upload buffer of the rows' parameters (grows, never shrinks).
class SamplerState {
 public:
  ~SamplerState();
  // Copies `rows` to the device on `stream` and returns the device copy.
  const SampleRow* upload(const std::vector<SampleRow>& rows, cudaStream_t stream);

 private:
  SampleRow* dev_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace mlaserve::cuda
