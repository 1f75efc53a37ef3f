#include "cluster_place.hpp"

#include "gloo_mesh.hpp"

#include <wt/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <optional>

namespace wt::cli {
namespace {

[[noreturn]] void bad(const std::string& why) {
  throw Error(WT_ERR_INVALID_ARGUMENT, why);
}

constexpr const char* kMakeSecret =
    "export WT_TRAINER_SECRET=$(openssl rand -hex 32) where the launcher inherits it (every rank "
    "must see the same one), or point trainer.secret_file at a file of yours holding it";

// 64 hex digits, lowercased; `from` names where they came from.
std::string checked_secret(std::string text, const std::string& from) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool hex = text.size() == 64 && text.find_first_not_of("0123456789abcdef") == text.npos;
  if (!hex)
    bad(
        fmt::format("{} must hold the trainer group's secret, 64 hex digits (got {} characters): "
                    "{}",
                    from, text.size(), kMakeSecret));
  return text;
}

// The secret file: a regular file of this user that nobody else can read (as ssh asks of a key).
std::string read_secret_file(const std::string& path) {
  const std::string from = fmt::format("trainer.secret_file ({})", path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) bad(fmt::format("{} cannot be opened: {}", from, std::strerror(errno)));
  struct Close {
    int fd;
    ~Close() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    bad(fmt::format("{} is not a regular file", from));
  if (st.st_uid != ::geteuid())
    bad(fmt::format("{} belongs to uid {}, not to this user ({})", from, st.st_uid, ::geteuid()));
  if ((st.st_mode & 077) != 0)
    bad(fmt::format("{} can be read or written by others (mode {:04o}): chmod 600 it", from,
                    st.st_mode & 07777));
  if (st.st_size > 4096) bad(fmt::format("{} is {} bytes; a secret is 64", from, st.st_size));
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  const ssize_t n = ::read(fd, text.data(), text.size());
  if (n < 0) bad(fmt::format("{} cannot be read: {}", from, std::strerror(errno)));
  text.resize(static_cast<std::size_t>(n));
  return checked_secret(std::move(text), from);
}

// Wildcards, multicast and broadcast addresses can be bound or sent to, but no peer can dial them.
bool dialable(const std::string& numeric) {
  in_addr v4{};
  if (::inet_pton(AF_INET, numeric.c_str(), &v4) == 1) {
    const uint32_t a = ntohl(v4.s_addr);
    return a != 0 && (a >> 28) != 0xE && a != 0xFFFFFFFFu;
  }
  in6_addr v6{};
  if (::inet_pton(AF_INET6, numeric.c_str(), &v6) != 1) return false;
  return !IN6_IS_ADDR_UNSPECIFIED(&v6) && !IN6_IS_ADDR_MULTICAST(&v6);
}

// Refuses a rendezvous address no peer could dial; `from` names where it came from.
void check_dialable(const std::string& from, const std::string& host,
                    const std::vector<std::string>& addresses) {
  for (const auto& a : addresses)
    if (!dialable(a))
      bad(
          fmt::format("{} '{}' resolves to {}, which no peer can dial (a wildcard, multicast or "
                      "broadcast address): give an address of rank 0's host the others can reach",
                      from, host, a));
}

// Whether this host owns `numeric`: the pairs' own choice of address keeps it only then.
bool is_local_address(const std::string& numeric) {
  try {
    return plugins::local_address_towards(numeric) == numeric;
  } catch (const std::exception&) {
    return false;  // no route to it either
  }
}

std::string loopback_only(const std::string& host) {
  const auto all = resolve_addresses(host);
  if (all.empty() || !std::all_of(all.begin(), all.end(), is_loopback_address)) return {};
  return all.front();
}

}  // namespace

std::vector<std::string> resolve_addresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (host.empty() || ::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return out;
  for (const addrinfo* a = res; a != nullptr; a = a->ai_next) {
    char buf[INET6_ADDRSTRLEN] = {0};
    const void* raw =
        a->ai_family == AF_INET6
            ? static_cast<const void*>(
                  &reinterpret_cast<const sockaddr_in6*>(a->ai_addr)->sin6_addr)
            : static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a->ai_addr)->sin_addr);
    if ((a->ai_family == AF_INET || a->ai_family == AF_INET6) &&
        ::inet_ntop(a->ai_family, raw, buf, sizeof buf) != nullptr &&
        std::find(out.begin(), out.end(), buf) == out.end())
      out.emplace_back(buf);
  }
  ::freeaddrinfo(res);
  return out;
}

