// Each subcommand lives in its own file and registers itself on the CLI11 app; main.cc calls
// these in order. A register_* function adds its options and a callback that runs the command.
#pragma once

#include <CLI/CLI.hpp>

namespace mlaserve::cli {

// A subcommand this build cannot run (e.g. no HTTP library): it parses anything and fails with `why`.
void register_unavailable(CLI::App& app, const char* name, const char* why);

void register_generate(CLI::App& app);
void register_tokenize_commands(CLI::App& app);
void register_serve(CLI::App& app);
void register_bench_serving(CLI::App& app);
void register_bench_one_batch(CLI::App& app);
void register_tune_fp8_gemm(CLI::App& app);
void register_tune_moe(CLI::App& app);

}  // namespace mlaserve::cli
