#include "common/error.h"
#include "kernels/ops.h"

#ifdef MLASERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace mlaserve {

std::unique_ptr<Backend> make_backend(const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") {
#ifdef MLASERVE_WITH_CUDA
    return std::make_unique<cuda::CudaBackend>(0);
#else
    fail("--device cuda: this mlaserve was built without CUDA (configure with nvcc present)");
#endif
  }
  fail("--device '{}': expected cpu or cuda", device);
}

}  // namespace mlaserve
