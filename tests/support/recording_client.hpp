// A client that records the control-plane calls and their exact payloads, and can be told to
// fail a call. Optionally forwards to another client (e.g. an in-process worker).
#pragma once

#include <wt/client.hpp>
#include <wt/error.hpp>

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace wt::test {

class RecordingClient : public Client {
 public:
  struct Call {
    std::string method;
    std::string payload;
  };
  explicit RecordingClient(Client* forward = nullptr) : forward_(forward) {}

  void init_weight_transfer_engine(std::string_view j) override {
    record("init", std::string(j));
    if (forward_) forward_->init_weight_transfer_engine(j);
  }
  void start_weight_update() override {
    record("start", "");
    if (forward_) forward_->start_weight_update();
  }
  void update_weights(std::string_view j) override {
    record("update", std::string(j));
    if (forward_) forward_->update_weights(j);
  }
  void finish_weight_update(const std::optional<std::string>& v) override {
    record("finish", v.value_or(""));
    if (forward_) forward_->finish_weight_update(v);
  }

  std::vector<Call> calls() const {
    std::lock_guard<std::mutex> l(mu_);
    return calls_;
  }
  std::vector<std::string> methods() const {
    std::vector<std::string> m;
    for (auto& c : calls()) m.push_back(c.method);
    return m;
  }
  // Makes the next call of `method` throw wt::Error(WT_ERR_REMOTE, message).
  void fail_next(const std::string& method, const std::string& message) {
    std::lock_guard<std::mutex> l(mu_);
    fail_method_ = method;
    fail_message_ = message;
  }

 private:
  void record(const std::string& method, std::string payload) {
    std::lock_guard<std::mutex> l(mu_);
    calls_.push_back({method, std::move(payload)});
    if (fail_method_ == method) {
      fail_method_.clear();
      throw Error(WT_ERR_REMOTE, fail_message_);
    }
  }
  Client* forward_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::string fail_method_, fail_message_;
};

}  // namespace wt::test