bool is_loopback_address(const std::string& numeric) {
  in_addr v4{};
  if (::inet_pton(AF_INET, numeric.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, numeric.c_str(), &v6) != 1) return false;
  if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
  return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
}

std::string url_host(const std::string& url) {
  std::string rest = url;
  if (auto p = rest.find("://"); p != std::string::npos) rest = rest.substr(p + 3);
  rest = rest.substr(0, rest.find_first_of("/?#"));
  if (auto at = rest.rfind('@'); at != std::string::npos) rest = rest.substr(at + 1);
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    return close == std::string::npos ? std::string() : rest.substr(1, close - 1);
  }
  return rest.substr(0, rest.find(':'));
}

void check_rendezvous_reaches_receivers(const LaunchConfig& cfg,
                                        const std::vector<std::string>& receiver_urls) {
  const auto it = cfg.init_info.find("master_address");
  if (it == cfg.init_info.end() || !it->is_string()) return;
  const std::string address = it->get<std::string>();
  check_dialable("init_info.master_address", address, resolve_addresses(address));
  const std::string loopback = loopback_only(address);
  if (loopback.empty()) return;
  for (const auto& url : receiver_urls) {
    const auto theirs = resolve_addresses(url_host(url));
    if (theirs.empty() || std::any_of(theirs.begin(), theirs.end(), is_loopback_address)) continue;
    std::string where = cfg.file;
    if (auto m = cfg.init_info_marks.find("master_address"); m != cfg.init_info_marks.end())
      where = fmt::format("{}:{}:{}", cfg.file, m->second.first, m->second.second);
    bad(
        fmt::format("{}: init_info.master_address '{}' resolves to {}, a loopback address, but "
                    "receiver {} is on another host ({}): its workers could never reach the "
                    "rendezvous there. Give an address of this host that the receivers can reach",
                    where, address, loopback, url, theirs.front()));
  }
}

