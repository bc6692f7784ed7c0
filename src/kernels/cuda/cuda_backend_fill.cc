// CudaBackend::fill_normal: dummy weights generated where they are used, instead of on the host
// and copied (minutes for a full-size model).
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/fill_random.h"

namespace mlaserve::cuda {

bool CudaBackend::fill_normal(Tensor& t, uint64_t stream, float mean, float stddev) {
  MLA_CHECK(t.defined() && t.device() == Device::CUDA && t.is_contiguous(),
            "fill_normal: expected a contiguous device tensor, got {}", t.defined() ? t.describe() : "nothing");
  FillType type;
  switch (t.dtype()) {
    case DType::F32: type = FillType::F32; break;
    case DType::BF16: type = FillType::BF16; break;
    case DType::F16: type = FillType::F16; break;
    default: return false;
  }
  launch_fill_normal(t.raw(), type, t.numel(), stream, mean, stddev, stream_);
  return true;
}

}  // namespace mlaserve::cuda
