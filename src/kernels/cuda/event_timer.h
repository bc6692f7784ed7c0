// Timing of device work with CUDA events, for the kernel benchmark and the tuners.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace mlaserve::cuda {

// Median milliseconds of one call of fn(i) on `stream` over `reps` timed samples after `warmup`
// calls. A sample's calls are queued behind a kernel that holds the stream, so that they run back to
// back from the first event on, as a graph replays them, with none of the host's submission in the
// time. Short calls run several times a sample (each with its own index, so callers rotating among
// input sets larger than L2 keep them out of it), as events resolve about half a microsecond.
double median_ms(cudaStream_t stream, const std::function<void(int)>& fn, int reps = 50, int warmup = 5);

// Keeps `stream` busy for `us` microseconds of the GPU's clock (one thread sleeping), so that what the
// host queues behind it starts back to back.
void hold_stream(cudaStream_t stream, double us);

}  // namespace mlaserve::cuda
