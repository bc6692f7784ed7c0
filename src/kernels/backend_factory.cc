#include <filesystem>
#include <optional>

#include "common/error.h"
#include "common/logging.h"
#include "kernels/ops.h"

#ifdef MLASERVE_WITH_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

namespace mlaserve {

namespace {

// The device's file of one kind of tuned config, or nothing where the folder lacks it.
template <class Tuning>
std::optional<Tuning> load_tuning(const std::string& dir_flag, const std::string& device, const char* what) {
  const std::string path = Tuning::path(dir_flag, device);
  if (!std::filesystem::exists(path)) {
    // An explicit folder without this device's file is worth a warning; the default one may lack it.
    if (dir_flag.empty())
      spdlog::info("no tuned {} configs for {} ({}): built-in defaults", what, device, path);
    else
      spdlog::warn("--tuning-dir {}: no {} for {}; built-in defaults", dir_flag, Tuning::file_name(device), device);
    return std::nullopt;
  }
  Tuning tuning = Tuning::load(path);
  if (!tuning.device().empty() && tuning.device() != device)
    spdlog::warn("{} was tuned on {}, this is {}", path, tuning.device(), device);
  spdlog::info("tuned {} configs: {} shapes from {}", what, tuning.shapes(), path);
  return tuning;
}

}  // namespace

void load_tuned_configs(Backend& backend, const std::string& dir_flag) {
  const std::string device = backend.device_name();
  if (device.empty()) return;
  if (auto t = load_tuning<Fp8GemmTuning>(dir_flag, device, "FP8 GEMM")) backend.set_fp8_gemm_tuning(std::move(*t));
  if (auto t = load_tuning<MoeTuning>(dir_flag, device, "FP8 MoE")) backend.set_moe_tuning(std::move(*t));
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
