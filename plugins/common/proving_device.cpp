#include "proving_device.hpp"

#include "gloo_mesh.hpp"

#include <wt/sdk/errors.hpp>

#include <gloo/transport/tcp/context.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/tcp/pair.h>

#include <sys/epoll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <exception>

namespace wt::plugins {
namespace {

namespace tcp = gloo::transport::tcp;
using Clock = std::chrono::steady_clock;

// What rank `from` answers to rank `to`'s challenge `nonce` on their pair, as the side that
// accepted the connection or as the one that dialled it. The role matters: both sides' listening
// sockets are open while the mesh forms, and a stranger connected to both could otherwise pass
// each side's answer on to the other; then both sides accepted, and neither answer has the
// dialler's role.
Mac proof_of(const SessionSecret& pair_key, const Nonce& nonce, int from, int to, bool accepted) {
  std::string m(as_view(nonce));
  unsigned char ranks[9];
  put_le(ranks, static_cast<uint32_t>(from), 4);
  put_le(ranks + 4, static_cast<uint32_t>(to), 4);
  ranks[8] = accepted ? 'a' : 'd';
  m.append(reinterpret_cast<const char*>(ranks), sizeof ranks);
  return pair_key.mac("wt gloo pair", m);
}

std::exception_ptr refusal(int peer, const std::string& why) {
  return std::make_exception_ptr(sdk::Error(
      WT_ERR_REMOTE,
      fmt::format("the peer connected as rank {} {} (a stranger on the pair's port?); no weight "
                  "was sent",
                  peer, why)));
}

// The proof runs on Gloo's loop thread, as Gloo's own connection handling does, with the pair's
// lock held (handleReadWrite and changeState are called with it): nonce out as the socket
// connects, the peer's nonce in, the answer out, the peer's answer in and checked. Only then does
// Gloo get the socket. Both sides proceed alike, so neither waits on the other's order.
class ProvingPair final : public tcp::Pair {
 public:
  ProvingPair(tcp::Context* context, tcp::Device* device, int self, int peer,
              std::chrono::milliseconds timeout, const SessionSecret& pair_key,
              Clock::time_point until)
      : tcp::Pair(context, device, peer, timeout), self_(self), key_(pair_key), until_(until) {}

  std::shared_ptr<const PairProgress> progress() const { return progress_; }

  // Closed here, not by tcp::Pair's destructor: once this part is gone, the loop thread must not
  // find the socket registered (it would call into a half-destroyed pair).
  ~ProvingPair() override {
    std::lock_guard<std::mutex> lock(m_);
    if (state_ != CLOSED) tcp::Pair::changeState(CLOSED);
  }

 protected:
  void changeState(state next) noexcept override {
    const bool accepted = state_ == LISTENING;  // else CONNECTING: this side dialled
    tcp::Pair::changeState(next);
    if (next == CONNECTED) {
      begin_proof(accepted);
    } else {
      if (next == CLOSED && proven_) progress_->mark_closed();  // the peer or its pair is gone
      proven_ = false;
    }
  }

  // As tcp::Pair's, with whatever the connection handlers throw (Gloo enforces there too, e.g. on
  // a stranger's connection reset before it was accepted) failing the pair, not the process.
  void handleEvents(int events) override {
    std::unique_lock<std::mutex> lock(m_, std::try_to_lock);
    if (!lock || ex_ != nullptr) return;
    try {
      if (state_ == CONNECTED) {
        handleReadWrite(events);
      } else if (state_ == LISTENING) {
        handleListening();
      } else if (state_ == CONNECTING) {
        handleConnecting();
      }
    } catch (const std::exception& e) {
      fail_pair(std::make_exception_ptr(sdk::Error(
          WT_ERR_REMOTE, fmt::format("the pair with rank {} failed: {}", rank_, e.what()))));
    } catch (...) {
      fail_pair(std::make_exception_ptr(
          sdk::Error(WT_ERR_REMOTE, fmt::format("the pair with rank {} failed", rank_))));
    }
  }

  // Called only from handleEvents above, which turns whatever it throws into the pair's failure.
  //
  // One message each way per event, where Gloo's own loops on until the socket runs dry: a
  // rank's one loop thread serves all its pairs, and a peer that keeps its socket full (its next
  // message always there) held that thread for the whole of its share while every other pair
  // stood idle, on a slow or loaded machine past the stall deadline of the peers behind them.
  // Epoll is level triggered: what is left is served on the loop's next pass, after the other
  // pairs had their turn.
  void handleReadWrite(int events) override {
    if (!proven_) {
      continue_proof();
      return;
    }
    if (events & EPOLLOUT) {
      if (!tx_.empty() && write(tx_.front())) tx_.pop_front();
      if (state_ == CLOSED) return;  // the write failed the pair
      if (tx_.empty()) device_->registerDescriptor(fd_, EPOLLIN, this);
    }
    if ((events & EPOLLIN) && state_ != CLOSED) read();
  }

