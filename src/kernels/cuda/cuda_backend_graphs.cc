// CudaBackend's CUDA graphs and host-to-device copies into existing tensors.
#include <cstring>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_allocator.h"

namespace mlaserve::cuda {

namespace {

class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(cudaGraphExec_t exec, cudaStream_t stream) : exec_(exec), stream_(stream) {}
  ~CudaGraph() override { cudaGraphExecDestroy(exec_); }
  void replay() override { CUDA_CHECK(cudaGraphLaunch(exec_, stream_)); }

 private:
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

void CudaBackend::copy_from_host(const Tensor& host, Tensor& dst) {
  MLA_CHECK(host.device() == Device::CPU && dst.device() == Device::CUDA && host.dtype() == dst.dtype() &&
                host.numel() == dst.numel() && dst.is_contiguous(),
            "copy_from_host: {} into {}", host.describe(), dst.describe());
  Tensor src = host.contiguous();
  size_t n = src.nbytes();
  if (n == 0) return;
  // Through the pinned buffer, so the copy is asynchronous; a tensor from upload_buffer is in it.
  if (src.raw() != staging_) {
    reserve_staging(n);
    std::memcpy(staging_, src.raw(), n);
  }
  CUDA_CHECK(cudaMemcpyAsync(dst.raw(), staging_, n, cudaMemcpyHostToDevice, stream_));
  CUDA_CHECK(cudaEventRecord(staging_free_, stream_));
}

Tensor CudaBackend::upload_buffer(DType dtype, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  reserve_staging(std::max<size_t>(size_t(n) * dtype_size(dtype), 1));
  return Tensor::wrap(staging_, dtype, std::move(shape), nullptr);
}

void CudaBackend::reserve_staging(size_t bytes) {
  // Only once the last copy out of the buffer is done may it be overwritten (or freed).
  if (staging_) CUDA_CHECK(cudaEventSynchronize(staging_free_));
  if (bytes <= staging_bytes_) return;
  if (staging_) CUDA_CHECK(cudaFreeHost(staging_));
  staging_bytes_ = std::max(bytes, staging_bytes_ * 2);
  CUDA_CHECK(cudaMallocHost(&staging_, staging_bytes_));
}

std::unique_ptr<BackendGraph> CudaBackend::capture(const std::function<void()>& work) {
  allocator_->use_graph_pool(true);
  // Relaxed: the allocator may cudaMalloc new blocks for the graph pool while capturing.
  cudaError_t err = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeRelaxed);
  if (err != cudaSuccess) allocator_->use_graph_pool(false);
  CUDA_CHECK(err);
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    // Leave capture mode; the capture may have been invalidated, then there is no graph to drop.
    cudaStreamEndCapture(stream_, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    allocator_->use_graph_pool(false);
    throw;
  }
  err = cudaStreamEndCapture(stream_, &graph);
  allocator_->use_graph_pool(false);
  CUDA_CHECK(err);
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(err);
  return std::make_unique<CudaGraph>(exec, stream_);
}

uint64_t CudaBackend::graph_pool_bytes() const { return allocator_->graph_pool_bytes(); }

}  // namespace mlaserve::cuda
