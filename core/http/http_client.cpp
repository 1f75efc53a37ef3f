#include <wt/services/http_client.hpp>

#include <wt/error.hpp>
#include <wt/json_parse.hpp>

#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>

namespace wt {
namespace {

// The server's message from an error body ({"detail": ...} from wt serve and FastAPI).
std::string server_message(const std::string& body) {
  try {
    auto j = parse_json(body);
    if (j.is_object() && j.contains("detail"))
      return j["detail"].is_string() ? j["detail"].get<std::string>() : j["detail"].dump();
    if (j.is_object() && j.contains("error"))
      return j["error"].is_string() ? j["error"].get<std::string>() : j["error"].dump();
  } catch (...) {
  }
  return body.size() > 500 ? body.substr(0, 500) + "..." : body;
}

// Why a call got no answer, in the words of what happened to the receiver (httplib's own names,
// "Read" or "Connection", say nothing of it). A read that fails before its deadline is a
// connection the receiver closed: it died, or was stopped, mid-call.
std::string no_answer(const std::string& base, httplib::Error err,
                      std::chrono::steady_clock::duration elapsed,
                      std::chrono::milliseconds timeout) {
  const double limit_s = std::chrono::duration<double>(timeout).count();
  const bool ran_out = elapsed + std::chrono::milliseconds(50) >= timeout;
  switch (err) {
    case httplib::Error::Connection:
      return fmt::format("the receiver at {} refused the connection (is it running?)", base);
    case httplib::Error::ConnectionTimeout:
      return fmt::format("the receiver at {} did not accept the connection within {:g} s", base,
                         limit_s);
    case httplib::Error::Read:
    case httplib::Error::Write:
      if (ran_out)
        return fmt::format("the receiver at {} did not answer within {:g} s", base, limit_s);
      return fmt::format(
          "the receiver at {} closed the connection after {:.1f} s without an answer", base,
          std::chrono::duration<double>(elapsed).count());
    default:
      return fmt::format("no answer from the receiver at {}: {}", base, httplib::to_string(err));
  }
}

}  // namespace

HttpClient::HttpClient(std::string base_url, Options options)
    : base_(std::move(base_url)), options_(options) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
  if (base_.rfind("http://", 0) != 0)
    throw Error(
        WT_ERR_INVALID_ARGUMENT,
        fmt::format("receiver URL '{}' must start with http:// (https is not built in)", base_));
}

HttpClient::~HttpClient() = default;

nlohmann::json HttpClient::post(const std::string& path, const std::string* body, bool* not_found,
                                bool abortable, std::chrono::milliseconds deadline) {
  auto t = deadline.count() > 0 ? std::min(deadline, options_.timeout) : options_.timeout;
  auto make = [&] {
    auto c = std::make_unique<httplib::Client>(base_);
    c->set_keep_alive(true);
    c->set_tcp_nodelay(true);
    c->set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    c->set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    c->set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
    return c;
  };
  // Calls share kept-alive connections; one made while another is in flight (an engine with
  // several updates outstanding, or giving up a round) takes its own and never waits for it.
  std::unique_ptr<httplib::Client> conn;
  uint64_t aborts_before = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!idle_.empty()) {
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
    if (!conn) conn = make();
    (abortable ? in_flight_ : ending_).insert(conn.get());
    aborts_before = aborts_;
  }
  auto& cli = *conn;
  // A kept-alive connection keeps the deadlines it was made with: this call's are set anew.
  cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  cli.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(t));
  httplib::Headers headers;
  if (!options_.bearer_token.empty())
    headers.emplace("Authorization", "Bearer " + options_.bearer_token);
  const auto began = std::chrono::steady_clock::now();
  auto res = body ? cli.Post(path, headers, *body, "application/json") : cli.Post(path, headers);
  const auto elapsed = std::chrono::steady_clock::now() - began;
  std::string where = "POST " + base_ + path;
  bool aborted = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(conn.get());
    ending_.erase(conn.get());
    // An answer that arrived stands (a finish the server committed is not reported as aborted);
    // only a call that got none was interrupted.
    aborted = abortable && !res && aborts_ != aborts_before;
    // A failed or interrupted connection is dropped, a good one kept for the next call.
    if (res && idle_.size() < 8) idle_.push_back(std::move(conn));
  }
  if (aborted)
    throw Error(WT_ERR_ABORTED, fmt::format("{} was interrupted: the engine was aborted", where));
  if (!res) {
    auto err = res.error();
    wt_status code = (err == httplib::Error::Read || err == httplib::Error::Write ||
                      err == httplib::Error::ConnectionTimeout)
                         ? WT_ERR_TIMEOUT
                         : WT_ERR_REMOTE;
    // A receiver that closed the connection is gone, not slow.
    if ((err == httplib::Error::Read || err == httplib::Error::Write) &&
        elapsed + std::chrono::milliseconds(50) < t)
      code = WT_ERR_REMOTE;
    throw Error(code, fmt::format("{} failed: {}", where, no_answer(base_, err, elapsed, t)));
  }
  if (res->status == 404 && not_found != nullptr) {
    *not_found = true;
    return {};
  }
  if (res->status < 200 || res->status >= 300)
    throw Error(WT_ERR_REMOTE, fmt::format("{} answered HTTP {}: {}", where, res->status,
                                           server_message(res->body)));
  try {
    return res->body.empty() ? nlohmann::json() : parse_json(res->body);
  } catch (const JsonError&) {
    return nlohmann::json(res->body);
  }
}