  // Every message for a receive is exactly as long as the receive posted: Gloo itself completes
  // a receive that got fewer bytes, leaving the rest of the buffer as it was, so a peer could
  // make a receiver take bytes nobody sent. The header is read here first (as Gloo would read
  // it) and checked against the posted receive; a shorter or longer message fails the pair,
  // naming both lengths, before a byte of it lands. Sync mode (blocking reads on the caller's
  // thread) is not used by wt and is left to Gloo.
  bool read() override {
    if (state_ == CLOSED || !proven_ || sync_) return tcp::Pair::read();
    PairProgress::Moving moving(*progress_);
    auto* header = reinterpret_cast<char*>(&rx_.preamble);
    if (rx_.nread < sizeof(rx_.preamble)) header_checked_ = false;  // a new message
    while (rx_.nread < sizeof(rx_.preamble)) {
      const ssize_t rv =
          ::recv(fd_, header + rx_.nread, sizeof(rx_.preamble) - rx_.nread, MSG_DONTWAIT);
      if (rv == 0 || (rv < 0 && errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK))
        return tcp::Pair::read();  // Gloo's own handling of a closed or failed socket
      if (rv < 0 && errno == EINTR) continue;
      if (rv < 0) return false;  // the rest of the header comes with a later event
      rx_.nread += static_cast<std::size_t>(rv);
    }
    if (!header_checked_ && rx_.getOpcode() == tcp::Op::SEND_UNBOUND_BUFFER) {
      header_checked_ = true;  // Gloo takes the posted receive off its queue once, next
      auto it = localPendingRecv_.find(rx_.preamble.slot);
      if (it != localPendingRecv_.end() && !it->second.empty()) {
        const std::size_t posted = std::get<2>(it->second.front());
        if (rx_.preamble.length != posted) {
          fail_pair(std::make_exception_ptr(sdk::Error(
              WT_ERR_REMOTE,
              fmt::format("rank {} sent a message of {} bytes for a receive of {} bytes; it was "
                          "refused before any of it landed",
                          rank_, rx_.preamble.length, posted))));
          return false;
        }
      }
    }
    return tcp::Pair::read();
  }

  bool write(tcp::Op& op) override {
    if (!proven_) return tcp::Pair::write(op);
    if (sync_) {  // a blocking write may wait for good: only its start is progress
      progress_->touch();
      return tcp::Pair::write(op);
    }
    PairProgress::Moving moving(*progress_);
    return tcp::Pair::write(op);
  }

  // Connected means proven: the user's connect returns only once the peer's answer checked out.
  void waitUntilConnected(std::unique_lock<std::mutex>& lock, bool use_timeout) override {
    tcp::Pair::waitUntilConnected(lock, use_timeout);
    const bool settled = cv_.wait_until(lock, until_, [&] {
      throwIfException();
      return proven_ || state_ == CLOSED;
    });
    if (!settled) signalAndThrowException(refusal(rank_, "did not prove its pair's key in time"));
    if (!proven_)
      throw sdk::Error(WT_ERR_REMOTE, fmt::format("the pair with rank {} was closed", rank_));
  }

 private:
  static constexpr std::size_t kNonce = sizeof(Nonce), kProof = sizeof(Mac);

  void fail_pair(std::exception_ptr why) noexcept {
    try {
      if (ex_ == nullptr) signalException(std::move(why));
    } catch (...) {  // nothing more can be done on the loop thread; the pair is closed
    }
  }

  // A socket connected (the accepted one on the listening side; it can connect again when the
  // listening socket took a stranger before the user's connect replaced it): a fresh proof.
  void begin_proof(bool accepted) noexcept {
    accepted_ = accepted;
    proven_ = false;
    received_ = 0;
    answered_ = false;
    try {
      mine_ = random_nonce();
      if (!send_now(mine_.data(), kNonce))
        fail_pair(refusal(rank_, "could not be sent a challenge"));
    } catch (...) {
      fail_pair(std::current_exception());
    }
  }

