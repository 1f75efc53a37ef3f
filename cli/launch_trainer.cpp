#include "launch_trainer.hpp"

#include "cluster_trainer_group.hpp"
#include "device_option.hpp"
#include "device_source.hpp"
#include "sharded_source.hpp"

#include "block_fp8.hpp"
#include "block_fp8_layout.hpp"
#include "box_copy.hpp"
#include "engine_layout.hpp"
#include "m2n_plan.hpp"
#include "training_step.hpp"

#include <wt/checksum.hpp>
#include <wt/delta.hpp>
#include <wt/dtype.hpp>
#include <wt/registry.hpp>
#include <wt/services/fan_out_client.hpp>
#include <wt/services/gloo_trainer_group.hpp>
#include <wt/services/http_client.hpp>
#include <wt/services/safetensors.hpp>
#include <wt/wt.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>

namespace wt::cli {
namespace {

using Clock = std::chrono::steady_clock;

// Where emit() sends the events: set once by run_trainer_rank (one rank per process).
std::function<void(const nlohmann::json&)> g_sink;

void emit(const nlohmann::json& event) {
  static std::mutex mu;
  std::lock_guard<std::mutex> l(mu);
  if (g_sink) return g_sink(event);
  std::string line = event.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

// Counts the bytes a round has handed to the engine, for the progress bar.
class ProgressSource : public WeightSource {
 public:
  ProgressSource(SafetensorsSource& inner, bool report) : inner_(inner), report_(report) {}
  const std::vector<ParamMeta>& metadata() override { return inner_.metadata(); }
  void begin() override {
    bytes_ = 0;
    index_ = 0;
    inner_.begin();
  }
  bool next(wt_tensor& out) override {
    if (!inner_.next(out)) return false;
    bytes_ += inner_.bytes(index_++).size();
    auto now = Clock::now();
    if (report_ && now - last_ > std::chrono::milliseconds(100)) {
      last_ = now;
      emit({{"event", "progress"},
            {"round", round},
            {"bytes", bytes_},
            {"total", inner_.total_bytes()}});
    }
    return true;
  }
  void end() override { inner_.end(); }
  int round = 0;

 private:
  SafetensorsSource& inner_;
  bool report_;
  uint64_t bytes_ = 0;
  std::size_t index_ = 0;
  Clock::time_point last_{};
};

// What worker rank k (counted across the receivers, each receiver's ranks in order) holds under
// m2n's `tensor_parallel` and `tp_rules`: the slice of TP rank k % T that the plan sends it, and
// under an `engine_layout` the engine's tensors composed of those slices.
class TensorParallelSlices {
 public:
  explicit TensorParallelSlices(const LaunchConfig& cfg) {
    const auto& ii = cfg.init_info;
    if (cfg.backend != "m2n") return;
    if (ii.contains("engine_layout"))
      engine_rules_ = m2n::engine_rules_from_json(ii.at("engine_layout"), "engine_layout");
    fp8_ = ii.value("wire_dtype", "as-held") == "float8_e4m3fn";
    ue8m0_ = ii.value("fp8_scales", "fp32") == "ue8m0";
    if (!ii.contains("tensor_parallel")) return;
    tp_ = ii.at("tensor_parallel").get<int>();
    if (ii.contains("tp_rules"))
      for (const auto& r : ii.at("tp_rules"))
        rules_.emplace_back(r.at("match").get<std::string>(), r.at("dim").get<int>());
  }
  int dim_of(const ParamMeta& m) const {
    for (const auto& [match, dim] : rules_)
      if (m2n::glob_match(match, m.name)) return dim;
    return -1;
  }
  bool splits(const ParamMeta& m, int) const { return tp_ > 1 && dim_of(m) >= 0; }
  std::string checksum(const ParamMeta& m, std::span<const unsigned char> full, int k) const {
    const auto slice = slice_of(m, full, k, tp_ > 1 ? dim_of(m) : -1);
    return checksum_bytes(slice.data(), slice.size());
  }
  // Whether the workers hold other tensors than the checkpoint's: composed, or block FP8.
  bool composes() const { return !engine_rules_.empty() || fp8_; }

  // The checkpoint as the plan sends it: with block FP8, each FP8 weight as its values and its
  // scales, quantized here from the whole tensor by the rule the trainer ranks follow shard by
  // shard (plugins/common/block_fp8.hpp): what arrives must equal it bit for bit.
  struct WireModel {
    std::vector<ParamMeta> meta;
    std::vector<int> tp_dim;  // a weight's scales split as the weight does, whatever their name
    std::vector<std::span<const unsigned char>> bytes;
    std::vector<std::vector<unsigned char>> owned;
  };
  WireModel wire_model(SafetensorsSource& checkpoint) const {
    WireModel w;
    const auto& meta = checkpoint.metadata();
    w.owned.reserve(2 * meta.size());  // spans into it stay valid
    for (std::size_t i = 0; i < meta.size(); ++i) {
      const ParamMeta& m = meta[i];
      if (!fp8_ ||
          !m2n::sent_as_block_fp8(m.name, m.shape, m.dtype, tp_ > 1 ? dim_of(m) : -1, tp_)) {
        w.meta.push_back(m);
        w.bytes.push_back(checkpoint.bytes(i));
        w.tp_dim.push_back(tp_ > 1 ? dim_of(m) : -1);
        continue;
      }
      const std::size_t nd = m.shape.size();
      const int64_t rows = m.shape[nd - 2], cols = m.shape[nd - 1];
      const int64_t brows = (rows + 127) / 128, bcols = (cols + 127) / 128;
      int64_t matrices = 1;
      for (std::size_t d = 0; d + 2 < nd; ++d) matrices *= m.shape[d];
      auto& q = w.owned.emplace_back(static_cast<std::size_t>(matrices * rows * cols));
      auto& s = w.owned.emplace_back(static_cast<std::size_t>(matrices * brows * bcols * 4));
      const auto* src = reinterpret_cast<const uint16_t*>(checkpoint.bytes(i).data());
      for (int64_t k = 0; k < matrices; ++k)
        plugins::fp8::quantize_bf16(
            {src + k * rows * cols, rows, cols, cols},
            {q.data() + k * rows * cols, reinterpret_cast<float*>(s.data()) + k * brows * bcols},
            ue8m0_ ? plugins::fp8::ScaleFormat::kUe8m0 : plugins::fp8::ScaleFormat::kFp32, m.name);
      ParamMeta values = m, scales = m;
      values.dtype = {kDLFloat8E4m3fnCode, 8, 1};
      scales.name = m2n::scale_name_of(m.name);
      scales.dtype = {kDLFloat, 32, 1};
      scales.shape[nd - 2] = brows;
      scales.shape[nd - 1] = bcols;
      w.meta.push_back(values);
      w.bytes.push_back(q);
      w.meta.push_back(scales);
      w.bytes.push_back(s);
      w.tp_dim.insert(w.tp_dim.end(), 2, tp_ > 1 ? dim_of(m) : -1);
    }
    return w;
  }

  // Every engine tensor worker rank k holds, by name, with its checksum.
  std::map<std::string, std::string> engine_checksums(const WireModel& wire, int k) const {
    const auto& meta = wire.meta;
    std::vector<m2n::WorkerParam> sent;
    for (std::size_t i = 0; i < meta.size(); ++i) {
      const auto& m = meta[i];
      const auto box = m2n::needed_box(m.shape, wire.tp_dim[i], tp_, 0);
      std::vector<int64_t> local(m.shape.size());
      for (std::size_t d = 0; d < local.size(); ++d) local[d] = box.hi[d] - box.lo[d];
      sent.push_back({m.name, m.dtype, local, wire.tp_dim[i]});
    }
    const auto engine = m2n::compose_engine(sent, engine_rules_, "engine_layout");
    std::vector<std::vector<unsigned char>> bytes(engine.tensors.size());
    for (std::size_t t = 0; t < engine.tensors.size(); ++t) {
      uint64_t n = element_size(engine.tensors[t].dtype);
      for (int64_t d : engine.tensors[t].local_shape) n *= static_cast<uint64_t>(d);
      bytes[t].resize(n);
    }
    for (std::size_t i = 0; i < meta.size(); ++i) {
      const auto slice = slice_of(meta[i], wire.bytes[i], k, wire.tp_dim[i]);
      const auto& at = engine.place_of(meta[i].name);
      std::memcpy(bytes[at.tensor].data() + at.element_offset * element_size(meta[i].dtype),
                  slice.data(), slice.size());
    }
    std::map<std::string, std::string> out;
    for (std::size_t t = 0; t < engine.tensors.size(); ++t) {
      const auto& b = engine.tensors[t].tied_to >= 0
                          ? bytes[static_cast<std::size_t>(engine.tensors[t].tied_to)]
                          : bytes[t];
      out[engine.tensors[t].name] = checksum_bytes(b.data(), b.size());
    }
    return out;
  }

 private:
  std::vector<unsigned char> slice_of(const ParamMeta& m, std::span<const unsigned char> full,
                                      int k, int tp_dim) const {
    const auto box = m2n::needed_box(m.shape, tp_dim, tp_, k % tp_);
    std::vector<int64_t> extent(m.shape.size());
    for (std::size_t d = 0; d < extent.size(); ++d) extent[d] = box.hi[d] - box.lo[d];
    const std::size_t elem = element_size(m.dtype);
    const auto strides = m2n::compact_strides(m.shape);
    uint64_t n = elem;
    for (auto e : extent) n *= static_cast<uint64_t>(e);
    std::vector<unsigned char> slice(n);
    m2n::copy_box(slice.data(), m2n::compact_strides(extent),
                  full.data() + static_cast<std::size_t>(m2n::box_offset(strides, box.lo)) * elem,
                  strides, extent, elem);
    return slice;
  }

  int tp_ = 1;
  std::vector<std::pair<std::string, int>> rules_;
  std::vector<m2n::EngineRule> engine_rules_;
  bool fp8_ = false, ue8m0_ = false;
};

}  // namespace

namespace {

// One client per receiver, and one fan-out over them that gives each its own rank offset.
struct Receivers {
  std::vector<std::unique_ptr<HttpClient>> clients;
  std::vector<int> world_sizes;
  std::unique_ptr<FanOutClient> fan_out;
};

Receivers connect_receivers(const LaunchConfig& cfg, const TrainerRankArgs& args) {
  HttpClient::Options hopts;
  hopts.timeout = std::chrono::milliseconds(static_cast<int64_t>(cfg.receiver_timeout_s * 1000));
  hopts.bearer_token = cfg.receiver_token;
  Receivers r;
  std::vector<FanOutClient::Replica> replicas;
  // World sizes matter for rank offsets (several receivers) and a default world_size.
  const bool need_world_sizes = args.receiver_urls.size() > 1 ||
                                cfg.receiver_tensor_parallel_size > 1 ||
                                world_size_from_receivers(cfg);
  for (const auto& url : args.receiver_urls) {
    auto& c = r.clients.emplace_back(std::make_unique<HttpClient>(url, hopts));
    const int ws = need_world_sizes ? c->world_size() : 1;
    replicas.push_back({c.get(), ws, url});
    r.world_sizes.push_back(ws);
  }
  r.fan_out = std::make_unique<FanOutClient>(replicas);
  return r;
}

// The trainer group of a job of several ranks (none for one).
std::unique_ptr<TrainerGroup> join_trainer_group(const LaunchConfig& cfg,
                                                 const TrainerRankArgs& args, int ranks) {
  if (ranks <= 1) return nullptr;
  const std::chrono::milliseconds group_timeout(static_cast<int64_t>(cfg.group_timeout_s * 1000));
  // Between rounds the others wait while rank 0 verifies: each receiver's checksums may take up
  // to the control plane's deadline.
  const auto between_rounds =
      group_timeout +
      (cfg.verify
           ? std::chrono::milliseconds(static_cast<int64_t>(
                 cfg.receiver_timeout_s * 1000 * static_cast<double>(args.receiver_urls.size())))
           : std::chrono::milliseconds(0));
  if (args.cluster != nullptr)
    return join_cluster_trainer_group(*args.cluster, group_timeout, between_rounds);
  return join_host_trainer_group(args.rank, ranks, args.rendezvous_dir, group_timeout,
                                 between_rounds);
}

// What this rank sends: the checkpoint, its slice (source.shard), or either on a CUDA device
// (init_info.device: cuda:N). `keep` owns the wrappers.
WeightSource* source_to_send(const LaunchConfig& cfg, const TrainerRankArgs& args, int ranks,
                             WeightSource& source,
                             std::vector<std::unique_ptr<WeightSource>>& keep) {
  WeightSource* send_from = &source;
  if (cfg.shard_dim && cfg.init_info.contains("device") && cfg.init_info.at("device") != "cpu")
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}: 'source.shard' slices host memory; it cannot be combined with "
                            "init_info.device {}",
                            cfg.file, cfg.init_info.at("device").dump()));
  if (cfg.shard_dim)
    send_from =
        keep.emplace_back(std::make_unique<ShardedSource>(source, args.rank, ranks, *cfg.shard_dim))
            .get();
  if (auto d = cfg.init_info.find("device");
      d != cfg.init_info.end() && d->is_string() && d->get<std::string>() != "cpu")
    send_from =
        keep.emplace_back(make_device_source(source, parse_device(d->get<std::string>()).device_id))
            .get();
  return send_from;
}

