// Where this process sits in a job a cluster launcher started: rank, world size, local rank and
// the rendezvous host, read from the variables torchrun (and the Ray frameworks that imitate it),
// SLURM and Open MPI set. `wt launch --rank-from-env` takes them from here.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace wt::cli {

struct LauncherPlace {
  int rank = 0, world_size = 1, local_rank = 0;
  std::string master_addr;  // empty: none given (SLURM without a node list, Open MPI)
  std::string master_from;  // the variable it came from (MASTER_ADDR, SLURM_STEP_NODELIST, ...)
  int master_port = 0;      // 0: none given (the launcher's own store holds it; wt never binds it)
  // How many hosts the job's ranks run on, where the launcher tells (torchrun's LOCAL_WORLD_SIZE,
  // SLURM's node list, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE); 0: it does not.
  int hosts = 0;
  std::vector<std::string> host_list;  // the hosts, in order, where the launcher lists them (SLURM)
  std::string source;                  // "torchrun", "SLURM" or "Open MPI": which variables decided
  std::vector<std::string> variables;  // the variables read, in the order read
};

using Getenv = std::function<const char*(const char*)>;

// The first launcher whose rank and world-size variables are set decides, in this order:
// torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), SLURM
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host of SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST), Open MPI (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE). nullopt
// when none is. Throws wt::Error
// (WT_ERR_INVALID_ARGUMENT) naming the variables for values that are not numbers, a rank outside
// the world size, or a launcher whose variables contradict each other (RANK=3 with
// WORLD_SIZE=2; half of a launcher's pair set).
std::optional<LauncherPlace> place_from_env(const Getenv& getenv);

// SLURM's compressed host lists: "gpu[01-04,07],cpu1,rack[1-2]-n[1-2]" → gpu01 gpu02 gpu03 gpu04
// gpu07 cpu1 rack1-n1 rack1-n2 rack2-n1 rack2-n2. Zero padding is kept ("[08-10]": 08 09 10).
// Throws wt::Error (WT_ERR_INVALID_ARGUMENT) naming the list for an unbalanced bracket, a range
// that runs backwards, or more than `limit` hosts.
std::vector<std::string> expand_slurm_nodelist(std::string_view list, std::size_t limit = 1 << 16);

}  // namespace wt::cli