void HttpClient::init_weight_transfer_engine(std::string_view init_info_json) {
  std::string body = R"({"init_info":)" + std::string(init_info_json) + "}";
  post("/init_weight_transfer_engine", &body);
}

void HttpClient::start_weight_update() {
  post("/start_weight_update", nullptr);
}

void HttpClient::update_weights(std::string_view update_info_json) {
  std::string body = R"({"update_info":)" + std::string(update_info_json) + "}";
  post("/update_weights", &body);
}

void HttpClient::finish_weight_update(const std::optional<std::string>& weight_version) {
  if (weight_version) {
    std::string body = nlohmann::json{{"weight_version", *weight_version}}.dump();
    post("/finish_weight_update", &body);
  } else {
    post("/finish_weight_update", nullptr);
  }
}

// Ending a failed round is a courtesy to a receiver that is still there, and it answers at once
// (it aborts its engine); one the round lost (a cut link, a dead host) must not hold up the
// trainer's report for the whole control-plane deadline.
constexpr std::chrono::milliseconds kEndDeadline{3000};

void HttpClient::end_weight_update(std::string_view reason) {
  if (!no_end_route_) {
    std::string body = nlohmann::json{{"reason", std::string(reason)}}.dump();
    bool not_found = false;
    post("/end_weight_update", &body, &not_found, /*abortable=*/false, kEndDeadline);
    if (!not_found) return;
    no_end_route_ = true;  // a stock vLLM server: end sessions the old way from now on
  }
  // The old way (see Client::end_weight_update): an update the server must refuse.
  std::string body =
      nlohmann::json{{"update_info", {{"wt_end_weight_update", std::string(reason)}}}}.dump();
  try {
    post("/update_weights", &body, nullptr, /*abortable=*/false, kEndDeadline);
  } catch (const Error&) {
  }
}

void HttpClient::abort_calls() {
  std::lock_guard<std::mutex> lock(mu_);
  ++aborts_;
  for (auto* c : in_flight_) c->stop();
}

void HttpClient::abandon_calls() {
  abort_calls();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* c : ending_) c->stop();
}

