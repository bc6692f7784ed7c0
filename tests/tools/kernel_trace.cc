// A kernel timeline for machines without Nsight Systems: preloaded into any CUDA program
// (LD_PRELOAD=libkernel_trace.so MLASERVE_KERNEL_TRACE=out.csv mlaserve ...), it asks CUPTI for a
// record of every kernel run (graph replays included) and writes, at exit, one CSV row a kernel:
// GPU start and end in ns, grid, stream, graph id and the (mangled) name. tests/tools/
// kernel_timeline.py reads it. Timestamps cost a little per kernel: compare traced runs with traced
// runs only.
#include <cupti.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct KernelRun {
  uint64_t start, end;
  int32_t grid_x, grid_y, grid_z;
  uint32_t stream, graph;
  std::string name;
};

std::mutex mu;
std::vector<KernelRun> runs;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_trace: %s: %s\n", what, msg ? msg : "?");
}

void write_trace();

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  // The first request comes once CUDA is up: an exit handler registered now runs before CUDA's
  // own teardown (handlers run in reverse order), while the records can still be flushed.
  static std::once_flag at_exit;
  std::call_once(at_exit, [] { std::atexit(write_trace); });
  *size = size_t(8) << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard lock(mu);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    runs.push_back({k->start, k->end, k->gridX, k->gridY, k->gridZ, k->streamId, k->graphId, k->name ? k->name : "?"});
  }
  std::free(buffer);
}

void write_trace() {
  const char* path = std::getenv("MLASERVE_KERNEL_TRACE");
  cuptiActivityFlushAll(1);
  std::lock_guard lock(mu);
  FILE* f = std::fopen(path, "w");
  if (!f) {
    std::fprintf(stderr, "kernel_trace: cannot write %s\n", path);
    return;
  }
  std::fprintf(f, "start_ns,end_ns,grid_x,grid_y,grid_z,stream,graph,name\n");
  for (const KernelRun& r : runs)
    std::fprintf(f, "%llu,%llu,%d,%d,%d,%u,%u,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.grid_x, r.grid_y, r.grid_z, r.stream, r.graph,
                 r.name.c_str());
  std::fclose(f);
  std::fprintf(stderr, "kernel_trace: %zu kernels to %s\n", runs.size(), path);
}

// Runs when the library is loaded, before main: CUPTI hooks the driver as it initializes.
__attribute__((constructor)) void start_trace() {
  if (!std::getenv("MLASERVE_KERNEL_TRACE")) return;
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
}

}  // namespace