// Rank 0's check of a round: every tensor on every receiver's every worker rank against the
// checkpoint ("name" with one receiver, "receiver K: name" with more; a worker rank standing for
// a TP rank holds its slice, m2n's tensor_parallel). Fills the round event's verified fields.
void verify_round(const LaunchConfig& cfg, SafetensorsSource& checkpoint,
                  const std::vector<std::unique_ptr<HttpClient>>& receivers, nlohmann::json& ev) {
  std::vector<std::string> expected;
  const auto& meta = checkpoint.metadata();
  for (std::size_t i = 0; i < checkpoint.size(); ++i) {
    auto b = checkpoint.bytes(i);
    expected.push_back(checksum_bytes(b.data(), b.size()));
  }
  std::vector<std::string> mismatched;
  const TensorParallelSlices tp(cfg);
  const auto wire = tp.composes() ? tp.wire_model(checkpoint) : TensorParallelSlices::WireModel{};
  int worker = 0;  // the worker rank across receivers (each receiver's ranks in order)
  std::size_t checked = 0;
  for (std::size_t k = 0; k < receivers.size(); ++k) {
    const auto by_rank = receivers[k]->weight_checksums_by_rank();
    for (std::size_t j = 0; j < by_rank.size(); ++j, ++worker) {
      const auto& remote = by_rank[j];
      const auto where = [&](const std::string& name) {
        std::string at = receivers.size() == 1 ? "" : fmt::format("receiver {}", k + 1);
        if (by_rank.size() > 1) at += fmt::format("{}rank {}", at.empty() ? "" : " ", j);
        return at.empty() ? name : fmt::format("{}: {}", at, name);
      };
      if (tp.composes()) {  // the engine's own tensors, composed of the checkpoint's slices
        for (const auto& [name, want] : tp.engine_checksums(wire, worker)) {
          ++checked;
          auto it = remote.find(name);
          if (it == remote.end() || it->second != want) mismatched.push_back(where(name));
        }
        continue;
      }
      for (std::size_t i = 0; i < checkpoint.size(); ++i, ++checked) {
        auto it = remote.find(meta[i].name);
        const std::string want = tp.splits(meta[i], worker)
                                     ? tp.checksum(meta[i], checkpoint.bytes(i), worker)
                                     : expected[i];
        if (it != remote.end() && it->second == want) continue;
        mismatched.push_back(where(meta[i].name));
      }
    }
  }
  ev["verified"] = mismatched.empty();
  ev["checked"] = checked;
  ev["mismatched"] = mismatched.size() > 5
                         ? std::vector<std::string>(mismatched.begin(), mismatched.begin() + 5)
                         : mismatched;
  ev["mismatched_count"] = mismatched.size();
}

}  // namespace

