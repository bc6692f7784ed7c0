#include <filesystem>

#include "common/error.h"
#include "common/logging.h"
#include "kernels/ops.h"

#ifdef MLASERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace mlaserve {

void load_tuned_configs(Backend& backend, const std::string& dir_flag) {
  const std::string device = backend.device_name();
  if (device.empty()) return;
  const std::string path = Fp8GemmTuning::path(dir_flag, device);
  if (!std::filesystem::exists(path)) {
    // An explicit folder without this device's file is worth a warning; the default one may lack it.
    if (dir_flag.empty())
      spdlog::info("no tuned FP8 GEMM configs for {} ({}): built-in defaults", device, path);
    else
      spdlog::warn("--tuning-dir {}: no {} for {}; built-in defaults", dir_flag, Fp8GemmTuning::file_name(device),
                   device);
    return;
  }
  Fp8GemmTuning tuning = Fp8GemmTuning::load(path);
  if (!tuning.device().empty() && tuning.device() != device)
    spdlog::warn("{} was tuned on {}, this is {}", path, tuning.device(), device);
  spdlog::info("tuned FP8 GEMM configs: {} shapes from {}", tuning.shapes(), path);
  backend.set_fp8_gemm_tuning(std::move(tuning));
}

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
