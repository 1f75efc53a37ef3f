// The `file` backend: the simplest wt backend that crosses machines. The trainer writes each round
// into one file in a directory both sides can reach (a shared filesystem), atomically: it appears
// under its final name only once complete. The worker reads it straight into the receiver's
// memory. Written against the installed SDK alone (wt/sdk/plugin.hpp); see
// docs/plugin-authoring.md for the rules it follows.
//
// Trainer init info: {"directory": "/shared/wt", "rank": 0}
// Worker init info (what the trainer ships): {"directory": "/shared/wt"}
// Receiver-side option (wt serve --weight-transfer-config): {"backend": "file",
//   "directory": "/mnt/wt"} when the directory is mounted elsewhere on the receiver's machine.
// Update info, one per round: {"file": "round-<pid>-<n>.wtr", "names": [...],
//   "dtype_names": [...], "shapes": [[...], ...], "offsets": [...], "size": <file bytes>}
#include <wt/dtype.hpp>
#include <wt/sdk/plugin.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using wt::sdk::fail;
using wt::sdk::FieldReader;

constexpr const char* kBackend = "file";
constexpr uint64_t kAlign = 64;  // every tensor starts 64-byte aligned in the file

[[noreturn]] void fail_errno(const std::string& what) {
  fail(WT_ERR_SYSTEM, "file backend: {}: {}", what, std::strerror(errno));
}

// A directory given in the init info or the receiver options: absolute, and a directory.
std::string read_directory(FieldReader& r, const std::string& key) {
  std::string d = r.get_string(key);
  struct stat st {};
  if (d.empty() || d[0] != '/')
    wt::sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field '{}' must be an absolute path, got \"{}\"", r.what(),
                        key, d);
  if (::stat(d.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    wt::sdk::fail_field(key, WT_ERR_INVALID_ARGUMENT,
                        "invalid {}: field '{}' is not an existing directory: {}", r.what(), key,
                        d);
  return d;
}

// This machine's name, reduced to characters safe in a file name.
std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "host";
  std::string h;
  for (const char* p = buf; *p != '\0'; ++p)
    h += std::isalnum(static_cast<unsigned char>(*p)) || *p == '-' ? *p : '_';
  return h.empty() ? "host" : h;
}

// Writes all of [p, p+n) at the file's current end.
void write_all(int fd, const void* p, uint64_t n, const std::string& path) {
  const auto* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail_errno("writing " + path);
    c += w;
    n -= static_cast<uint64_t>(w);
  }
}

// ---- init info ---------------------------------------------------------------------------------

class FileInitInfo : public wt::sdk::InitInfoBase {
 public:
  explicit FileInitInfo(const nlohmann::json& fields) {
    FieldReader r(fields, "init_info for backend 'file'");
    directory_ = read_directory(r, "directory");
    rank_ = r.opt_int("rank", 0);
    if (rank_ < 0)
      wt::sdk::fail_field("rank", WT_ERR_INVALID_ARGUMENT,
                          "invalid {}: field 'rank' "
                          "must be >= 0, got {}",
                          r.what(), rank_);
    r.finish();  // any other key is an error naming it
  }
  nlohmann::json to_json() const override { return {{"directory", directory_}, {"rank", rank_}}; }
  int64_t rank() const override { return rank_; }
  const std::string& directory() const { return directory_; }

 private:
  std::string directory_;
  int64_t rank_ = 0;
};

// ---- trainer -----------------------------------------------------------------------------------

class FileTrainer : public wt::sdk::TrainerBase {
 public:
  FileTrainer(const wt::sdk::TrainerContext& c, const FileInitInfo& info)
      : client_(c.client),
        source_(c.source),
        log_(c.host, "file: "),
        dir_(info.directory()),
        sender_(info.is_sender()),
        host_(host_name()),
        nonce_(std::random_device{}()) {
    nonce_ = nonce_ << 32 | std::random_device{}();
    // Only the sender talks to the inference side: the worker learns the directory here.
    if (sender_) client_.init_weight_transfer_engine(nlohmann::json{{"directory", dir_}}.dump());
  }

