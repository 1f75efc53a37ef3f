// Each `wt <command>` registers its options on the CLI11 app and returns the function to run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

namespace wt::cli {

using Run = std::function<int()>;

Run add_plugins_command(CLI::App& app);
Run add_serve_command(CLI::App& app);
Run add_launch_command(CLI::App& app);
Run add_gen_checkpoint_command(CLI::App& app);
Run add_conformance_command(CLI::App& app);
Run add_plan_command(CLI::App& app);

}  // namespace wt::cli