namespace {

// Where resolve() puts a problem: thrown at once for a run, recorded for a dry run.
struct Problems {
  std::vector<std::string>* collected = nullptr;
  void operator()(const std::string& why) const {
    if (collected == nullptr) bad(why);
    collected->push_back(why);
  }
};

void check_group_address(const LaunchConfig& cfg, const ClusterPlace& p, const Problems& problem);
void check_secret(const LaunchConfig& cfg, const Getenv& getenv, ClusterPlace& p,
                  const Problems& problem);

ClusterPlace resolve(const LaunchConfig& cfg, const Getenv& getenv, const Problems& problem) {
  std::optional<LauncherPlace> launcher;
  try {
    launcher = place_from_env(getenv);
  } catch (const Error& e) {
    problem(e.what());
    return {};
  }
  ClusterPlace p;
  if (!launcher) {
    problem(fmt::format(
        "--rank-from-env: no cluster launcher found in the environment (torchrun's RANK and "
        "WORLD_SIZE, SLURM's SLURM_PROCID and SLURM_NTASKS, Open MPI's OMPI_COMM_WORLD_RANK and "
        "OMPI_COMM_WORLD_SIZE); without one, run `wt launch {}`, which starts every rank itself",
        cfg.file));
    return p;
  }
  p.launcher = *launcher;
  p.rank = launcher->rank;
  p.world_size = launcher->world_size;
  p.local_rank = launcher->local_rank;
  const std::string said =
      fmt::format("{} ({})", launcher->source, fmt::join(launcher->variables, ", "));
  if (cfg.trainer_ranks_given && cfg.trainer_ranks != p.world_size)
    problem(fmt::format("{}: trainer.ranks is {}, but the launcher says the world size is {}: {}",
                        cfg.file, cfg.trainer_ranks, p.world_size, said));
  if (p.world_size > 64)
    problem(
        fmt::format("the launcher's world size is {}, but a trainer group has at most 64 ranks "
                    "(trainer.ranks): {}",
                    p.world_size, said));
  if (!cfg.group_address.empty()) {
    p.group_address = cfg.group_address;
    p.group_address_from = "trainer.group_address";
  } else if (!launcher->master_addr.empty()) {
    p.group_address = launcher->master_addr;
    p.group_address_from = launcher->master_from;
  }
  p.group_port = cfg.group_port;
  if (p.world_size == 1) return p;  // a group of one: nothing to meet, nothing to share

  if (p.group_address.empty())
    problem(
        fmt::format("{}: the launcher ({}) does not say where trainer rank 0 runs: set "
                    "trainer.group_address to its host",
                    cfg.file, said));
  if (launcher->master_port != 0 && launcher->master_port == p.group_port)
    problem(
        fmt::format("{}: trainer.group_port is {}, the launcher's MASTER_PORT, which its own "
                    "store holds: give wt another port",
                    cfg.file, p.group_port));
  check_group_address(cfg, p, problem);
  check_secret(cfg, getenv, p, problem);
  return p;
}

// Rank 0's host: it resolves, to an address the other hosts can dial, and on rank 0 to this host.
void check_group_address(const LaunchConfig& cfg, const ClusterPlace& p, const Problems& problem) {
  if (p.group_address.empty()) return;
  const auto& launcher = p.launcher;
  const std::string said =
      fmt::format("{} ({})", launcher.source, fmt::join(launcher.variables, ", "));
  const auto addresses = resolve_addresses(p.group_address);
  if (addresses.empty()) {
    problem(fmt::format("{} '{}' (trainer rank 0's host) does not resolve", p.group_address_from,
                        p.group_address));
    return;
  }
  try {
    check_dialable(p.group_address_from, p.group_address, addresses);
  } catch (const Error& e) {
    problem(e.what());
    return;
  }
  if (launcher.hosts > 1 && std::all_of(addresses.begin(), addresses.end(), is_loopback_address))
    problem(fmt::format(
        "{} '{}' resolves to {}, a loopback address, but the job's {} ranks run on {} hosts ({}): "
        "the ranks on the other hosts could never reach trainer rank 0 there. {}",
        p.group_address_from, p.group_address, addresses.front(), p.world_size, launcher.hosts,
        said,
        p.rank == 0 ? "On this host (rank 0's) the name resolves to loopback, as /etc/hosts does "
                      "for a host's own name on Debian and Ubuntu (127.0.1.1): set "
                      "trainer.group_address to this host's address on the cluster network"
                    : "Give rank 0's host name or an address the other hosts can reach"));
  // Rank 0 listens there: an address of another host (a node list whose first host is not rank
  // 0's, a typo) would fail only at the bind, and the others would wait out their deadline.
  if (p.rank == 0 && std::none_of(addresses.begin(), addresses.end(), is_local_address))
    problem(
        fmt::format("this is trainer rank 0, which hosts the trainer group, but {} '{}' resolves "
                    "to {}, none of which is an address of this host: set trainer.group_address "
                    "to rank 0's host",
                    p.group_address_from, p.group_address, fmt::join(addresses, ", ")));
  if (const auto mp = cfg.init_info.find("master_port");
      mp != cfg.init_info.end() && mp->is_number_integer() && mp->get<int64_t>() == p.group_port) {
    const auto ma = cfg.init_info.find("master_address");
    const auto theirs = ma != cfg.init_info.end() && ma->is_string()
                            ? resolve_addresses(ma->get<std::string>())
                            : std::vector<std::string>{};
    for (const auto& a : theirs)
      if (std::find(addresses.begin(), addresses.end(), a) != addresses.end())
        problem(
            fmt::format("{}: trainer.group_port {} is init_info.master_port too, on the same host "
                        "({}): the trainer group and the backend's rendezvous each need their own",
                        cfg.file, p.group_port, a));
  }
}

// The group's shared secret: from trainer.secret_file or WT_TRAINER_SECRET, the same where both.
void check_secret(const LaunchConfig& cfg, const Getenv& getenv, ClusterPlace& p,
                  const Problems& problem) {
  try {
    const char* env_secret = getenv("WT_TRAINER_SECRET");
    std::string from_env = env_secret != nullptr && *env_secret != '\0'
                               ? checked_secret(env_secret, "WT_TRAINER_SECRET")
                               : std::string();
    if (!cfg.secret_file.empty()) {
      p.secret_hex = read_secret_file(cfg.secret_file);
      p.secret_from = fmt::format("trainer.secret_file ({})", cfg.secret_file);
      if (!from_env.empty() && from_env != p.secret_hex)
        problem(fmt::format("{} and WT_TRAINER_SECRET hold different secrets: give one",
                            p.secret_from));
    } else if (!from_env.empty()) {
      p.secret_hex = from_env;
      p.secret_from = "WT_TRAINER_SECRET";
    } else {
      bad(
          fmt::format("the {} trainer ranks meet over TCP at {} and prove a shared secret to "
                      "each other, but none was given: {}",
                      p.world_size, plugins::endpoint(p.group_address, p.group_port), kMakeSecret));
    }
  } catch (const Error& e) {  // a secret file or variable that cannot be read or is malformed
    problem(e.what());
  }
}

}  // namespace

