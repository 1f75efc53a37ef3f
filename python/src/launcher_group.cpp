#include "launcher_group.hpp"

#include "cluster_place.hpp"
#include "cluster_trainer_group.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace wt::python {

namespace {

std::chrono::milliseconds seconds(double s, const char* field) {
  if (!(s > 0) || s > 86400)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{} is {}: give seconds in (0, 86400]", field, s));
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}

// The resolution's messages name the config keys of `wt launch`; here they are arguments.
std::string in_python_terms(std::string text) {
  for (const auto& [key, argument] :
       {std::pair<std::string_view, std::string_view>{"trainer.group_address", "address"},
        {"trainer.group_port", "port"},
        {"trainer.secret_file", "secret_file"}})
    for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at))
      text.replace(at, key.size(), argument);
  return text;
}

}  // namespace

LauncherGroup::LauncherGroup(int port, const std::string& address, const std::string& secret_file,
                             double join_timeout_s, double collective_timeout_s) {
  if (port < 1 || port > 65535)
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("wt.LauncherGroup: port is {}: give 1..65535", port));
  const auto join = seconds(join_timeout_s, "wt.LauncherGroup: join_timeout_s");
  const auto collective = seconds(collective_timeout_s, "wt.LauncherGroup: collective_timeout_s");
  // The same resolution as `wt launch --rank-from-env`, with this call's arguments in place of
  // the config's trainer.group_port, trainer.group_address and trainer.secret_file.
  const cli::Getenv getenv = [](const char* name) { return std::getenv(name); };
  if (!cli::place_from_env(getenv))
    throw Error(WT_ERR_INVALID_ARGUMENT,
                "wt.LauncherGroup: no cluster launcher's variables are set (torchrun's RANK and "
                "WORLD_SIZE, SLURM's SLURM_PROCID and SLURM_NTASKS, Open MPI's "
                "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE): start this script under one, or "
                "leave group= out for a single trainer rank");
  cli::LaunchConfig cfg;
  cfg.file = "wt.LauncherGroup";
  cfg.group_port = port;
  cfg.group_address = address;
  cfg.secret_file = secret_file;
  cli::ClusterPlace place;
  try {
    place = cli::resolve_cluster_place(cfg, getenv);
  } catch (const Error& e) {
    throw Error(e.code(), in_python_terms(e.what()));
  }
  rank_ = place.rank;
  size_ = place.world_size;
  where_ = place.world_size > 1 ? fmt::format("{}:{}", place.group_address, place.group_port)
                                : std::string();
  if (size_ == 1) return;  // nothing to meet
  py::gil_scoped_release r;
  group_ = cli::join_cluster_trainer_group(place, join, collective);
}

std::string LauncherGroup::describe() const {
  return size_ == 1
             ? "wt.LauncherGroup(rank 0 of 1)"
             : fmt::format("wt.LauncherGroup(rank {} of {}, meeting at {})", rank_, size_, where_);
}

void bind_launcher_group(py::module_& m) {
  py::class_<LauncherGroup>(
      m, "LauncherGroup",
      "The trainer group of the ranks a cluster launcher started (torchrun, SLURM, Open MPI), "
      "formed by wt as `wt launch --rank-from-env` forms it, for a loop without "
      "torch.distributed: pass it as trainer_init(..., group=). Rank 0 hosts the rendezvous at "
      "the launcher's MASTER_ADDR (or `address`) on `port` (never the launcher's MASTER_PORT); "
      "every rank proves the secret in WT_TRAINER_SECRET (or in `secret_file`, 0600).")
      .def(py::init<int, const std::string&, const std::string&, double, double>(),
           py::arg("port") = 29510, py::arg("address") = "", py::arg("secret_file") = "",
           py::arg("join_timeout_s") = 60.0, py::arg("collective_timeout_s") = 300.0)
      .def("rank", &LauncherGroup::rank)
      .def("size", &LauncherGroup::size)
      .def("__repr__", &LauncherGroup::describe);
}

}  // namespace wt::python
