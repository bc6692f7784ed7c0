// CudaBackend::sample: checks, the per-call upload of the rows' parameters, and the sampler kernel.
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/sampling.h"

namespace mlaserve::cuda {

void CudaBackend::sample(const Tensor& logits, const std::vector<SamplingParams>& params, Tensor& out) {
  MLA_CHECK(logits.defined() && logits.device() == Device::CUDA && logits.dtype() == DType::F32 &&
                logits.ndim() == 2 && logits.stride(1) == 1,
            "sample: logits must be a device F32[B, V] with a contiguous last dim, got {}",
            logits.defined() ? logits.describe() : "nothing");
  int64_t B = logits.size(0), V = logits.size(1);
  MLA_CHECK(out.defined() && out.device() == Device::CUDA && out.dtype() == DType::I32 && out.numel() == B &&
                out.is_contiguous(),
            "sample: out must be a device I32[{}], got {}", B, out.defined() ? out.describe() : "nothing");
  MLA_CHECK(int64_t(params.size()) == B, "sample: {} parameter sets for {} rows", params.size(), B);
  MLA_CHECK(V > 0 && V < (int64_t(1) << 31), "sample: vocabulary of {} tokens", V);
  if (B == 0) return;
  std::vector<SampleRow> rows(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const SamplingParams& s = params[i];
    rows[i] = {s.temperature, s.top_k, s.top_p, s.min_p, s.seed, s.step};
  }
  if (!sampler_) sampler_ = std::make_shared<SamplerState>();
  SampleParams p{logits.data<float>(), logits.stride(0), int32_t(B), int32_t(V), sampler_->upload(rows, stream_),
                 out.data<int32_t>()};
  launch_sample(p, stream_);
}

}  // namespace mlaserve::cuda
