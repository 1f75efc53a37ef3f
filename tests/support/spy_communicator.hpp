// A communicator that records every broadcast (where from, how many bytes, the dtype, the phase
// and a copy of the bytes) instead of moving them: the nccl backends' engine tests put it where
// Gloo or NCCL would be, through the engines' communicator factory.
#pragma once

#include "../../plugins/common/communicator.hpp"

#include <memory>
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

}  // namespace wt::test
