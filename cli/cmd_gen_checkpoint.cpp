// `wt gen-checkpoint DIR`: a synthetic safetensors checkpoint with a real LLM's names and shapes.
#include "commands.hpp"

#include <wt/dtype.hpp>
#include <wt/error.hpp>
#include <wt/services/checkpoint_gen.hpp>

#include <fmt/format.h>

namespace wt::cli {

Run add_gen_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("gen-checkpoint",
                                 "Write a synthetic safetensors checkpoint of a real LLM layout");
  struct Opts {
    std::string dir, model = "qwen2.5-0.5b", dtype = "bfloat16";
    uint32_t seed = 0;
    int shards = 1;
    bool list = false;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("dir", o->dir, "Output directory");
  cmd->add_option("--model", o->model, "Layout: qwen2.5-0.5b, llama-3.2-1b or tiny")
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "Parameter dtype (torch name)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random seed for the values")->capture_default_str();
  cmd->add_option("--shards", o->shards, "Number of files")->capture_default_str();
  cmd->add_flag("--list", o->list, "List the known layouts");
  return [o]() {
    if (o->list || o->dir.empty()) {
      for (const auto& name : known_model_layouts()) {
        auto l = model_layout(name, {kDLBfloat, 16, 1});
        fmt::print("{:<14} {:>6.0f}M params, {:>4} tensors  {}\n", name,
                   static_cast<double>(l.total_params()) / 1e6, l.params.size(), l.description);
      }
      if (!o->list) throw Error(WT_ERR_INVALID_ARGUMENT, "give an output directory");
      return 0;
    }
    auto dtype = dtype_from_torch_name(o->dtype);
    if (!dtype)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("--dtype '{}' is not a dtype wt knows", o->dtype));
    auto layout = model_layout(o->model, *dtype);
    auto files = write_synthetic_checkpoint(o->dir, layout, o->seed, o->shards);
    fmt::print("wrote {} ({:.0f}M parameters, {} tensors, {:.2f} GB) to:\n", layout.name,
               static_cast<double>(layout.total_params()) / 1e6, layout.params.size(),
               static_cast<double>(layout.total_bytes()) / 1e9);
    for (const auto& f : files) fmt::print("  {}\n", f);
    return 0;
  };
}

}  // namespace wt::cli
