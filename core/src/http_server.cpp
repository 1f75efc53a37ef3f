#include <wt/http_server.hpp>

#include <wt/error.hpp>
#include <wt/log.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <thread>

namespace wt {

struct HttpServer::Impl {
  httplib::Server server;
  std::thread thread;
};

namespace {

int http_status(wt_status code) {
  switch (code) {
    case WT_ERR_INVALID_ARGUMENT:
    case WT_ERR_NOT_FOUND:
    case WT_ERR_INCOMPATIBLE:
    case WT_ERR_ABORTED:
      return 400;
    case WT_ERR_STATE:
      return 409;
    default:
      return 500;
  }
}

void reply(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

void reply_error(httplib::Response& res, int status, const std::string& message) {
  reply(res, status, {{"detail", message}});
}

// Runs a route body: wt errors map to their HTTP status, anything else to 500.
template <typename F>
void guarded(httplib::Response& res, const char* route, F&& f) {
  try {
    f();
  } catch (const Error& e) {
    logger()->warn("{}: {}", route, e.what());
    reply_error(res, http_status(e.code()), e.what());
  } catch (const std::exception& e) {
    logger()->error("{}: {}", route, e.what());
    reply_error(res, 500, e.what());
  }
}

// The JSON object of a request; the route replies 400 itself when this returns false.
bool parse_body(const httplib::Request& req, httplib::Response& res, nlohmann::json& out) {
  try {
    out = nlohmann::json::parse(req.body);
  } catch (const nlohmann::json::parse_error&) {
    reply_error(res, 400, "Invalid JSON format");
    return false;
  }
  if (!out.is_object()) {
    reply_error(res, 400, "Request body must be a JSON object");
    return false;
  }
  return true;
}

}  // namespace

HttpServer::HttpServer(Receiver& receiver, Options options)
    : impl_(std::make_unique<Impl>()), options_(std::move(options)) {
  auto& s = impl_->server;
  Receiver* r = &receiver;
  s.set_payload_max_length(options_.max_body_bytes);
  s.set_tcp_nodelay(true);
  s.set_keep_alive_max_count(1000000);
  s.set_keep_alive_timeout(2);  // stop() waits for idle kept-alive connections this long at most
  s.set_read_timeout(std::chrono::seconds(300));
  s.set_write_timeout(std::chrono::seconds(300));
  if (!options_.bearer_token.empty()) {
    std::string expected = "Bearer " + options_.bearer_token;
    s.set_pre_routing_handler([expected](const httplib::Request& req, httplib::Response& res) {
      if (req.get_header_value("Authorization") == expected)
        return httplib::Server::HandlerResponse::Unhandled;
      reply_error(res, 401, "missing or wrong bearer token");
      return httplib::Server::HandlerResponse::Handled;
    });
  }
  s.Post("/init_weight_transfer_engine", [r](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body;
    if (!parse_body(req, res, body)) return;
    if (!body.contains("init_info"))
      return reply_error(res, 400, "Missing 'init_info' in request body");
    guarded(res, "/init_weight_transfer_engine", [&] {
      r->init_weight_transfer_engine(body["init_info"]);
      reply(res, 200, {{"message", "Weight transfer initialized"}});
    });
  });
  s.Post("/start_weight_update", [r](const httplib::Request&, httplib::Response& res) {
    guarded(res, "/start_weight_update", [&] {
      r->start_weight_update();
      reply(res, 200, {{"message", "Weight update started"}});
    });
  });
  s.Post("/update_weights", [r](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body;
    if (!parse_body(req, res, body)) return;
    if (!body.contains("update_info"))
      return reply_error(res, 400, "Missing 'update_info' in request body");
    guarded(res, "/update_weights", [&] {
      r->update_weights(body["update_info"]);
      reply(res, 200, {{"message", "Weights updated"}});
    });
  });
  s.Post("/finish_weight_update", [r](const httplib::Request& req, httplib::Response& res) {
    std::optional<std::string> version;
    if (!req.body.empty()) {
      nlohmann::json body;
      if (!parse_body(req, res, body)) return;
      for (auto it = body.begin(); it != body.end(); ++it)
        if (it.key() != "weight_version")
          return reply_error(res, 400, fmt::format("unknown field '{}' in request body", it.key()));
      if (body.contains("weight_version") && !body["weight_version"].is_null()) {
        if (!body["weight_version"].is_string())
          return reply_error(res, 400, "field 'weight_version' must be a string");
        version = body["weight_version"].get<std::string>();
      }
    }
    guarded(res, "/finish_weight_update", [&] {
      r->finish_weight_update(version);
      reply(res, 200, {{"message", "Weight update finished"}});
    });
  });
  s.Post("/update_weight_version", [r](const httplib::Request& req, httplib::Response& res) {
    nlohmann::json body;
    if (!parse_body(req, res, body)) return;
    if (!body.contains("new_version") || !body["new_version"].is_string())
      return reply_error(res, 400, "field 'new_version' must be a string");
    guarded(res, "/update_weight_version", [&] {
      if (r->session_active()) throw Error(WT_ERR_STATE, "a weight update is active");
      r->set_weight_version(body["new_version"].get<std::string>());
      reply(res, 200, {{"success", true}, {"new_version", body["new_version"]}});
    });
  });
  s.Get("/weight_info", [r](const httplib::Request&, httplib::Response& res) {
    auto v = r->weight_version();
    reply(res, 200, {{"weight_version", v ? nlohmann::json(*v) : nlohmann::json(nullptr)}});
  });
  s.Get("/get_world_size", [r](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"world_size", r->world_size()}});
  });
  s.Get("/weight_checksums", [r](const httplib::Request&, httplib::Response& res) {
    guarded(res, "/weight_checksums", [&] {
      auto v = r->weight_version();
      reply(res, 200,
            {{"algorithm", "xxh3-64"},
             {"weight_version", v ? nlohmann::json(*v) : nlohmann::json(nullptr)},
             {"checksums", r->checksums()}});
    });
  });
  s.Get("/health", [r](const httplib::Request&, httplib::Response& res) {
    reply(res, 200, {{"status", "ok"}, {"backend", r->backend()}});
  });
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  auto& s = impl_->server;
  port_ = options_.port == 0 ? s.bind_to_any_port(options_.host)
                             : (s.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    throw Error(WT_ERR_SYSTEM,
                fmt::format("cannot listen on {}:{} (in use, or not an address of this host)",
                            options_.host, options_.port));
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
  // stop() is a no-op until the accept loop runs, so do not return before it does.
  while (!impl_->server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpServer::stop() {
  impl_->server.stop();
  if (impl_->thread.joinable() && impl_->thread.get_id() != std::this_thread::get_id())
    impl_->thread.join();
}

std::string HttpServer::url() const {
  return fmt::format("http://{}:{}", options_.host, port_);
}

}  // namespace wt
