// wt's shared-memory segments and their sweep (<wt/sdk/shm_segments.hpp>): a segment is removed
// only when its creator has ended, told by a lock on the creator's liveness file, never by its pid.
// A pid means nothing across PID namespaces (a trainer in a container sharing /dev/shm); the lock
// means the same thing everywhere, and the kernel drops it however its holder dies. Other wt
// processes (tests running in parallel) sweep too, so the tests check what is left in /dev/shm,
// not how many files a sweep says it removed.
#include <wt/sdk/shm_segments.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <algorithm>

#include <dirent.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace wt {
namespace {

bool exists(const std::string& name) {  // "/wt-..." in /dev/shm, not following links
  struct stat st {};
  return lstat(("/dev/shm" + name).c_str(), &st) == 0;
}

// A pid no process here has: what a creator in another PID namespace looks like from here.
std::string dead_pid() {
  long max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> max;
  for (long pid = max - 1; pid > 300; --pid)
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return std::to_string(pid);
  return std::to_string(max + 1);
}

std::string random_hex() {
  return shm::detail::random_hex(16);
}

// Creates an empty 0600 file in /dev/shm (a segment, a liveness file); returns its descriptor.
int create_file(const std::string& name) {
  return open(("/dev/shm" + name).c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// A child process that holds the lock of the liveness file `name` (creating it) until killed:
// a live creator, as a process in another PID namespace is to this one.
struct LockHolder {
  explicit LockHolder(const std::string& name) {
    int ready[2];
    if (pipe(ready) != 0) throw std::runtime_error("pipe");
    std::fflush(nullptr);
    pid = fork();
    if (pid == 0) {
      // As wt does: locked under a pending name first, so no sweep (other tests run in
      // parallel) ever sees the liveness file unlocked.
      const std::string path = "/dev/shm" + name, pending = path + ".new";
      int fd = open(pending.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      char ok = fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
                        link(pending.c_str(), path.c_str()) == 0 && unlink(pending.c_str()) == 0
                    ? 1
                    : 0;
      if (write(ready[1], &ok, 1) != 1) _exit(1);
      for (;;) pause();
    }
    close(ready[1]);
    char ok = 0;
    locked = read(ready[0], &ok, 1) == 1 && ok == 1;
    close(ready[0]);
  }
  void kill_it() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~LockHolder() { kill_it(); }
  pid_t pid = -1;
  bool locked = false;
};

TEST(ShmSegments, ASegmentCarriesTheLivenessTokenOfItsCreator) {
  auto c = shm::create_segment(4096);
  ASSERT_NE(c.addr, nullptr) << c.step << ": " << std::strerror(c.error);
  auto p = shm::parse_name(c.name);
  EXPECT_EQ(p.kind, shm::NameKind::segment);
  EXPECT_EQ(p.pid, std::to_string(getpid()));
  EXPECT_EQ(p.token, shm::process_token());
  struct stat st {};
  ASSERT_EQ(lstat(("/dev/shm" + shm::liveness_name(p.pid, p.token)).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 0);
  ASSERT_EQ(stat(("/dev/shm" + c.name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_FALSE(shm::segment_creator_dead(c.name));
  shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(c.name)) << "this process lives";
  munmap(c.addr, 4096);
  shm_unlink(c.name.c_str());
}

TEST(ShmSegments, NamesAreParsedStrictly) {
  const std::string t = random_hex(), r = random_hex();
  EXPECT_EQ(shm::parse_name("/wt-12-" + t + "-" + r).kind, shm::NameKind::segment);
  EXPECT_EQ(shm::parse_name("wt-12-" + t).kind, shm::NameKind::liveness);
  EXPECT_EQ(shm::parse_name("wt-12-" + t + ".new").kind, shm::NameKind::pending);
  EXPECT_EQ(shm::parse_name("wt-12-98765-" + r).kind, shm::NameKind::legacy_segment);
  for (const std::string& bad :
       std::vector<std::string>{"wt-", "wt-12", "wt-x-" + t, "wt-12-" + t + "-" + r + "-1",
                                "wt-12-" + t.substr(1) + "-" + r, "wt-12-" + t + "-ABC",
                                "xwt-12-" + t, "wt_test-12-" + t, "wt-12-" + t + ".old"})
    EXPECT_EQ(shm::parse_name(bad).kind, shm::NameKind::other) << bad;
  EXPECT_TRUE(shm::is_segment_name("/wt-12-98765-" + r));
  EXPECT_FALSE(shm::is_segment_name("/wt-12-" + t));
}

// Finding 5: a trainer in another PID namespace had its live segments unlinked, because its pid
// named no process (or another one) here. Its liveness lock is what counts.
TEST(ShmSegments, ALiveCreatorWhosePidIsNotAliveHereIsNeverSwept) {
  const std::string pid = dead_pid(), token = random_hex();
  const std::string live = shm::liveness_name(pid, token);
  const std::string seg = shm::segment_name(pid, token, random_hex());
  LockHolder holder(live);
  ASSERT_TRUE(holder.locked);
  int fd = create_file(seg);
  ASSERT_GE(fd, 0);
  close(fd);
  EXPECT_FALSE(shm::segment_creator_dead(seg));
  for (int i = 0; i < 3; ++i) shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(seg)) << "a live peer's segment was swept";
  EXPECT_TRUE(exists(live));
  // The creator dies (SIGKILL: nothing of its own cleanup runs): the next sweep removes both.
  holder.kill_it();
  EXPECT_TRUE(shm::segment_creator_dead(seg));
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(exists(seg));
  EXPECT_FALSE(exists(live)) << "the liveness file of a dead creator is swept too";
}

TEST(ShmSegments, ALockHeldByThisProcessKeepsTheSegment) {
  const std::string pid = dead_pid(), token = random_hex();
  const std::string live = shm::liveness_name(pid, token);
  const std::string seg = shm::segment_name(pid, token, random_hex());
  // Locked under a pending name first, as wt does (parallel tests sweep too).
  const std::string path = "/dev/shm" + live, pending = path + ".new";
  int lock = open(pending.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(flock(lock, LOCK_EX | LOCK_NB), 0);
  ASSERT_EQ(link(pending.c_str(), path.c_str()), 0);
  ASSERT_EQ(unlink(pending.c_str()), 0);
  close(create_file(seg));
  shm::sweep_orphaned_segments();  // its probe opens the file anew: the locks conflict
  EXPECT_TRUE(exists(seg));
  EXPECT_TRUE(exists(live));
  close(lock);
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(exists(seg));
  EXPECT_FALSE(exists(live));
}

TEST(ShmSegments, ASegmentWhoseLivenessFileIsGoneIsSwept) {
  const std::string seg = shm::segment_name(dead_pid(), random_hex(), random_hex());
  close(create_file(seg));
  EXPECT_TRUE(shm::segment_creator_dead(seg));
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(exists(seg));
}

TEST(ShmSegments, AnOlderWtsNamesAreNeverSwept) {
  const std::string seg = "/wt-" + dead_pid() + "-12345-" + random_hex();
  close(create_file(seg));
  EXPECT_FALSE(shm::segment_creator_dead(seg)) << "its creator cannot be told dead";
  shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(seg));
  EXPECT_THAT(shm::list_wt_segments(), ::testing::Contains(seg.substr(1)));
  unlink(("/dev/shm" + seg).c_str());
}

TEST(ShmSegments, APendingLivenessFileIsSweptOnlyWhenUnlocked) {
  const std::string live = shm::liveness_name(dead_pid(), random_hex());
  const std::string pending = live + ".new";
  int fd = create_file(pending);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0);  // a creator about to publish it
  shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(pending));
  close(fd);  // ... that died before it could
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(exists(pending));
}

// Another user may create files named like wt's in /dev/shm; a FIFO must not block a sweep (it
// runs at every engine's creation and every worker round), and what it cannot judge stays.
TEST(ShmSegments, AFifoNamedLikeALivenessFileDoesNotBlockTheSweep) {
  const std::string pid = dead_pid(), token = random_hex();
  const std::string live = "/dev/shm" + shm::liveness_name(pid, token);
  const std::string seg = shm::segment_name(pid, token, random_hex());
  ASSERT_EQ(mkfifo(live.c_str(), 0600), 0);
  close(create_file(seg));
  std::atomic<bool> done{false};
  std::thread unblocker([&] {  // a regression shows as a slow sweep instead of a hang
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    while (!done) {
      int fd = open(live.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) close(fd);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  auto t0 = std::chrono::steady_clock::now();
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(shm::segment_creator_dead(seg));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  done = true;
  unblocker.join();
  EXPECT_TRUE(exists(seg)) << "not the sweep's to judge";
  unlink(live.c_str());
  unlink(("/dev/shm" + seg).c_str());
}

// Finding 6: a creator killed with SIGKILL leaves its segments and its liveness file; the next
// sweep_orphaned_segments() (what `wt launch` runs when its processes have ended) removes both.
TEST(ShmSegments, AKilledCreatorsSegmentsAndLivenessFileGoAtTheNextSweep) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    auto c = shm::create_segment(1 << 16);
    std::string name = c.addr != nullptr ? c.name : "";
    name += "\n";
    if (write(pipefd[1], name.data(), name.size()) < 0) _exit(1);
    for (;;) pause();
  }
  close(pipefd[1]);
  std::string name;
  char ch;
  while (read(pipefd[0], &ch, 1) == 1 && ch != '\n') name += ch;
  close(pipefd[0]);
  ASSERT_FALSE(name.empty());
  auto p = shm::parse_name(name);
  EXPECT_EQ(p.pid, std::to_string(child));
  EXPECT_NE(p.token, shm::process_token()) << "a forked child takes a token of its own";
  const std::string live = shm::liveness_name(p.pid, p.token);
  EXPECT_TRUE(exists(live));
  shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(name));
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  shm::sweep_orphaned_segments();
  EXPECT_FALSE(exists(name));
  EXPECT_FALSE(exists(live));
}

TEST(ShmSegments, AForkedChildLeavesItsParentsLockInPlace) {
  auto mine = shm::create_segment(4096);
  ASSERT_NE(mine.addr, nullptr);
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    auto c = shm::create_segment(4096);  // closes the parent's inherited descriptor
    if (c.addr != nullptr) shm_unlink(c.name.c_str());
    _exit(c.addr != nullptr ? 0 : 1);
  }
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(shm::segment_creator_dead(mine.name)) << "the parent still holds its lock";
  shm::sweep_orphaned_segments();
  EXPECT_TRUE(exists(mine.name));
  munmap(mine.addr, 4096);
  shm_unlink(mine.name.c_str());
}

TEST(ShmSegments, ANormalExitRemovesTheLivenessFile) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  std::fflush(nullptr);
  pid_t child = fork();
  if (child == 0) {
    auto c = shm::create_segment(4096);
    if (c.addr != nullptr) shm_unlink(c.name.c_str());
    std::string token = shm::process_token() + "\n";
    if (write(pipefd[1], token.data(), token.size()) < 0) _exit(1);
    std::exit(0);  // static destructors run
  }
  close(pipefd[1]);
  std::string token;
  char ch;
  while (read(pipefd[0], &ch, 1) == 1 && ch != '\n') token += ch;
  close(pipefd[0]);
  waitpid(child, nullptr, 0);
  ASSERT_EQ(token.size(), shm::kTokenHexDigits);
  EXPECT_FALSE(exists(shm::liveness_name(std::to_string(child), token)));
}

// One descriptor per process for its liveness file, none per segment, and a sweep closes what it
// opens.
TEST(ShmSegments, NoDescriptorIsKeptPerSegment) {
  shm::process_token();
  const int before = open_fds();
  std::vector<shm::Created> made;
  for (int i = 0; i < 50; ++i) made.push_back(shm::create_segment(4096));
  EXPECT_EQ(open_fds(), before);
  for (auto& c : made) munmap(c.addr, 4096);  // left linked
  // ... and 50 segments of a dead creator.
  const std::string pid = dead_pid(), token = random_hex();
  std::vector<std::string> dead;
  for (int i = 0; i < 50; ++i) {
    dead.push_back(shm::segment_name(pid, token, random_hex()));
    close(create_file(dead.back()));
  }
  close(create_file(shm::liveness_name(pid, token)));
  shm::sweep_orphaned_segments();
  EXPECT_EQ(open_fds(), before);
  // A sweep of a parallel test may hold the dead creator's lock at that moment (ours then leaves
  // the files to it): give it a moment to finish.
  for (int i = 0; i < 200 && std::any_of(dead.begin(), dead.end(), exists); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    shm::sweep_orphaned_segments();
  }
  for (const auto& d : dead) EXPECT_FALSE(exists(d));
  for (auto& c : made) {
    EXPECT_TRUE(exists(c.name)) << "this process's segments stay";
    shm_unlink(c.name.c_str());
  }
}

}  // namespace
}  // namespace wt
