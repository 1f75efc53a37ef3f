// The trainer's HTTP client for vLLM-compatible servers (wt serve, or vLLM itself with
// VLLM_SERVER_DEV_MODE=1). Paths and bodies are vLLM's HTTPVLLMWeightSyncClient's exactly:
//   POST {base}/init_weight_transfer_engine  {"init_info": <init_info>}
//   POST {base}/start_weight_update          no body
//   POST {base}/update_weights               {"update_info": <update_info>}
//   POST {base}/finish_weight_update         {"weight_version": v} when given, else no body
//   POST {base}/end_weight_update            {"reason": r}   (wt serve; a server without this
//                                            route, such as vLLM, gets the fallback of
//                                            Client::end_weight_update instead, remembered)
// Every call has a deadline (default 300 s, as vLLM's). A non-2xx answer throws wt::Error
// (WT_ERR_REMOTE) carrying the status and the server's message; a deadline, WT_ERR_TIMEOUT.
#pragma once

#include <wt/requires_cxx20.hpp>

#include <wt/client.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace httplib {
class Client;
}

namespace wt {

class HttpClient : public Client {
 public:
  struct Options {
    std::chrono::milliseconds timeout{300'000};
    std::string bearer_token;
  };
  explicit HttpClient(std::string base_url, Options options);
  explicit HttpClient(std::string base_url) : HttpClient(std::move(base_url), Options{}) {}
  ~HttpClient() override;

  void init_weight_transfer_engine(std::string_view init_info_json) override;
  void start_weight_update() override;
  void update_weights(std::string_view update_info_json) override;
  void finish_weight_update(const std::optional<std::string>& weight_version) override;
  void end_weight_update(std::string_view reason) override;
  // Closes the connections of calls in flight; those that got no answer throw WT_ERR_ABORTED.
  // A call still connecting when it runs returns at its connection deadline instead. Ending an
  // update (the route, or its fallback) is not interrupted: it is how an aborted round is cleaned
  // up, and it has its own deadline.
  void abort_calls() override;
  void abandon_calls() override;

  // GET /get_world_size: the inference workers behind this URL (vLLM's route), checked to be an
  // integer in 1..65536 (read wide: 2^32 + 1 is refused, not narrowed to 1); WT_ERR_REMOTE naming
  // the URL otherwise.
  int world_size();

  // wt serve's extras, for verification: a receiver of one worker rank's checksums (refused,
  // naming the URL, for a receiver of several), and every worker rank's, in rank order.
  std::map<std::string, std::string> weight_checksums();
  std::vector<std::map<std::string, std::string>> weight_checksums_by_rank();
  nlohmann::json get(const std::string& path);

  const std::string& base_url() const { return base_; }

 private:
  // With not_found given, an HTTP 404 sets it instead of throwing. An abortable call is
  // interrupted by abort_calls(). `deadline` (> 0) shortens Options::timeout for this call.
  nlohmann::json post(const std::string& path, const std::string* body, bool* not_found = nullptr,
                      bool abortable = true,
                      std::chrono::milliseconds deadline = std::chrono::milliseconds(0));
  std::string base_;
  Options options_;
  // Kept-alive connections not in use; a call takes one (or opens one) and puts it back.
  std::mutex mu_;
  std::vector<std::unique_ptr<httplib::Client>> idle_;
  std::set<httplib::Client*> in_flight_;  // for abort_calls()
  std::set<httplib::Client*> ending_;     // the calls abort_calls() leaves, for abandon_calls()
  uint64_t aborts_ = 0;                   // abort_calls() so far, guarded by mu_
  std::atomic<bool> no_end_route_{false};
};

}  // namespace wt
