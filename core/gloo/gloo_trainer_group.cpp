// The default trainer group: Gloo collectives over TCP on loopback (the ranks of a colocated
// trainer share a host), rendezvous through a FileStore directory.
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
  GlooTrainerGroup(int rank, int size, const std::string& dir, std::chrono::milliseconds timeout)
      : rank_(rank), size_(size), timeout_(timeout) {
    if (size < 1 || rank < 0 || rank >= size)
      throw Error(WT_ERR_INVALID_ARGUMENT,
                  fmt::format("trainer group rank {} is not in 0..{}", rank, size - 1));
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec)
      throw Error(WT_ERR_SYSTEM,
                  fmt::format("cannot create the rendezvous directory {}: {}", dir, ec.message()));
    guard("rendezvous", [&] {
      gloo::transport::tcp::attr attr("127.0.0.1");
      auto device = gloo::transport::tcp::CreateDevice(attr);
      gloo::rendezvous::FileStore store(dir);
      context_ = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context_->setTimeout(timeout);
      context_->connectFullMesh(store, device);
    });
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::vector<std::string> all_gather(std::string_view mine) override {
    std::vector<std::string> out(static_cast<std::size_t>(size_));
    if (size_ == 1) {
      out[0] = std::string(mine);
      return out;
    }
    guard("all_gather", [&] {
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
    guard("barrier", [&] {
      gloo::BarrierOptions b(context_);
      b.setTimeout(timeout_);
      gloo::barrier(b);
    });
  }

 private:
  template <typename F>
  void guard(const char* what, F&& f) {
    try {
      f();
    } catch (const gloo::IoException& e) {
      throw Error(WT_ERR_TIMEOUT,
                  fmt::format("trainer group {} (rank {} of {}, deadline {} ms) failed: {}", what,
                              rank_, size_, timeout_.count(), e.what()));
    } catch (const std::exception& e) {
      throw Error(WT_ERR_SYSTEM, fmt::format("trainer group {} (rank {} of {}) failed: {}", what,
                                             rank_, size_, e.what()));
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
  return std::make_unique<GlooTrainerGroup>(rank, size, rendezvous_dir, timeout);
}

}  // namespace wt