nlohmann::json HttpClient::get(const std::string& path) {
  httplib::Client cli(base_);
  cli.set_connection_timeout(
      std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout));
  cli.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(options_.timeout));
  httplib::Headers headers;
  if (!options_.bearer_token.empty())
    headers.emplace("Authorization", "Bearer " + options_.bearer_token);
  const auto began = std::chrono::steady_clock::now();
  auto res = cli.Get(path, headers);
  if (!res)
    throw Error(WT_ERR_REMOTE,
                fmt::format("GET {}{} failed: {}", base_, path,
                            no_answer(base_, res.error(), std::chrono::steady_clock::now() - began,
                                      options_.timeout)));
  if (res->status != 200)
    throw Error(WT_ERR_REMOTE, fmt::format("GET {}{} answered HTTP {}: {}", base_, path,
                                           res->status, server_message(res->body)));
  try {
    return parse_json(res->body);
  } catch (const JsonError& e) {
    throw Error(WT_ERR_REMOTE,
                fmt::format("GET {}{} answered with a body that is {}", base_, path, e.what()));
  }
}

namespace {

std::map<std::string, std::string> checksum_map(const nlohmann::json& j) {
  std::map<std::string, std::string> out;
  for (auto it = j.begin(); it != j.end(); ++it)
    out[it.key()] = it.value().is_string() ? it.value().get<std::string>() : it.value().dump();
  return out;
}

}  // namespace

std::map<std::string, std::string> HttpClient::weight_checksums() {
  auto j = get("/weight_checksums");
  if (j.is_object() && !j.contains("checksums") && j.contains("ranks") && j["ranks"].is_array())
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{} has {} worker ranks, each holding its own slice: read "
                            "weight_checksums_by_rank()",
                            base_, j["ranks"].size()));
  if (!j.is_object() || !j.contains("checksums") || !j["checksums"].is_object())
    throw Error(
        WT_ERR_REMOTE,
        fmt::format("GET {}/weight_checksums answered without a 'checksums' object", base_));
  return checksum_map(j["checksums"]);
}

std::vector<std::map<std::string, std::string>> HttpClient::weight_checksums_by_rank() {
  auto j = get("/weight_checksums");
  if (!j.is_object())
    throw Error(WT_ERR_REMOTE,
                fmt::format("GET {}/weight_checksums answered without an object", base_));
  std::vector<std::map<std::string, std::string>> out;
  if (!j.contains("ranks")) {  // a receiver of one worker rank that predates "ranks"
    if (!j.contains("checksums") || !j["checksums"].is_object())
      throw Error(
          WT_ERR_REMOTE,
          fmt::format("GET {}/weight_checksums answered without a 'checksums' object", base_));
    out.push_back(checksum_map(j["checksums"]));
    return out;
  }
  const auto& ranks = j["ranks"];
  if (!ranks.is_array() || ranks.empty())
    throw Error(WT_ERR_REMOTE,
                fmt::format("GET {}/weight_checksums: 'ranks' is not a non-empty list", base_));
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    const auto& r = ranks[k];
    if (!r.is_object() || !r.contains("rank") || r["rank"] != k || !r.contains("checksums") ||
        !r["checksums"].is_object())
      throw Error(WT_ERR_REMOTE,
                  fmt::format("GET {}/weight_checksums: ranks[{}] is not {{\"rank\": {}, "
                              "\"checksums\": {{...}}}}",
                              base_, k, k));
    out.push_back(checksum_map(r["checksums"]));
  }
  return out;
}

int HttpClient::world_size() {
  const nlohmann::json answer = get("/get_world_size");
  const auto it = answer.is_object() ? answer.find("world_size") : answer.end();
  if (it == answer.end())
    throw Error(WT_ERR_REMOTE, fmt::format("receiver {}: /get_world_size gave no world size ({})",
                                           base_, answer.dump()));
  const auto& v = *it;
  if (!v.is_number_integer())
    throw Error(WT_ERR_REMOTE, fmt::format("receiver {}: /get_world_size says {}, not an integer",
                                           base_, v.dump()));
  const bool negative = !v.is_number_unsigned() && v.get<int64_t>() < 0;
  if (negative || v.get<uint64_t>() < 1 || v.get<uint64_t>() > 65536)
    throw Error(WT_ERR_REMOTE, fmt::format("receiver {}: /get_world_size says {}, not in 1..65536",
                                           base_, v.dump()));
  return static_cast<int>(v.get<uint64_t>());
}

}  // namespace wt