ClusterPlace resolve_cluster_place(const LaunchConfig& cfg, const Getenv& getenv) {
  return resolve(cfg, getenv, Problems{});
}

ClusterPlace resolve_cluster_place(const LaunchConfig& cfg, const Getenv& getenv,
                                   std::vector<std::string>& problems) {
  return resolve(cfg, getenv, Problems{&problems});
}

std::vector<std::string> describe(const ClusterPlace& p) {
  std::vector<std::string> out;
  out.push_back(fmt::format("launcher: {} (from {})", p.launcher.source,
                            fmt::join(p.launcher.variables, ", ")));
  out.push_back(fmt::format(
      "this process: trainer rank {} of {}, local rank {}{}", p.rank, p.world_size, p.local_rank,
      p.launcher.hosts > 0 ? fmt::format(", the job on {} host(s)", p.launcher.hosts)
                           : std::string()));
  if (!p.launcher.host_list.empty()) {
    constexpr std::size_t kShown = 16;
    const std::size_t n = std::min(kShown, p.launcher.host_list.size());
    out.push_back(fmt::format("hosts ({}): {}{}", p.launcher.master_from,
                              fmt::join(p.launcher.host_list.begin(),
                                        p.launcher.host_list.begin() + static_cast<long>(n), ", "),
                              p.launcher.host_list.size() > n
                                  ? fmt::format(", ... ({} more)", p.launcher.host_list.size() - n)
                                  : std::string()));
  }
  if (p.launcher.master_port != 0)
    out.push_back(
        fmt::format("launcher's store: {} (MASTER_PORT, which wt does not bind)",
                    plugins::endpoint(
                        p.launcher.master_addr.empty() ? std::string("?") : p.launcher.master_addr,
                        p.launcher.master_port)));
  if (p.world_size == 1) {
    out.push_back("trainer group: one rank, nothing to meet");
    return out;
  }
  out.push_back(fmt::format(
      "trainer group: rank 0 hosts its rendezvous at {} ({}, trainer.group_port), {}",
      plugins::endpoint(p.group_address.empty() ? std::string("?") : p.group_address, p.group_port),
      p.group_address_from.empty() ? std::string("from nowhere") : p.group_address_from,
      p.secret_from.empty() ? std::string("but no secret to prove was given")
                            : "proven with the secret from " + p.secret_from));
  std::string pairs;
  try {
    pairs = plugins::local_address_towards(p.group_address);
  } catch (const std::exception& e) {
    pairs = fmt::format("none: {}", e.what());
  }
  out.push_back(fmt::format("this rank's pairs: on {} (the address routing to {}), any free port",
                            pairs, p.group_address));
  return out;
}

}  // namespace wt::cli
