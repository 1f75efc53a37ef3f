#include "fd_budget.hpp"

#include <wt/sdk/errors.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace wt::plugins {

std::size_t open_descriptors() {
  std::error_code ec;
  std::size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;  // one of them is the iterator's own, which is closed again by now
}

std::size_t mesh_descriptors(std::size_t peers, std::size_t store_clients) {
  // A pair per peer, the pairs' listener, the loop's epoll, the store client; rank 0 also serves
  // a store connection per rank while the mesh forms. A few spare for the host's own calls.
  constexpr std::size_t kSpare = 16;
  return peers + 3 + (store_clients > 0 ? store_clients + 2 : 0) + kSpare;
}

std::size_t ensure_descriptors(std::size_t needed, const std::string& what) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0)
    sdk::fail(WT_ERR_SYSTEM, "{}: cannot read the file descriptor limit: {}", what,
              std::strerror(errno));
  const std::size_t open = open_descriptors();
  const std::size_t want = open + needed;
  if (lim.rlim_cur == RLIM_INFINITY || want <= lim.rlim_cur)
    return lim.rlim_cur == RLIM_INFINITY ? want : static_cast<std::size_t>(lim.rlim_cur);
  if (lim.rlim_max != RLIM_INFINITY && want > lim.rlim_max)
    sdk::fail(WT_ERR_SYSTEM,
              "{} needs {} file descriptors and this process has {} open, but its limit is {} "
              "(hard limit {}): raise it (ulimit -n {}, or LimitNOFILE= for a service) or use "
              "fewer ranks per process",
              what, needed, open, lim.rlim_cur, lim.rlim_max, want);
  rlimit raised = lim;
  raised.rlim_cur = lim.rlim_max == RLIM_INFINITY ? want : lim.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &raised) != 0)
    sdk::fail(WT_ERR_SYSTEM,
              "{} needs {} file descriptors and this process has {} open of a limit of {}; "
              "raising it to {} failed: {}",
              what, needed, open, lim.rlim_cur, raised.rlim_cur, std::strerror(errno));
  return static_cast<std::size_t>(raised.rlim_cur);
}

}  // namespace wt::plugins
