// The default trainer group: Gloo collectives over TCP, on a mesh formed here (loopback, a
// FileStore directory: the ranks of a colocated trainer share a host) or by the caller.
#include <wt/services/gloo_trainer_group.hpp>

#include <wt/error.hpp>

#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/tcp/device.h>

#include <filesystem>

namespace wt {
namespace {

class GlooTrainerGroup final : public TrainerGroup {
 public:
  GlooTrainerGroup(std::shared_ptr<gloo::rendezvous::Context> context,
                   std::chrono::milliseconds timeout)
      : rank_(context->rank),
        size_(context->size),
        timeout_(timeout),
        context_(std::move(context)) {}

  // The mesh of ranks on one host, through a FileStore directory.
  static std::shared_ptr<gloo::rendezvous::Context> connect_on_host(
      int rank, int size, const std::string& dir, std::chrono::milliseconds timeout) {
    if (size < 1 || rank < 0 || rank >= size)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("trainer group rank {} is not in 0..{}", rank, size - 1));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw Error(WT_ERR_SYSTEM,
                  fmt::format("cannot create the rendezvous directory {}: {}", dir, ec.message()));
    std::shared_ptr<gloo::rendezvous::Context> context;
    guard(rank, size, timeout, "rendezvous", [&] {
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore store(dir);
      context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(timeout);
      context->connectFullMesh(store, device);
    });
    return context;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> all_gather(std::string_view mine) override {
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    if (size_ == 1) {
      out[0] = std::string(mine);
      return out;
    }
    guard(rank_, size_, timeout_, "all_gather", [&] {
      uint64_t len = mine.size();
      std::vector<uint64_t> lens(static_cast<std::size_t>(size_));
      gloo::AllgatherOptions a(context_);
      a.setInput(&len, 1);
      a.setOutput(lens.data(), lens.size());
      a.setTimeout(timeout_);
      gloo::allgather(a);
      std::vector<size_t> counts(lens.begin(), lens.end());
      std::size_t total = 0;
      for (auto c : counts) total += c;
      std::string all(total, '\0');
      std::string in(mine);
      gloo::AllgathervOptions v(context_);
      v.setInput(in.data(), in.size());
      v.setOutput(all.data(), counts);
      v.setTimeout(timeout_);
      gloo::allgatherv(v);
      std::size_t off = 0;
      for (std::size_t r = 0; r < counts.size(); off += counts[r], ++r)
        out[r] = all.substr(off, counts[r]);
    });
    return out;
  }

  void barrier() override {
    if (size_ == 1) return;
    guard(rank_, size_, timeout_, "barrier", [&] {
      gloo::BarrierOptions b(context_);
      b.setTimeout(timeout_);
      gloo::barrier(b);
    });
  }

 private:
  template <typename F>
  static void guard(int rank, int size, std::chrono::milliseconds timeout, const char* what,
                    F&& f) {
    try {
      f();
    } catch (const gloo::IoException& e) {
      throw Error(WT_ERR_TIMEOUT,
                  fmt::format("trainer group {} (rank {} of {}, deadline {} ms) failed: {}", what,
                              rank, size, timeout.count(), e.what()));
    } catch (const std::exception& e) {
      throw Error(WT_ERR_SYSTEM, fmt::format("trainer group {} (rank {} of {}) failed: {}", what,
                                             rank, size, e.what()));
    }
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
};

}  // namespace

std::unique_ptr<TrainerGroup> make_gloo_trainer_group(int rank, int size,
                                                      const std::string& rendezvous_dir,
                                                      std::chrono::milliseconds timeout) {
  return std::make_unique<GlooTrainerGroup>(
      GlooTrainerGroup::connect_on_host(rank, size, rendezvous_dir, timeout), timeout);
}

std::unique_ptr<TrainerGroup> make_gloo_trainer_group(
    std::shared_ptr<gloo::rendezvous::Context> connected, std::chrono::milliseconds timeout) {
  if (connected == nullptr)
    throw Error(WT_ERR_INVALID_ARGUMENT, "make_gloo_trainer_group: no Gloo context given");
  return std::make_unique<GlooTrainerGroup>(std::move(connected), timeout);
}

}  // namespace wt
