// A kernel ptxas must serialize: it reads an accumulator of a warpgroup MMA still in flight. The
// check of check_wgmma_serialization.sh runs on it first, to show the check still sees the message.
#include "kernels/cuda/wgmma.cuh"
__global__ void serialized_example(float* out, uint64_t a, uint64_t b, int n) {
  float d[8] = {};
  float s = 0.f;
  for (int i = 0; i < n; ++i) {
    mlaserve::cuda::wgmma::fence();
    mlaserve::cuda::wgmma::mma_m64k32_e4m3_ss<16>(d, a + i, b + i, true);
    mlaserve::cuda::wgmma::commit();
    s += d[0];
    mlaserve::cuda::wgmma::wait<0>();
  }
  out[threadIdx.x] = s + d[1];
}