  void send_weights(const wt::sdk::SendArgs& args) override {
    aborted_ = false;
    if (!sender_) {  // other ranks only iterate their source, as every backend's non-senders do
      auto pass = source_.begin();
      wt_tensor t{};
      while (pass.next(&t)) check_abort();
      return;
    }
    client_.start_weight_update();
    // Unique across trainers sharing the directory (hosts, containers reusing a pid, restarts).
    const std::string name =
        fmt::format("round-{}-{}-{:016x}-{}.wtr", host_, ::getpid(), nonce_, ++round_);
    const std::string final_path = dir_ + "/" + name, partial = dir_ + "/." + name + ".partial";
    bool wrote_partial = false, published = false;
    try {
      nlohmann::json update = write_round(partial, wrote_partial);
      // link() publishes the complete file under its final name and, unlike rename(), never
      // replaces a file someone else put there.
      if (::link(partial.c_str(), final_path.c_str()) != 0) fail_errno("publishing " + final_path);
      published = true;
      ::unlink(partial.c_str());
      wrote_partial = false;
      update["file"] = name;
      check_abort();
      client_.update_weights(update.dump());  // returns once the worker has loaded the round
      client_.finish_weight_update(args.weight_version);
      ::unlink(final_path.c_str());  // ours, and read by now
      log_.debug("round {}: {} tensors, {} bytes through {}", round_, update["names"].size(),
                 update["size"].get<uint64_t>(), final_path);
    } catch (...) {  // whatever failed (a write, the client, memory), leave nothing behind
      if (wrote_partial) ::unlink(partial.c_str());
      if (published) ::unlink(final_path.c_str());
      client_.end_weight_update(
          wt::sdk::message_of(std::current_exception()));  // the worker keeps its weights
      throw;
    }
  }

  void abort() override { aborted_ = true; }

 private:
  void check_abort() const {
    if (aborted_) fail(WT_ERR_ABORTED, "file backend: send_weights was aborted");
  }

  // Writes every tensor of one pass into `path` (created here, never an existing file) and returns
  // the update info describing it.
  nlohmann::json write_round(const std::string& path, bool& created) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) fail_errno("creating " + path);
    created = true;
    nlohmann::json names = nlohmann::json::array(), dtypes = names, shapes = names, offsets = names;
    uint64_t offset = 0;
    std::vector<unsigned char> staging;
    try {
      auto pass = source_.begin();
      wt_tensor t{};
      while (pass.next(&t)) {
        check_abort();
        const DLTensor& d = t.tensor;
        uint64_t nbytes = 0;
        if (!wt::checked_nbytes(d.shape, d.ndim, d.dtype, &nbytes))
          fail(WT_ERR_INVALID_ARGUMENT, "file backend: tensor '{}' is too large", t.name);
        if (uint64_t pad = (kAlign - offset % kAlign) % kAlign; pad > 0) {
          static const unsigned char zeros[kAlign] = {};
          write_all(fd, zeros, pad, path);
          offset += pad;
        }
        const void* bytes = static_cast<const char*>(d.data) + d.byte_offset;
        if (!wt::is_compact(d)) {  // a strided view: sent contiguous
          staging.resize(nbytes);
          wt::copy_to_contiguous(staging.data(), d, nbytes);
          bytes = staging.data();
        }
        if (nbytes > 0) write_all(fd, bytes, nbytes, path);
        names.push_back(t.name);
        dtypes.push_back(std::string(wt::torch_name(d.dtype)));
        shapes.push_back(std::vector<int64_t>(d.shape, d.shape + d.ndim));
        offsets.push_back(offset);
        offset += nbytes;
      }
      if (::fsync(fd) != 0) fail_errno("flushing " + path);  // complete on disk before published
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) fail_errno("closing " + path);
    return {{"names", names},
            {"dtype_names", dtypes},
            {"shapes", shapes},
            {"offsets", offsets},
            {"size", offset}};
  }

  wt::sdk::ClientRef client_;
  wt::sdk::SourceRef source_;
  wt::sdk::HostLog log_;
  std::string dir_;
  bool sender_;
  std::string host_;
  uint64_t nonce_;
  uint64_t round_ = 0;
  std::atomic<bool> aborted_{false};
};

// ---- worker ------------------------------------------------------------------------------------

class FileWorker : public wt::sdk::WorkerBase {
 public:
  FileWorker(const wt::sdk::WorkerContext& c, const nlohmann::json& init) {
    if (c.device.device_type != kDLCPU)
      fail(WT_ERR_UNSUPPORTED, "file backend: the worker keeps weights in host memory only");
    FieldReader r(init, "init_info for backend 'file' (worker)");
    dir_ = r.get_string("directory");
    r.finish();
    // The receiver's own mount point of the shared directory wins over the trainer's.
    FieldReader o(c.backend_options, "backend options for backend 'file'");
    if (o.has("directory")) dir_ = read_directory(o, "directory");
    o.finish();
  }

  void start() override {
    if (active_) fail(WT_ERR_STATE, "file backend: start called twice without finish");
    active_ = true;
    aborted_ = false;
  }

