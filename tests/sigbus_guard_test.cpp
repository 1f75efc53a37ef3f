// The SIGBUS-safe copy (<wt/sdk/sigbus_guard.hpp>, wt::guarded_parallel_copy): a source whose file
// is truncated under its mapping fails the copy instead of killing the process, and every SIGBUS it
// does not own still does what it did before (death tests run in child processes).
#include <wt/wt_plugin.h>
#include <wt/sdk/parallel_copy.hpp>
#include <wt/sdk/sigbus_guard.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using ::testing::HasSubstr;

namespace wt {
namespace {

// A shared-memory file of `size` bytes mapped read-write, filled with a pattern; shrink() truncates
// the file under the mapping, as another process holding it could.
class ShrinkableFile {
 public:
  explicit ShrinkableFile(std::size_t size, uint32_t seed = 1) : size_(size) {
    fd_ = memfd_create("wt-sigbus-test", MFD_CLOEXEC);
    if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(size)) != 0) throw std::runtime_error("memfd");
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap");
    p_ = static_cast<unsigned char*>(p);
    std::mt19937 rng(seed);
    for (std::size_t i = 0; i < size; ++i) p_[i] = static_cast<unsigned char>(rng());
    bytes_.assign(p_, p_ + size);
  }
  ~ShrinkableFile() {
    munmap(p_, size_);
    close(fd_);
  }
  void shrink(std::size_t to = 0) {
    if (ftruncate(fd_, static_cast<off_t>(to)) != 0) throw std::runtime_error("ftruncate");
  }
  unsigned char* data() const { return p_; }
  std::size_t size() const { return size_; }
  const std::vector<unsigned char>& original() const { return bytes_; }

 private:
  int fd_ = -1;
  unsigned char* p_ = nullptr;
  std::size_t size_;
  std::vector<unsigned char> bytes_;
};

TEST(SigbusGuard, CopiesAValidSource) {
  ShrinkableFile f(100000);
  std::vector<unsigned char> dst(f.size());
  EXPECT_TRUE(sigbus::guarded_memcpy(dst.data(), f.data(), f.size()));
  EXPECT_EQ(dst, f.original());
  EXPECT_TRUE(sigbus::guarded_memcpy(dst.data(), f.data(), 0));
}

TEST(SigbusGuard, ATruncatedSourceFailsTheCopyAndTheProcessGoesOn) {
  ShrinkableFile f(std::size_t{1} << 20);
  f.shrink(std::size_t{256} << 10);  // the first 256 KiB stay
  std::vector<unsigned char> dst(f.size());
  for (int i = 0; i < 100; ++i) {
    EXPECT_FALSE(sigbus::guarded_memcpy(dst.data(), f.data(), f.size())) << i;
    // What is still there copies, on the same thread, after every fault.
    ASSERT_TRUE(sigbus::guarded_memcpy(dst.data(), f.data(), std::size_t{256} << 10)) << i;
  }
  EXPECT_TRUE(std::equal(dst.begin(), dst.begin() + (256 << 10), f.original().begin()));
  // SIGBUS is not left blocked by the jumps: a sent one still reaches this thread's handler.
  sigset_t blocked;
  pthread_sigmask(SIG_BLOCK, nullptr, &blocked);
  EXPECT_FALSE(sigismember(&blocked, SIGBUS));
}

TEST(SigbusGuard, ManyThreadsFaultingAtOnceEachGetTheirOwnResult) {
  ShrinkableFile good(std::size_t{1} << 20, 1), gone(std::size_t{1} << 20, 2);
  gone.shrink();
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      std::vector<unsigned char> dst(good.size());
      for (int i = 0; i < 40; ++i) {
        const bool faulty = (t + i) % 2 == 0;
        bool ok =
            sigbus::guarded_memcpy(dst.data(), faulty ? gone.data() : good.data(), good.size());
        if (ok == faulty || (ok && dst != good.original())) ++wrong;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, 0);
}

// Jobs of odd sizes, 40 MiB in all (several threads split them, boundaries inside jobs); job
// `bad` (and `bad2`) read from a file that was truncated.
struct Batch {
  Batch(std::size_t bad, std::size_t bad2, std::size_t count = 9) {
    std::mt19937 rng(7);
    for (std::size_t i = 0; i < count; ++i) {
      std::size_t n = (std::size_t{4} << 20) + rng() % 100000;
      files.push_back(std::make_unique<ShrinkableFile>(n, static_cast<uint32_t>(i)));
      if (i == bad || i == bad2) files.back()->shrink(n / 3);
      dst.emplace_back(n);
      jobs.push_back({dst.back().data(), files.back()->data(), n});
      tensors.push_back(wt_tensor{});
    }
    for (std::size_t i = 0; i < count; ++i) {
      names.push_back("model.layers." + std::to_string(i) + ".weight");
      tensors[i].name = names[i].c_str();
      tensors[i].tensor.data = files[i]->data();
    }
  }
  std::vector<std::unique_ptr<ShrinkableFile>> files;
  std::vector<std::vector<unsigned char>> dst;
  std::vector<CopyJob> jobs;
  std::vector<std::string> names;
  std::vector<wt_tensor> tensors;
};

