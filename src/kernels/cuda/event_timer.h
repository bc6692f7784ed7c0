// Timing of device work with CUDA events, for the kernel benchmark and the tuners.
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace mlaserve::cuda {

// Median milliseconds of one call of fn(i) on `stream` over `reps` timed samples after `warmup`
// calls. Short calls run several times between the events (each with its own index, so callers
// rotating among input sets larger than L2 keep them out of it), or the time from the event to the
// launch would count.
double median_ms(cudaStream_t stream, const std::function<void(int)>& fn, int reps = 50, int warmup = 5);

}  // namespace mlaserve::cuda
