// The benchmark's and tuners' timer (median_ms): a sample is the GPU's time for the calls, with no
// host submission in it, and a call that waits for the GPU itself still gets a time, not a hang.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/event_timer.h"

namespace mlaserve {
namespace {

class EventTimer : public ::testing::Test {
 protected:
  cudaStream_t stream{};
  void SetUp() override { CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking)); }
  void TearDown() override { cudaStreamDestroy(stream); }
};

TEST_F(EventTimer, TimesQueuedCallsBackToBack) {
  // 120 us a call (one sample), then 10 us a call (20 a sample): within the sleep's granularity.
  const double long_ms = cuda::median_ms(stream, [&](int) { cuda::hold_stream(stream, 120.0); }, 20, 2);
  EXPECT_NEAR(long_ms, 0.120, 0.006);
  const double short_ms = cuda::median_ms(stream, [&](int) { cuda::hold_stream(stream, 10.0); }, 20, 2);
  EXPECT_NEAR(short_ms, 0.010, 0.003);
}

TEST_F(EventTimer, CallThatWaitsForTheGpuStillGetsATime) {
  const double ms = cuda::median_ms(stream, [&](int) {
    cuda::hold_stream(stream, 120.0);
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }, 10, 1);
  EXPECT_GE(ms, 0.115);
  EXPECT_LT(ms, 0.5);  // the call's 120 us and the host's return from the wait, not the hold's 1 ms
}

}  // namespace
}  // namespace mlaserve