  // 16 or 32 bytes into a socket that has sent nothing else yet: they fit, or the pair fails.
  bool send_now(const unsigned char* p, std::size_t n) {
    ssize_t rv;
    do {
      rv = ::send(fd_, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (rv == -1 && errno == EINTR);
    return rv == static_cast<ssize_t>(n);
  }

  void continue_proof() {
    unsigned char* in = reinterpret_cast<unsigned char*>(in_.data());
    while (received_ < in_.size()) {
      const ssize_t rv = ::recv(fd_, in + received_, in_.size() - received_, MSG_DONTWAIT);
      if (rv == 0)
        return fail_pair(refusal(rank_, "closed the connection before proving its pair's key"));
      if (rv < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;  // the rest comes with a later event
        return fail_pair(
            refusal(rank_, fmt::format("could not be read: {}", std::strerror(errno))));
      }
      received_ += static_cast<std::size_t>(rv);
      if (!answered_ && received_ >= kNonce) {
        Nonce theirs{};
        std::memcpy(theirs.data(), in, kNonce);
        const Mac answer = proof_of(key_, theirs, self_, rank_, accepted_);
        if (!send_now(answer.data(), kProof))
          return fail_pair(refusal(rank_, "could not be sent its answer"));
        answered_ = true;
      }
    }
    Mac got{};
    std::memcpy(got.data(), in + kNonce, kProof);
    if (!same_mac(got, proof_of(key_, mine_, rank_, self_, !accepted_)))
      return fail_pair(refusal(
          rank_, fmt::format("did not prove the key of its pair with rank {}: it is not rank {}",
                             self_, rank_)));
    proven_ = true;  // what follows on the socket (Gloo's frames) is Gloo's
    progress_->touch();
    cv_.notify_all();
  }

  const int self_;
  const SessionSecret key_;  // the pair's (session_keys.hpp)
  const Clock::time_point until_;
  const std::shared_ptr<PairProgress> progress_ = std::make_shared<PairProgress>();
  // Guarded by the pair's lock (m_), like the rest of the pair's state.
  bool proven_ = false;
  bool answered_ = false;
  bool accepted_ = false;        // this side accepted the connection (else it dialled)
  bool header_checked_ = false;  // the message being read was checked against its receive
  Nonce mine_{};
  std::array<char, kNonce + kProof> in_{};
  std::size_t received_ = 0;
};

class ProvingContext final : public tcp::Context {
 public:
  ProvingContext(std::shared_ptr<tcp::Device> device, int rank, int size,
                 std::shared_ptr<const SessionKeys> keys, Clock::time_point until)
      : tcp::Context(std::move(device), rank, size), keys_(std::move(keys)), until_(until) {}

  std::unique_ptr<gloo::transport::Pair>& createPair(int peer) override {
    pairs_[peer] = std::make_unique<ProvingPair>(this, device_.get(), rank, peer, getTimeout(),
                                                 keys_->pair_key_with(peer), until_);
    return pairs_[peer];
  }

 private:
  const std::shared_ptr<const SessionKeys> keys_;
  const Clock::time_point until_;
};

class ProvingDevice final : public tcp::Device {
 public:
  ProvingDevice(const tcp::attr& attr, std::shared_ptr<const SessionKeys> keys,
                Clock::time_point until)
      : tcp::Device(tcp::CreateDeviceAttr(attr)), keys_(std::move(keys)), until_(until) {}

  std::shared_ptr<gloo::transport::Context> createContext(int rank, int size) override {
    if (rank != keys_->rank())
      sdk::fail(WT_ERR_STATE, "a mesh context for rank {} on a device holding rank {}'s keys", rank,
                keys_->rank());
    return std::make_shared<ProvingContext>(shared_from_this(), rank, size, keys_, until_);
  }

 private:
  const std::shared_ptr<const SessionKeys> keys_;
  const Clock::time_point until_;
};

}  // namespace

std::shared_ptr<const PairProgress> pair_progress(gloo::Context& mesh, int peer) {
  if (peer < 0 || peer >= mesh.size || peer == mesh.rank) return nullptr;
  auto* pair = dynamic_cast<ProvingPair*>(mesh.getPair(peer).get());
  return pair != nullptr ? pair->progress() : nullptr;
}

std::vector<std::shared_ptr<const PairProgress>> mesh_progress(gloo::Context& mesh) {
  std::vector<std::shared_ptr<const PairProgress>> all;
  for (int peer = 0; peer < mesh.size; ++peer)
    if (auto p = pair_progress(mesh, peer)) all.push_back(std::move(p));
  return all;
}

PairProgress::Clock::time_point latest(
    const std::vector<std::shared_ptr<const PairProgress>>& all) {
  PairProgress::Clock::time_point t{};
  for (const auto& p : all) t = std::max(t, p->last());
  return t;
}

std::shared_ptr<gloo::transport::Device> make_proving_device(
    const std::string& address, std::shared_ptr<const SessionKeys> keys, Clock::time_point until) {
  return std::make_shared<ProvingDevice>(tcp::attr(address.c_str()), std::move(keys), until);
}

}  // namespace wt::plugins