  void receive(const nlohmann::json& update, const wt::sdk::LoaderRef& loader) override {
    if (!active_) fail(WT_ERR_STATE, "file backend: receive before start");
    // 1. Validate the whole update (its fields and the file) before anything is delivered.
    FieldReader r(update, "update_info for backend 'file'");
    const std::string name = r.get_string("file");
    auto names = r.get_string_list("names");
    auto dtype_names = r.get_string_list("dtype_names");
    auto shapes = r.get_int_list_list("shapes");
    auto offsets = r.get_int_list("offsets");
    const int64_t size = r.get_int("size");
    r.finish();
    if (name.empty() || name[0] == '.' || name.find('/') != std::string::npos)
      fail(WT_ERR_INVALID_ARGUMENT, "file backend: 'file' must be a plain file name, got \"{}\"",
           name);
    if (dtype_names.size() != names.size() || shapes.size() != names.size() ||
        offsets.size() != names.size())
      fail(WT_ERR_INVALID_ARGUMENT,
           "file backend: names, dtype_names, shapes and offsets differ "
           "in length");
    std::vector<wt::ParamMeta> params;
    std::vector<uint64_t> sizes;
    for (std::size_t i = 0; i < names.size(); ++i) {
      auto dt = wt::dtype_from_torch_name(dtype_names[i]);
      if (!dt)
        fail(WT_ERR_INVALID_ARGUMENT, "file backend: unknown dtype '{}' for '{}'", dtype_names[i],
             names[i]);
      uint64_t nbytes = 0;
      if (!wt::checked_nbytes(shapes[i].data(), static_cast<int32_t>(shapes[i].size()), *dt,
                              &nbytes) ||
          offsets[i] < 0 || static_cast<uint64_t>(offsets[i]) > static_cast<uint64_t>(size) ||
          nbytes > static_cast<uint64_t>(size) - static_cast<uint64_t>(offsets[i]))
        fail(WT_ERR_INVALID_ARGUMENT,
             "file backend: tensor '{}' does not lie inside the {} "
             "bytes of {}",
             names[i], size, name);
      params.push_back({names[i], *dt, shapes[i]});
      sizes.push_back(nbytes);
    }
    const std::string path = dir_ + "/" + name;
    // O_NONBLOCK: a FIFO put there cannot block the open; fstat then refuses it.
    int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) fail_errno("opening " + path);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != size) {
      ::close(fd);
      fail(WT_ERR_INVALID_ARGUMENT, "file backend: {} is not a regular file of {} bytes", path,
           size);
    }
    // 2. Deliver: straight into the receiver's memory where it offers some, else through load().
    try {
      std::vector<unsigned char> buf;
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (aborted_) fail(WT_ERR_ABORTED, "file backend: receive was aborted");
        auto dest = loader.destination(params[i]);
        void* into = nullptr;
        if (dest) {
          into = static_cast<char*>(dest->data) + dest->byte_offset;
        } else {
          buf.resize(sizes[i]);
          into = buf.data();
        }
        read_at(fd, into, sizes[i], static_cast<uint64_t>(offsets[i]), path);
        if (dest) {
          loader.written(params[i].name);
        } else {
          wt_tensor t{};
          t.name = params[i].name.c_str();
          t.tensor = {into,
                      {kDLCPU, 0},
                      static_cast<int32_t>(params[i].shape.size()),
                      params[i].dtype,
                      params[i].shape.data(),
                      nullptr,
                      0};
          loader.load({&t, 1});
        }
      }
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
  }

  void finish() override {
    if (!active_) fail(WT_ERR_STATE, "file backend: finish before start");
    active_ = false;
  }
  void abort() override {
    aborted_ = true;
    active_ = false;
  }

 private:
  static void read_at(int fd, void* p, uint64_t n, uint64_t off, const std::string& path) {
    auto* c = static_cast<char*>(p);
    while (n > 0) {
      ssize_t r = ::pread(fd, c, n, static_cast<off_t>(off));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail_errno("reading " + path);
      if (r == 0) fail(WT_ERR_INVALID_ARGUMENT, "file backend: {} ended early", path);
      c += r;
      n -= static_cast<uint64_t>(r);
      off += static_cast<uint64_t>(r);
    }
  }

  std::string dir_;
  std::atomic<bool> active_{false}, aborted_{false};  // abort() comes from another thread
};

// ---- the plugin --------------------------------------------------------------------------------

std::unique_ptr<wt::sdk::InitInfoBase> parse(const nlohmann::json& fields) {
  return std::make_unique<FileInitInfo>(fields);
}
std::unique_ptr<wt::sdk::TrainerBase> make_trainer(const wt::sdk::TrainerContext& c,
                                                   const wt::sdk::InitInfoBase& info) {
  return std::make_unique<FileTrainer>(c, static_cast<const FileInitInfo&>(info));
}
std::unique_ptr<wt::sdk::WorkerBase> make_worker(const wt::sdk::WorkerContext& c,
                                                 const nlohmann::json& init) {
  return std::make_unique<FileWorker>(c, init);
}

constexpr wt::sdk::PluginDefinition kFile{
    kBackend, WT_PLUGIN_VERSION, WT_CAP_TRAINER | WT_CAP_WORKER | WT_CAP_HOST_MEMORY,
    &parse,   &make_trainer,     &make_worker};

}  // namespace

WT_DEFINE_PLUGIN(kFile)
