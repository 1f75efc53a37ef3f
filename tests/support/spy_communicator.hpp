// A communicator that records every broadcast (where from, how many bytes, the dtype, the phase
// and a copy of the bytes) instead of moving them: the nccl backends' engine tests put it where
// Gloo or NCCL would be, through the engines' communicator factory.
#pragma once

#include "../../plugins/common/communicator.hpp"

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace wt::test {

struct Broadcast {
  const void* at;
  std::size_t bytes;
  DLDataType dtype;
  std::string what;
  std::vector<unsigned char> data;
};

class SpyCommunicator : public plugins::Communicator {
 public:
  explicit SpyCommunicator(std::shared_ptr<std::vector<Broadcast>> log) : log_(std::move(log)) {}
  void broadcast(void* data, std::size_t bytes, DLDataType dtype, int,
                 const std::string& what) override {
    auto* p = static_cast<unsigned char*>(data);
    log_->push_back({data, bytes, dtype, what, std::vector<unsigned char>(p, p + bytes)});
  }
  void abort() override {}
  bool broken() const override { return false; }

 private:
  std::shared_ptr<std::vector<Broadcast>> log_;
};

// The factory to hand an engine, and what it saw: `made` domains, `log` broadcasts.
struct Spy {
  std::shared_ptr<std::vector<Broadcast>> log = std::make_shared<std::vector<Broadcast>>();
  int made = 0;
  plugins::CommunicatorFactory factory() {
    return [this](const plugins::CommunicatorOptions&) {
      ++made;
      return std::make_unique<SpyCommunicator>(log);
    };
  }
};

// A communicator standing in for the sender on a worker's side: each broadcast receives the next
// bytes of what the sender would send, and where it was received into is recorded.
class FeedingCommunicator : public plugins::Communicator {
 public:
  FeedingCommunicator(const std::vector<unsigned char>& stream, std::vector<const void*>& into)
      : stream_(stream), into_(into) {}
  void broadcast(void* data, std::size_t bytes, DLDataType, int, const std::string&) override {
    if (at_ + bytes > stream_.size())
      throw std::runtime_error("the worker received more than the sender sent");
    std::memcpy(data, stream_.data() + at_, bytes);
    at_ += bytes;
    into_.push_back(data);
  }
  void abort() override {}
  bool broken() const override { return false; }

 private:
  const std::vector<unsigned char>& stream_;
  std::vector<const void*>& into_;
  std::size_t at_ = 0;
};

}  // namespace wt::test
