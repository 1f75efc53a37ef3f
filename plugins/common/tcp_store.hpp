// The rendezvous store the nccl and sparse_nccl backends form their Gloo group with: the sender
// hosts it at master_address:master_port (the Debian Gloo has no TCP store), every rank reaches
// it as a gloo::rendezvous::Store. Compiled into each plugin that uses it (plugins/common).
//
// Wire (one TCP connection per client, requests answered in order):
//   request  = op:u8  key_len:u32le  key  [value_len:u32le value]   (value only for SET)
//   SET      -> status:u8 (0)
//   GET      -> status:u8 (0 found, 1 missing)  [value_len:u32le value]
// Bounds, so a hostile or broken peer cannot hold the server: keys up to 4 KiB, values up to
// 16 MiB, at most 64 connections and 4,096 keys; a request must arrive whole within the
// request deadline (a client sending a byte now and then is dropped); the server never blocks on
// one client. Every client call has a deadline and fails with WT_ERR_TIMEOUT naming the keys.
#pragma once

#include <gloo/rendezvous/store.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace wt::plugins {

class TcpStoreServer {
 public:
  struct Limits {
    std::size_t max_key = 4096;
    std::size_t max_value = std::size_t{16} << 20;
    std::size_t max_keys = 4096;
    std::size_t max_connections = 64;
    std::chrono::milliseconds request_deadline{10'000};
  };
  // Listens on address:port (port 0: any free port, see port()). Throws sdk::Error
  // (WT_ERR_SYSTEM) naming the address when it cannot.
  TcpStoreServer(const std::string& address, int port, Limits limits);
  TcpStoreServer(const std::string& address, int port) : TcpStoreServer(address, port, Limits{}) {}
  ~TcpStoreServer();  // stops serving and closes every connection
  TcpStoreServer(const TcpStoreServer&) = delete;
  TcpStoreServer& operator=(const TcpStoreServer&) = delete;

  int port() const { return port_; }
  std::size_t connections_dropped() const { return dropped_.load(); }

 private:
  void serve();
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // a pipe: the destructor writes to stop serve()
  int port_ = 0;
  Limits limits_;
  std::map<std::string, std::vector<char>> data_;  // only serve() touches it
  std::atomic<std::size_t> dropped_{0};
  std::thread thread_;
};

class TcpStoreClient final : public gloo::rendezvous::Store {
 public:
  // Connects, retrying until `deadline` passes (the server may not be up yet).
  TcpStoreClient(const std::string& address, int port, std::chrono::milliseconds deadline);
  ~TcpStoreClient() override;

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;  // waits for the key (deadline)
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  // One request and its answer; false when the key is missing (GET only).
  bool request(uint8_t op, const std::string& key, const std::vector<char>* value,
               std::vector<char>* out, std::chrono::steady_clock::time_point deadline);
  std::string where_;
  std::chrono::milliseconds deadline_;
  int fd_ = -1;
  std::mutex mu_;  // one request at a time on the connection
};

}  // namespace wt::plugins
