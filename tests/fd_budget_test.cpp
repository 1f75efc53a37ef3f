// The file descriptor budget of a mesh (plugins/common/fd_budget.hpp), in child processes whose
// RLIMIT_NOFILE the test sets: a soft limit short of the need is raised to the hard limit; a hard
// limit short of it refuses the mesh at once, naming the numbers, before any socket is opened.
#include "fd_budget.hpp"
#include "gloo_mesh.hpp"

#include <wt/sdk/errors.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

namespace wt::plugins {
namespace {

using ::testing::HasSubstr;

// Runs `body` in a child with the given limits; returns what it wrote to the pipe, or why it
// could not.
std::string in_child(rlim_t soft, rlim_t hard, const std::function<std::string()>& body) {
  int fds[2];
  if (::pipe(fds) != 0) return "no pipe";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    std::string out;
    rlimit lim{soft, hard};
    if (::setrlimit(RLIMIT_NOFILE, &lim) != 0) {
      out = "setrlimit failed";
    } else {
      try {
        out = body();
      } catch (const std::exception& e) {
        out = std::string("error: ") + e.what();
      }
    }
    (void)!::write(fds[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    got.append(buf, static_cast<std::size_t>(n));
  ::close(fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return got;
}

TEST(FdBudget, ASoftLimitShortOfTheNeedIsRaisedToTheHardLimit) {
  const std::string out = in_child(64, 4096, [] {
    const std::size_t now = ensure_descriptors(mesh_descriptors(299, 299), "a mesh");
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    return std::to_string(now) + " " + std::to_string(lim.rlim_cur);
  });
  EXPECT_EQ(out, "4096 4096");
}

TEST(FdBudget, ANeedWithinTheSoftLimitChangesNothing) {
  const std::string out = in_child(512, 4096, [] {
    ensure_descriptors(mesh_descriptors(7, 0), "a mesh");
    rlimit lim{};
    ::getrlimit(RLIMIT_NOFILE, &lim);
    return std::to_string(lim.rlim_cur);
  });
  EXPECT_EQ(out, "512");
}

TEST(FdBudget, AHardLimitShortOfTheNeedRefusesTheMeshBeforeAnySocket) {
  const std::string out = in_child(128, 128, [] {
    CommunicatorOptions o;
    o.world_size = 300;
    o.rank = 0;
    o.pairs = MeshPairs::full();
    o.master_address = "127.0.0.1";
    o.master_port = 1;  // never reached: the budget is counted first
    o.session_secret = std::string(64, 'a');
    o.rendezvous_timeout = std::chrono::milliseconds(2000);
    form_gloo_mesh(o, nullptr);
    return std::string("formed");
  });
  EXPECT_THAT(out, HasSubstr("error: a Gloo mesh of 300 ranks (this is rank 0) needs 619 file "
                             "descriptors and this process has "));
  EXPECT_THAT(out, HasSubstr("open, but its limit is 128 (hard limit 128): raise it (ulimit -n "));
}

TEST(FdBudget, AMeshNeedsASocketPerPeerAndRankZeroTheStoresToo) {
  EXPECT_EQ(mesh_descriptors(1, 0), 1u + 3 + 16);
  EXPECT_EQ(mesh_descriptors(299, 0), 299u + 3 + 16);
  EXPECT_EQ(mesh_descriptors(299, 299), 299u + 3 + 299 + 2 + 16);
}

}  // namespace
}  // namespace wt::plugins