int run_trainer_rank(const LaunchConfig& cfg, const TrainerRankArgs& args) {
  g_sink = args.on_event;
  const int ranks = args.cluster ? args.cluster->world_size : cfg.trainer_ranks;
  try {
    for (const auto& d : cfg.plugin_dirs) Registry::instance().add_directory(d);
    SafetensorsSource checkpoint(args.checkpoint_files,
                                 cfg.weights_in_shared_memory
                                     ? SafetensorsSource::Memory::shared
                                     : SafetensorsSource::Memory::private_copy_on_write);
    ProgressSource source(checkpoint, args.rank == 0);
    Receivers receivers = connect_receivers(cfg, args);
    std::unique_ptr<TrainerGroup> group = join_trainer_group(cfg, args, ranks);
    std::vector<std::unique_ptr<WeightSource>> wrappers;
    WeightSource* send_from = source_to_send(cfg, args, ranks, source, wrappers);
    // A delta backend takes no source: each round sends the patches of what the training step
    // changed, against the base the receivers loaded from the same checkpoint.
    const bool sparse = Registry::instance().get(cfg.backend)->capabilities() & WT_CAP_SPARSE;
    std::vector<std::vector<unsigned char>> previous;
    if (sparse) previous = snapshot(checkpoint);
    auto fields = init_info_for(cfg, receivers.world_sizes);
    fields["backend"] = cfg.backend;
    fields["rank"] = args.rank;
    auto t0 = Clock::now();
    auto engine = trainer_init(InitInfo::from_object(fields, cfg.file), *receivers.fan_out,
                               sparse ? nullptr : send_from, group.get());
    if (args.rank == 0)
      emit({{"event", "init"},
            {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
            {"tensors", checkpoint.size()},
            {"bytes", checkpoint.total_bytes()},
            {"plugin", engine->plugin().path()},
            {"plugin_version", engine->plugin().version()}});
    for (int r = 0; r < cfg.rounds; ++r) {
      source.round = r;
      SendOptions opts;
      opts.weight_version = fmt::format("round-{}", r);
      std::vector<Delta> deltas;
      uint64_t sent_bytes = checkpoint.total_bytes();
      if (sparse) {  // the training step first, then only what it changed
        perturb(checkpoint, cfg.perturb_fraction, uint64_t{cfg.perturb_seed} * 1000003 + r);
        deltas = deltas_against(checkpoint, previous);
        sent_bytes = 0;
        for (const auto& d : deltas) {
          opts.patches.push_back(d.patch());
          sent_bytes += d.indices.size() * 4 + d.values.size();
        }
      }
      auto start = Clock::now();
      engine->send_weights(opts);
      double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      nlohmann::json ev = {
          {"event", "round"}, {"round", r}, {"seconds", seconds}, {"bytes", sent_bytes}};
      if (args.rank == 0 && cfg.verify) verify_round(cfg, checkpoint, receivers.clients, ev);
      if (args.rank == 0) emit(ev);
      if (!sparse && r + 1 < cfg.rounds)
        perturb(checkpoint, cfg.perturb_fraction, uint64_t{cfg.perturb_seed} * 1000003 + r);
      // The ranks start each round together, as a training loop's optimizer step makes them:
      // otherwise rank 0's verification would count against the others' transfer deadline. And
      // they end together: a rank whose engine went while another still sends its part of the
      // last round reads, to that one, as a rank that gave the round up (m2n).
      if (group != nullptr) {
        try {
          group->barrier();
        } catch (const Error& e) {
          throw Error(e.code(), fmt::format("after round {}, waiting for the other trainer ranks "
                                            "(one failed or went away?): {}",
                                            r + 1, e.what()));
        }
      }
    }
    return 0;
  } catch (const std::exception& e) {
    emit({{"event", "error"}, {"rank", args.rank}, {"message", e.what()}});
    return 1;
  }
}

}  // namespace wt::cli
