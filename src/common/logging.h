// Logging goes through spdlog to stderr, so stdout stays free for machine-readable output
// (generate --json, tokenize).
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

namespace mlaserve {

// "trace" | "debug" | "info" | "warning" | "error"; also sets the stderr format.
void init_logging(std::string_view level);

}  // namespace mlaserve
