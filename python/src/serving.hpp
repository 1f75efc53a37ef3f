// serve() of wt.Receiver and wt.EngineSession: wt's HTTP server (vLLM's routes) over what they
// hold, at host:port, a bearer token when given.
#pragma once

#include <wt/error.hpp>
#include <wt/services/http_server.hpp>

#include <memory>
#include <string>

namespace wt::python {

// `routes`: a Receiver or any WeightRoutes. Refused when `current` already serves.
template <class Routes>
std::unique_ptr<HttpServer> start_serving(Routes& routes,
                                          const std::unique_ptr<HttpServer>& current,
                                          const char* what, const std::string& host, int port,
                                          const std::string& token) {
  if (current)
    throw Error(WT_ERR_STATE, std::string(what) + " already serves at " + current->url());
  HttpServer::Options o;
  o.host = host;
  o.port = port;
  o.bearer_token = token;
  auto server = std::make_unique<HttpServer>(routes, o);
  server->start();
  return server;
}

}  // namespace wt::python