TEST(GuardedParallelCopy, ReportsTheFaultingJobWhateverTheThreadCount) {
  for (unsigned threads : {1u, 3u, 8u}) {
    Batch b(5, 99);
    auto fault = guarded_parallel_copy(b.jobs, threads);
    ASSERT_TRUE(fault) << threads << " thread(s)";
    EXPECT_EQ(fault->job, 5u);
    EXPECT_EQ(fault->src, b.jobs[5].src);
    EXPECT_EQ(fault->message(b.tensors),
              "the source memory of tensor 'model.layers.5.weight' vanished during the copy "
              "(shared-memory file truncated?)");
    EXPECT_THAT(fault->message(std::vector<wt_tensor>{}), HasSubstr("of copy job 5 vanished"));
    // The jobs before it were copied.
    for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(b.dst[i], b.files[i]->original()) << i;
  }
}

TEST(GuardedParallelCopy, TheLowestOfSeveralFaultingJobsIsReported) {
  for (unsigned threads : {1u, 4u}) {
    Batch b(6, 2);
    auto fault = guarded_parallel_copy(b.jobs, threads);
    ASSERT_TRUE(fault);
    EXPECT_EQ(fault->job, 2u) << threads << " thread(s)";
  }
}

TEST(GuardedParallelCopy, AGoodBatchCopiesLikeParallelCopy) {
  for (unsigned threads : {1u, 3u, 8u}) {
    Batch b(99, 99);
    EXPECT_FALSE(guarded_parallel_copy(b.jobs, threads));
    for (std::size_t i = 0; i < b.jobs.size(); ++i) EXPECT_EQ(b.dst[i], b.files[i]->original());
  }
  EXPECT_FALSE(guarded_parallel_copy({}, 4));
}

// ---- every SIGBUS the guard does not own still does what it did ----

class SigbusGuardDeath : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    // The process's own disposition is the default one. (Under a sanitizer its SIGBUS handler would
    // be "the handler before", and it reports, then exits instead of dying of the signal.)
    ::signal(SIGBUS, SIG_DFL);
  }
};

// Installs the guard (a guarded copy that faults), then faults outside any guarded copy.
[[noreturn]] void fault_outside_a_guarded_copy() {
  ShrinkableFile f(1 << 16);
  f.shrink();
  std::vector<unsigned char> dst(f.size());
  if (sigbus::guarded_memcpy(dst.data(), f.data(), f.size())) std::exit(3);  // must fault
  volatile unsigned char sink = f.data()[100];                               // unguarded
  (void)sink;
  std::exit(4);
}

TEST_F(SigbusGuardDeath, AFaultOutsideAGuardedCopyStillKillsTheProcess) {
  EXPECT_EXIT(fault_outside_a_guarded_copy(), ::testing::KilledBySignal(SIGBUS), "");
}

[[noreturn]] void fault_at_the_destination() {
  ShrinkableFile src(1 << 16);
  ShrinkableFile dst(1 << 16);
  dst.shrink();  // writing a truncated MAP_SHARED file faults too: not the guard's business
  sigbus::guarded_memcpy(dst.data(), src.data(), src.size());
  std::exit(5);
}

TEST_F(SigbusGuardDeath, AFaultAtTheDestinationIsNotCaught) {
  EXPECT_EXIT(fault_at_the_destination(), ::testing::KilledBySignal(SIGBUS), "");
}

TEST_F(SigbusGuardDeath, ASentSigbusIsNotSwallowed) {
  EXPECT_EXIT(
      {
        sigbus::install();
        kill(getpid(), SIGBUS);
        std::this_thread::sleep_for(std::chrono::seconds(5));
        std::exit(6);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

void previous_handler(int, siginfo_t*, void*) {
  _exit(42);
}

TEST_F(SigbusGuardDeath, TheHandlerInstalledBeforeStillGetsTheFaultsOutsideGuardedCopies) {
  EXPECT_EXIT(
      {
        struct sigaction act {};
        act.sa_sigaction = &previous_handler;
        act.sa_flags = SA_SIGINFO;
        sigemptyset(&act.sa_mask);
        sigaction(SIGBUS, &act, nullptr);
        fault_outside_a_guarded_copy();  // the guarded fault stays inside; the other reaches it
      },
      ::testing::ExitedWithCode(42), "");
}

}  // namespace
}  // namespace wt
