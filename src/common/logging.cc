#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include "common/error.h"

namespace mlaserve {

void init_logging(std::string_view level) {
  static auto logger = spdlog::stderr_color_mt("mlaserve");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
  std::string name(level == "warning" ? "warn" : level);
  auto lvl = spdlog::level::from_str(name);
  MLA_CHECK(lvl != spdlog::level::off || name == "off", "unknown --log-level '{}'", level);
  spdlog::set_level(lvl);
}

}  // namespace mlaserve
