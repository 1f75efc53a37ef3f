// vLLM's weight-transfer routes over any WeightRoutes: the reference receiver (a Receiver, or a
// ReceiverGroup of T worker ranks: `wt serve --tensor-parallel-size T`), or an engine's own memory
// (EngineSession).
//
// Routes (request bodies are JSON objects; answers are JSON, status 200):
//
//   POST /init_weight_transfer_engine      {"init_info": {...}}
//        -> {"message": "Weight transfer initialized"}
//   POST /start_weight_update              body ignored (may be absent)
//        -> {"message": "Weight update started"}
//   POST /update_weights                   {"update_info": {...} | [{...}]}
//        -> {"message": "Weights updated"}
//   POST /finish_weight_update             body absent, or {"weight_version": "..." | null}
//        -> {"message": "Weight update finished"}
//   POST /end_weight_update  (wt's own)    body absent, or {"reason": "..."}
//        -> {"message": "Weight update ended"}   (also when none was active)
//   POST /update_weight_version            {"new_version": "..."}
//        -> {"success": true, "new_version": "..."}
//   GET  /weight_info                      -> {"weight_version": "..." | null}
//   GET  /get_world_size[?include_dp=true] -> {"world_size": T}   (T: the group's worker ranks)
//   GET  /weight_checksums   (wt's own)    -> {"algorithm": "xxh3-64", "weight_version": ...,
//                                              "checksums": {"<name>": "<hex>", ...},  (T = 1)
//                                              "ranks": [{"rank": k, "checksums": {...}}, ...]}
//        "ranks" has what each worker rank holds (its TP slice); "checksums" is there only when
//        there is one rank, so a client that ignores the ranks cannot verify a group wrongly.
//   GET  /health                           -> {"status": "ok", "backend": "<backend>"}
//
// Errors, always {"detail": "<sentence>"}:
//
//   400  body not usable: "Invalid JSON format" (syntax, as vLLM says it), "Invalid JSON
//        format: <why>" (nested deeper than max_json_depth, more than max_json_values values,
//        number out of range); a missing or mistyped field; a refused update (which ends the
//        session); a malformed request line, header or Content-Length
//   401  missing or wrong bearer token (checked before any of the body is read)
//   404  no such route               405  a route with another method
//   408  request not received in time (see Connections); the connection is closed
//   409  session rule (start while active, update/finish before start, version change mid-update)
//   411  Transfer-Encoding (chunked) bodies are not accepted: send a Content-Length
//   413  Content-Length over max_body_bytes, answered before any of the body is read
//   415  Content-Encoding (gzip, br, ...) or a multipart body
//   416  malformed Range header (a valid one is ignored: answers are always whole)
//   431  request line and headers over max_header_bytes
//   500  anything else, an escaping exception included
//
// Connections: the request line and headers must arrive within header_timeout in total (counted
// from accept, or from the first byte of a later request on a kept-alive connection), not per
// read, so a client sending a byte now and then cannot hold a thread. A body must arrive within
// body_timeout + Content-Length / body_min_bytes_per_second (the same allowance bounds writing
// an answer). A request without Content-Length and without Transfer-Encoding has no body
// (RFC 9112 section 6.3), whatever its method. A request that misses its deadline gets 408 when
// some of it had arrived, and its connection is closed. A connection is also closed after a
// request that could not be parsed, and after a refusal given without reading the body the
// request announced (400, 401, 404, 405, 411, 413, 415, all answered before the body is read).
// An idle kept-alive connection is closed after idle_timeout. When a connection waits for one of
// the `threads`, the server is under pressure: every answer then closes its connection, and a
// connection that idles or waits for its headers more than 100 ms gives its thread up, so no
// number of idle, polling, unauthenticated or slow clients keeps a control call out for long. A
// 401 always closes its connection. Handlers themselves have no
// deadline (loading GBs may take long). stop() ends every connection waiting on its client at
// once, and waits only for handlers already running.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/services/receiver.hpp>
#include <wt/services/receiver_group.hpp>
#include <wt/services/weight_routes.hpp>

#include <chrono>
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
    std::size_t max_header_bytes = std::size_t{64} << 10;  // request line + headers
    // JSON bounds for every request body (see wt/json_parse.hpp): a DOM costs 16-100 bytes per
    // value, so max_json_values bounds what parsing one body may allocate.
    std::size_t max_json_depth = 64;
    std::size_t max_json_values = std::size_t{1} << 22;
    std::chrono::milliseconds header_timeout{10'000};
    std::chrono::milliseconds idle_timeout{5'000};
    std::chrono::milliseconds body_timeout{10'000};
    std::size_t body_min_bytes_per_second = std::size_t{4} << 20;
    // Connections served at once; more wait for a thread (their header deadline runs meanwhile).
    unsigned threads = 64;
  };
  HttpServer(Receiver& receiver, Options options);  // one worker rank
  // Any implementation of the routes: a ReceiverGroup (`wt serve`), an EngineSession (an
  // engine's own memory, engine_session.hpp). `routes` must outlive the server.
  HttpServer(WeightRoutes& routes, Options options);
  ~HttpServer();  // stops and joins

  // Binds (throws wt::Error naming host:port when it cannot) and serves on a background thread.
  void start();
  void stop();
  int port() const { return port_; }
  std::string url() const;

 private:
  void route(WeightRoutes& routes);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  Options options_;
  int port_ = 0;
};

}  // namespace wt
