#include "launch_config.hpp"

#include <wt/error.hpp>
#include <wt/init_info.hpp>
#include <wt/services/world_size.hpp>
#include <wt/services/yaml_json.hpp>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace wt::cli {
namespace {

// Strict reader of one YAML mapping, with file:line:col in every message.
class Section {
 public:
  Section(const YAML::Node& node, std::string file, std::string path)
      : node_(node), file_(std::move(file)), path_(std::move(path)) {
    if (!node_.IsMap()) fail(node_, fmt::format("'{}' must be a mapping of keys to values", path_));
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& msg) const {
    auto m = at.Mark();
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}:{}:{}: {}", file_, m.line + 1, m.column + 1, msg));
  }
  std::string key_path(const std::string& key) const {
    return path_.empty() ? key : path_ + "." + key;
  }

  bool has(const std::string& key) {
    known_.insert(key);
    return node_[key].IsDefined() && !node_[key].IsNull();
  }
  YAML::Node get(const std::string& key) {
    known_.insert(key);
    return node_[key];
  }
  template <typename T>
  T scalar(const std::string& key, const char* type_name, T def) {
    if (!has(key)) return def;
    auto n = node_[key];
    if (!n.IsScalar()) fail(n, fmt::format("'{}' must be {}", key_path(key), type_name));
    try {
      if constexpr (std::is_same_v<T, bool>) {
        const auto& v = n.Scalar();
        if (v != "true" && v != "false") throw YAML::Exception(n.Mark(), "not a boolean");
      }
      if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
        if (n.Tag() == "!") throw YAML::Exception(n.Mark(), "quoted");
      }
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, fmt::format("'{}' must be {}, got '{}'", key_path(key), type_name, n.Scalar()));
    }
  }
  // A duration: finite, positive and at most a day (NaN, infinities and negatives are refused).
  double seconds(const std::string& key, double def) {
    double v = scalar<double>(key, "a number of seconds", def);
    if (!(v > 0 && v <= 86400))
      fail(node_[key], fmt::format("'{}' must be a number of seconds in (0, 86400], got '{}'",
                                   key_path(key), node_[key].Scalar()));
    return v;
  }
  std::string string(const std::string& key, std::string def = "") {
    return scalar<std::string>(key, "a string", std::move(def));
  }
  void finish() const {
    for (const auto& kv : node_) {
      auto k = kv.first.as<std::string>();
      if (!known_.count(k)) {
        std::string list;
        for (const auto& x : known_) list += (list.empty() ? "" : ", ") + x;
        fail(kv.first, fmt::format("unknown key '{}' (known keys{}: {})", key_path(k),
                                   path_.empty() ? "" : " in '" + path_ + "'", list));
      }
    }
  }
  const YAML::Node& node() const { return node_; }
  const std::string& file() const { return file_; }

 private:
  YAML::Node node_;
  std::string file_, path_;
  std::set<std::string> known_;
};

}  // namespace

std::string generated_checkpoint_dir(const LaunchConfig::Generate& g) {
  if (!g.dir.empty()) return g.dir;
  std::string base;
  if (const char* c = std::getenv("WT_CACHE_DIR"); c && *c)
    base = c;
  else if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
    base = std::string(x) + "/wt";
  else if (const char* h = std::getenv("HOME"); h && *h)
    base = std::string(h) + "/.cache/wt";
  else
    base = "/tmp/wt-cache";
  return fmt::format("{}/checkpoints/{}-{}-seed{}-{}", base, g.model, g.dtype, g.seed, g.shards);
}

namespace {
void read_config(const YAML::Node& root, LaunchConfig& c);
}  // namespace

