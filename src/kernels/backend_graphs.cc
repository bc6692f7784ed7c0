// The defaults of Backend's graph and copy members, for backends without graphs (the CPU).
#include <cstring>

#include "common/error.h"
#include "kernels/ops.h"

namespace mlaserve {

void Backend::copy_from_host(const Tensor& host, Tensor& dst) {
  MLA_CHECK(host.dtype() == dst.dtype() && host.numel() == dst.numel() && dst.is_contiguous(),
            "copy_from_host: {} into {}", host.describe(), dst.describe());
  Tensor src = host.contiguous();
  std::memcpy(dst.raw(), src.raw(), src.nbytes());
}

std::unique_ptr<BackendGraph> Backend::capture(const std::function<void()>&) {
  fail("the {} backend has no graphs", name());
}

}  // namespace mlaserve
