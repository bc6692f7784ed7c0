#include <cstdio>

#include "cli/commands.h"
#include "common/error.h"
#include "common/logging.h"

namespace mlaserve::cli {

void register_unavailable(CLI::App& app, const char* name, const char* why) {
  CLI::App* cmd = app.add_subcommand(name, std::string("(unavailable in this build) ") + why);
  cmd->allow_extras();
  std::string message = why;
  cmd->callback([message] { fail("{}", message); });
}

}  // namespace mlaserve::cli

int main(int argc, char** argv) {
  CLI::App app{"mlaserve: DeepSeek (MLA + MoE) inference server"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warning|error")->capture_default_str();
  app.parse_complete_callback([&] { mlaserve::init_logging(log_level); });

  mlaserve::cli::register_generate(app);
  mlaserve::cli::register_tokenize_commands(app);
  mlaserve::cli::register_serve(app);
  mlaserve::cli::register_bench_serving(app);
  mlaserve::cli::register_bench_one_batch(app);
  mlaserve::cli::register_tune_fp8_gemm(app);
  mlaserve::cli::register_tune_moe(app);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const mlaserve::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
