// A small inference engine that embeds wt's receiving side: it owns its weights, serves vLLM's
// weight-transfer routes itself (cpp-httplib), and lets the backend's worker engine write each
// round straight into its memory. Two copies of every parameter, live and next: a round is
// written into `next` and swapped in at finish, so a round that does not finish never shows.
//
//   engine --backend nccl --port 8000        # then: wt launch with receiver.url at that port
//
// docs/engines.md walks through it; tests/example_engine_test.sh runs it under `wt launch`.
#include <wt/checksum.hpp>
#include <wt/dtype.hpp>
#include <wt/engine.hpp>
#include <wt/error.hpp>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

using nlohmann::json;

// One parameter as the engine keeps it: host memory, compact row-major.
struct Param {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<unsigned char> live, next;
  DLTensor view(std::vector<unsigned char>& bytes) {
    return DLTensor{bytes.data(),
                    {kDLCPU, 0},
                    static_cast<int32_t>(shape.size()),
                    dtype,
                    shape.data(),
                    nullptr,
                    0};
  }
};

// Where the worker engine writes a round: each parameter's `next` buffer, made at first sight.
class Model final : public wt::Loader {
 public:
  std::map<std::string, Param> params;
  std::vector<std::string> written_now;  // filled this round

  std::optional<DLTensor> destination(const wt::ParamMeta& p) override {
    Param& slot = params[p.name];
    std::size_t bytes = wt::element_size(p.dtype);
    for (int64_t d : p.shape) bytes *= static_cast<std::size_t>(d);
    if (slot.next.size() != bytes || slot.shape != p.shape || !(slot.dtype == p.dtype)) {
      slot.dtype = p.dtype;
      slot.shape = p.shape;
      slot.next.assign(bytes, 0);
      slot.live.resize(bytes);
    }
    return slot.view(slot.next);
  }
  void written(const std::string& name) override { written_now.push_back(name); }
  void load(std::span<const wt_tensor>) override {  // only for what had no destination
    throw wt::Error(WT_ERR_UNSUPPORTED, "this engine takes every tensor in place");
  }
  void commit() {  // the round finished: what it wrote becomes live
    for (const std::string& name : written_now) std::swap(params[name].live, params[name].next);
    written_now.clear();
  }
};

int main(int argc, char** argv) {
  std::string backend = "nccl";
  int port = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--backend") backend = argv[i + 1];
    if (flag == "--port") port = std::stoi(argv[i + 1]);
  }
  Model model;
  std::unique_ptr<wt::WorkerEngine> worker;
  std::optional<std::string> version;
  bool active = false;
  std::mutex session;  // one control call at a time, as vLLM's session rules want

  httplib::Server http;
  http.set_tcp_nodelay(true);
  auto route = [&](const std::string& path, auto handle) {
    http.Post(path, [&, handle](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> l(session);
      try {
        const json body = req.body.empty() ? json::object() : json::parse(req.body);
        res.set_content(json{{"message", handle(body)}}.dump(), "application/json");
      } catch (const std::exception& e) {  // a failed call ends the round: the next one starts anew
        if (worker && active) worker->abort();
        model.written_now.clear();
        active = false;
        res.status = 400;
        res.set_content(json{{"detail", e.what()}}.dump(), "application/json");
      }
    });
  };
  route("/init_weight_transfer_engine", [&](const json& body) {
    if (worker && active) worker->abort();  // a new trainer: the old round is over
    active = false;
    model.written_now.clear();
    worker.reset();
    worker = wt::WorkerEngine::create(backend, body.at("init_info").dump(), wt::WorkerOptions{});
    return "Weight transfer initialized";
  });
  route("/start_weight_update", [&](const json&) {
    if (!worker) throw wt::Error(WT_ERR_STATE, "call init_weight_transfer_engine first");
    if (active) throw wt::Error(WT_ERR_STATE, "a weight update is already active");
    worker->start();
    active = true;
    return "Weight update started";
  });
  route("/update_weights", [&](const json& body) {
    if (!active) throw wt::Error(WT_ERR_STATE, "start_weight_update must be called first");
    worker->receive(body.at("update_info").dump(), model);
    return "Weights updated";
  });
  route("/finish_weight_update", [&](const json& body) {
    if (!active) throw wt::Error(WT_ERR_STATE, "start_weight_update must be called first");
    worker->finish();
    model.commit();
    active = false;
    if (body.contains("weight_version") && body["weight_version"].is_string())
      version = body["weight_version"].get<std::string>();
    return "Weight update finished";
  });
  route("/end_weight_update", [&](const json&) {  // wt's own: the trainer gave the round up
    if (worker && active) worker->abort();
    model.written_now.clear();
    active = false;
    return "Weight update ended";
  });
  http.Get("/get_world_size", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(R"({"world_size": 1})", "application/json");
  });
  http.Get("/weight_checksums", [&](const httplib::Request&, httplib::Response& res) {
    std::lock_guard<std::mutex> l(session);
    json sums = json::object();
    for (auto& [name, p] : model.params) sums[name] = wt::checksum_tensor(p.view(p.live));
    res.set_content(json{{"algorithm", "xxh3-64"},
                         {"weight_version", version ? json(*version) : json(nullptr)},
                         {"checksums", sums}}
                        .dump(),
                    "application/json");
  });
  port = port == 0 ? http.bind_to_any_port("127.0.0.1")
                   : (http.bind_to_port("127.0.0.1", port) ? port : -1);
  if (port < 0) {
    std::fprintf(stderr, "engine: cannot listen on 127.0.0.1\n");
    return 1;
  }
  std::printf("engine: listening on http://127.0.0.1:%d (backend %s)\n", port, backend.c_str());
  std::fflush(stdout);
  http.listen_after_bind();
}
