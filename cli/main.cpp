// wt — weight transfer for RL post-training.
#include "commands.hpp"

#include <wt/error.hpp>
#include <wt/version.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <map>

int main(int argc, char** argv) {
  CLI::App app{"wt: move model weights from a trainer into inference engines"};
  app.set_version_flag("--version", std::string("wt ") + wt::kVersion);
  app.require_subcommand(1);

  std::map<CLI::App*, wt::cli::Run> runs;
  auto add = [&](wt::cli::Run (*f)(CLI::App&)) {
    std::size_t before = app.get_subcommands({}).size();
    wt::cli::Run r = f(app);
    runs[app.get_subcommands({})[before]] = std::move(r);
  };
  add(&wt::cli::add_plugins_command);
  add(&wt::cli::add_serve_command);
  add(&wt::cli::add_launch_command);
  add(&wt::cli::add_gen_checkpoint_command);
  add(&wt::cli::add_plan_command);
  add(&wt::cli::add_conformance_command);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    for (auto& [sub, run] : runs)
      if (sub->parsed()) return run();
  } catch (const wt::Error& e) {
    fmt::print(stderr, "wt: error: {}\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "wt: error: {}\n", e.what());
    return 1;
  }
  return 1;
}