LaunchConfig load_launch_config(const std::string& path) {
  LaunchConfig c;
  c.file = path;
  // One document, no duplicate keys, bounded nesting and aliases; a FIFO is refused.
  YAML::Node root = load_yaml_file(path);
  try {
    read_config(root, c);
  } catch (const YAML::Exception& e) {
    // A conversion the strict readers did not foresee ("bad conversion") still names the place.
    if (e.mark.is_null()) throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", path, e.msg));
    throw Error(WT_ERR_INVALID_ARGUMENT,
                fmt::format("{}:{}:{}: {}", path, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  if (c.receiver_token.empty())
    if (const char* t = std::getenv("WT_RECEIVER_TOKEN")) c.receiver_token = t;
  return c;
}

namespace {

// init_info is the plugin's to judge (validate_init_info); each key's place is kept for its errors.
void read_init_info(const YAML::Node& node, LaunchConfig& c) {
  Section ii(node, c.file, "init_info");
  if (ii.node()["rank"].IsDefined())
    ii.fail(ii.node()["rank"],
            "'init_info.rank' is set by wt launch for each trainer process; remove it");
  if (ii.node()["backend"].IsDefined())
    ii.fail(ii.node()["backend"], "'init_info.backend' belongs at the top level ('backend:')");
  c.init_info = yaml_to_json(ii.node(), c.file);
  for (const auto& kv : ii.node())
    c.init_info_marks[kv.first.as<std::string>()] = {kv.first.Mark().line + 1,
                                                     kv.first.Mark().column + 1};
}

void read_trainer(const YAML::Node& node, LaunchConfig& c) {
  Section t(node, c.file, "trainer");
  c.trainer_ranks_given = t.has("ranks");
  c.trainer_ranks = t.scalar<int>("ranks", "an integer", 1);
  if (c.trainer_ranks < 1 || c.trainer_ranks > 64)
    t.fail(t.get("ranks"), "'trainer.ranks' must be in 1..64");
  c.group_address = t.string("group_address", "");
  c.group_port = t.scalar<int>("group_port", "an integer", c.group_port);
  if (c.group_port < 1 || c.group_port > 65535)
    t.fail(t.get("group_port"), "'trainer.group_port' must be a port, 1..65535");
  c.secret_file = t.string("secret_file", "");
  c.group_timeout_s = t.seconds("group_timeout_s", 60);
  c.weights_in_shared_memory = t.scalar<bool>("weights_in_shared_memory", "true or false", false);
  t.finish();
}

void read_generate(const YAML::Node& node, LaunchConfig& c) {
  Section g(node, c.file, "source.generate");
  LaunchConfig::Generate G;
  G.model = g.string("model", G.model);
  G.dtype = g.string("dtype", G.dtype);
  G.seed = g.scalar<uint32_t>("seed", "a non-negative integer", 0);
  G.shards = g.scalar<int>("shards", "an integer", 1);
  G.dir = g.string("dir", "");
  g.finish();
  c.generate = G;
}

void read_shard(const YAML::Node& node, LaunchConfig& c) {
  Section sh(node, c.file, "source.shard");
  if (sh.string("rank_of") != "trainer")
    sh.fail(sh.has("rank_of") ? sh.get("rank_of") : sh.node(),
            "'source.shard.rank_of' must be 'trainer' (the trainer ranks split each tensor)");
  c.shard_dim = sh.scalar<int>("dim", "an integer", 0);
  if (*c.shard_dim < 0 || *c.shard_dim > 7)
    sh.fail(sh.get("dim"), "'source.shard.dim' must be a dimension, 0..7");
  sh.finish();
}

void read_source(const YAML::Node& node, LaunchConfig& c) {
  Section s(node, c.file, "source");
  bool gen = s.has("generate"), st = s.has("safetensors");
  if (gen == st) s.fail(s.node(), "'source' needs exactly one of 'generate' and 'safetensors'");
  if (st) {
    auto n = s.get("safetensors");
    if (n.IsScalar())
      c.safetensors.push_back(n.as<std::string>());
    else if (n.IsSequence())
      for (const auto& x : n) c.safetensors.push_back(x.as<std::string>());
    else
      s.fail(n, "'source.safetensors' must be a path or a list of paths");
  } else {
    read_generate(s.get("generate"), c);
  }
  if (s.has("shard")) read_shard(s.get("shard"), c);
  s.finish();
}

// url: one URL, or a list of them (one per deployment); urls: the list.
void read_receiver_urls(Section& r, LaunchConfig& c) {
  if (r.has("url") && r.has("urls"))
    r.fail(r.get("urls"), "'receiver.url' and 'receiver.urls' exclude each other");
  if (r.has("urls") && !r.get("urls").IsSequence())
    r.fail(r.get("urls"), "'receiver.urls' must be a list of URLs");
  if (r.has("url") || r.has("urls")) {
    const char* key = r.has("url") ? "url" : "urls";
    auto n = r.get(key);
    if (n.IsScalar())
      c.receiver_urls.push_back(r.string(key));
    else if (n.IsSequence() && n.size() > 0)
      for (const auto& x : n) {
        if (!x.IsScalar() || x.Scalar().empty())
          r.fail(x, "'receiver.url' must be a URL or a list of URLs");
        c.receiver_urls.push_back(x.Scalar());
      }
    else
      r.fail(n, "'receiver.url' must be a URL or a non-empty list of URLs");
  }
}

void read_receiver(const YAML::Node& node, LaunchConfig& c) {
  Section r(node, c.file, "receiver");
  read_receiver_urls(r, c);
  c.embedded_receiver = r.scalar<bool>("embedded", "true or false", c.receiver_urls.empty());
  if (c.embedded_receiver && !c.receiver_urls.empty())
    r.fail(r.get(r.has("url") ? "url" : "urls"),
           "'receiver.url' and 'receiver.embedded: true' exclude each other");
  if (!c.embedded_receiver && c.receiver_urls.empty())
    r.fail(r.node(), "'receiver.embedded: false' needs 'receiver.url'");
  c.receiver_count = r.scalar<int>("count", "an integer", 1);
  if (r.has("count") && !c.embedded_receiver)
    r.fail(r.get("count"), "'receiver.count' is for embedded receivers; list the URLs instead");
  if (c.receiver_count < 1 || c.receiver_count > 16)
    r.fail(r.get("count"), "'receiver.count' must be in 1..16");
  c.receiver_tensor_parallel_size = r.scalar<int>("tensor_parallel_size", "an integer", 1);
  if (r.has("tensor_parallel_size") && !c.embedded_receiver)
    r.fail(r.get("tensor_parallel_size"),
           "'receiver.tensor_parallel_size' is for embedded receivers (a given URL says its own "
           "world size)");
  if (c.receiver_tensor_parallel_size < 1 || c.receiver_tensor_parallel_size > 8)
    r.fail(r.get("tensor_parallel_size"), "'receiver.tensor_parallel_size' must be in 1..8");
  c.receiver_token = r.string("token");
  c.receiver_timeout_s = r.seconds("timeout_s", 300);
  c.receiver_device = r.string("device", "cpu");
  r.finish();
}

void read_training_step(const YAML::Node& node, LaunchConfig& c) {
  Section t(node, c.file, "training_step");
  c.perturb_fraction = t.scalar<double>("perturb_fraction", "a number", 0.01);
  if (c.perturb_fraction < 0 || c.perturb_fraction > 1)
    t.fail(t.get("perturb_fraction"), "'training_step.perturb_fraction' must be in [0, 1]");
  c.perturb_seed = t.scalar<uint32_t>("seed", "a non-negative integer", 1);
  t.finish();
}

void read_config(const YAML::Node& root, LaunchConfig& c) {
  const std::string& path = c.file;
  if (!root.IsDefined() || root.IsNull())
    throw Error(WT_ERR_INVALID_ARGUMENT, fmt::format("{}: the config is empty", path));
  Section top(root, path, "");
  c.backend = top.string("backend");
  if (c.backend.empty()) top.fail(root, "missing key 'backend' (e.g. backend: ipc)");
  if (top.has("init_info")) read_init_info(top.get("init_info"), c);
  if (top.has("trainer")) read_trainer(top.get("trainer"), c);
  if (!top.has("source")) top.fail(root, "missing key 'source' (generate: or safetensors:)");
  read_source(top.get("source"), c);
  if (top.has("receiver")) read_receiver(top.get("receiver"), c);
  c.rounds = top.scalar<int>("rounds", "an integer", 3);
  if (c.rounds < 1) top.fail(top.get("rounds"), "'rounds' must be at least 1");
  if (top.has("training_step")) read_training_step(top.get("training_step"), c);
  c.verify = top.scalar<bool>("verify", "true or false", true);
  if (top.has("plugin_dirs")) {
    auto n = top.get("plugin_dirs");
    if (!n.IsSequence()) top.fail(n, "'plugin_dirs' must be a list of directories");
    for (const auto& x : n) c.plugin_dirs.push_back(x.as<std::string>());
  }
  top.finish();
}

}  // namespace

bool world_size_from_receivers(const LaunchConfig& cfg) {
  return wt::world_size_from_receivers(cfg.init_info);
}

nlohmann::json init_info_for(const LaunchConfig& cfg,
                             const std::vector<int>& receiver_world_sizes) {
  auto fields = cfg.init_info;
  if (world_size_from_receivers(cfg)) {
    int n = 0;
    for (int w : receiver_world_sizes) n += w;
    fields["world_size"] = world_size_of(n);
  }
  return fields;
}

void validate_init_info(const LaunchConfig& cfg, const std::vector<int>& receiver_world_sizes) {
  auto fields = init_info_for(cfg, receiver_world_sizes);
  fields["backend"] = cfg.backend;
  fields["rank"] = 0;
  try {
    InitInfo::from_object(fields, cfg.file).to_json();
  } catch (const FieldError& e) {
    // Point at the line of the key the plugin named (as data, ABI 2), when it is one we have.
    std::string msg = e.what();
    if (cfg.init_info_marks.count(e.field())) {
      auto [line, col] = cfg.init_info_marks.at(e.field());
      throw Error(e.code(), fmt::format("{}:{}:{}: init_info.{}: {}", cfg.file, line, col,
                                        e.field(), msg.substr(msg.find(": ") + 2)));
    }
    throw;
  }
}

}  // namespace wt::cli
