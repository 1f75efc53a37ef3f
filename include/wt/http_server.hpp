// The reference receiver's HTTP front end: vLLM's weight-transfer routes over a Receiver.
//
//   POST /init_weight_transfer_engine  {"init_info": {...}}        -> {"message": "Weight transfer
//   initialized"} POST /start_weight_update          (body ignored)              -> {"message":
//   "Weight update started"} POST /update_weights               {"update_info": {...}|[...]} ->
//   {"message": "Weights updated"} POST /finish_weight_update         [{"weight_version": "..."}]
//   -> {"message": "Weight update finished"} POST /update_weight_version        {"new_version":
//   "..."}      -> {"success": true, "new_version": ...} GET  /weight_info -> {"weight_version":
//   ...} GET  /get_world_size[?include_dp=true]                         -> {"world_size": 1} GET
//   /weight_checksums   (wt's own)  -> {"algorithm": "xxh3-64", "weight_version", "checksums":
//   {name: hex}} GET  /health
// Errors: {"detail": "<message>"} with 400 (bad request body or update), 401 (token), 409 (session
// rule), 413 (body over the limit), 500 (anything else).
#pragma once

#include <wt/receiver.hpp>

#include <cstddef>
#include <memory>
#include <string>

namespace wt {

class HttpServer {
 public:
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;              // 0: any free port
    std::string bearer_token;  // empty: no authentication
    std::size_t max_body_bytes = std::size_t{256} << 20;
  };
  HttpServer(Receiver& receiver, Options options);
  ~HttpServer();  // stops and joins

  // Binds (throws wt::Error naming host:port when it cannot) and serves on a background thread.
  void start();
  void stop();
  int port() const { return port_; }
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Options options_;
  int port_ = 0;
};

}  // namespace wt
