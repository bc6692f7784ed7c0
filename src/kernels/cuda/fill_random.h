// Launcher of the dummy-weight fill (fill_random.cu): out[i] = mean + stddev * normal01(stream, i),
// the host's formula from common/random.h, rounded to the output type. out is a device pointer.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mlaserve::cuda {

enum class FillType : uint8_t { F32, BF16, F16 };

void launch_fill_normal(void* out, FillType type, int64_t n, uint64_t stream, float mean, float stddev,
                        cudaStream_t s);

}  // namespace mlaserve::cuda
