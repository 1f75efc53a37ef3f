#include "cluster_trainer_group.hpp"

#include "gloo_mesh.hpp"
#include "session_secret.hpp"

#include <wt/error.hpp>
#include <wt/services/gloo_trainer_group.hpp>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace wt::cli {

std::unique_ptr<TrainerGroup> join_cluster_trainer_group(
    const ClusterPlace& place, std::chrono::milliseconds join_timeout,
    std::chrono::milliseconds collective_timeout) {
  plugins::CommunicatorOptions o;
  o.master_address = place.group_address;
  o.master_port = place.group_port;
  o.rank = place.rank;
  o.world_size = place.world_size;
  o.rendezvous_timeout = join_timeout;
  o.transfer_timeout = collective_timeout;
  o.session_secret = place.secret_hex;
  o.pairs = plugins::MeshPairs::full();  // all-gathers and barriers: every pair
  // Strangers on the store's port: said, not fatal (the store drops them).
  o.warn = [](const std::string& what) {
    fmt::print(stderr, "wt launch: trainer group: {}\n", what);
  };
  try {
    return make_gloo_trainer_group(plugins::form_gloo_mesh(o, nullptr), collective_timeout);
  } catch (const sdk::Error& e) {
    throw Error(e.code(), fmt::format("trainer group: {}", e.what()));
  }
}

namespace {

constexpr const char* kHostGroupFile = "trainer-group.json";

// A port on loopback that nothing listens on now (rank 0's store binds it; if another process
// took it meanwhile, rank 0 says so and the run ends).
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  const int err = errno;
  if (fd >= 0) ::close(fd);
  if (!ok)
    throw Error(WT_ERR_SYSTEM,
                fmt::format("cannot find a free port on 127.0.0.1: {}", std::strerror(err)));
  return ntohs(a.sin_port);
}

}  // namespace

void write_host_trainer_group(const std::string& rendezvous_dir) {
  const std::string path = rendezvous_dir + "/" + kHostGroupFile;
  const std::string text = nlohmann::json{{"port", free_loopback_port()},
                                          {"secret", plugins::SessionSecret::mint().hex()}}
                               .dump();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0)
    throw Error(WT_ERR_SYSTEM, fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!ok) throw Error(WT_ERR_SYSTEM, fmt::format("cannot write {}", path));
}

std::unique_ptr<TrainerGroup> join_host_trainer_group(
    int rank, int size, const std::string& rendezvous_dir, std::chrono::milliseconds join_timeout,
    std::chrono::milliseconds collective_timeout) {
  const std::string path = rendezvous_dir + "/" + kHostGroupFile;
  auto refuse = [&](const std::string& why) {
    return Error(WT_ERR_INVALID_ARGUMENT, fmt::format("trainer group: {}: {}", path, why));
  };
  // Only a regular file of this user that nobody else may read is the coordinator's.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw refuse(std::strerror(errno));
  struct stat st {};
  std::string text(4096, '\0');
  ssize_t n = -1;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() &&
      (st.st_mode & 077) == 0)
    n = ::read(fd, text.data(), text.size());
  ::close(fd);
  if (n < 0) throw refuse("not a file of this user's that only it can read (wt launch writes it)");
  text.resize(static_cast<std::size_t>(n));
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object() || !j.contains("port") || !j["port"].is_number_integer() ||
      j["port"].get<int64_t>() < 1 || j["port"].get<int64_t>() > 65535 || !j.contains("secret") ||
      !j["secret"].is_string())
    throw refuse("not what wt launch writes ({\"port\": 1..65535, \"secret\": hex})");
  ClusterPlace place;
  place.rank = rank;
  place.world_size = size;
  place.group_address = "127.0.0.1";
  place.group_port = j["port"].get<int>();
  place.secret_hex = j["secret"].get<std::string>();
  try {
    plugins::SessionSecret::from_hex(place.secret_hex, "secret");
  } catch (const std::exception& e) {
    throw refuse(e.what());
  }
  return join_cluster_trainer_group(place, join_timeout, collective_timeout);
}

}  // namespace wt::cli
