#include "ipc_trainer.hpp"

#include "ipc_wire.hpp"

#include <wt/dtype.hpp>
#include <wt/sdk/tensor_layout.hpp>

#include <sys/statvfs.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <set>

namespace wt::ipc {

using sdk::fail;

namespace {

struct Item {
  ParamMeta meta;
  uint64_t nbytes = 0;
  int cuda_device = -1;
};

Item describe_tensor(const wt_tensor& t) {
  Item it;
  it.meta.name = t.name ? t.name : "";
  if (it.meta.name.empty())
    fail(WT_ERR_INVALID_ARGUMENT, "the weight source yielded a tensor with no name");
  const DLTensor& d = t.tensor;
  it.meta.dtype = d.dtype;
  it.meta.shape.assign(d.shape, d.shape + d.ndim);
  if (!is_known_dtype(d.dtype))
    fail(WT_ERR_INVALID_ARGUMENT,
         "tensor '{}' has a dtype wt cannot name (code {}, {} bits, {} lanes)", it.meta.name,
         d.dtype.code, d.dtype.bits, d.dtype.lanes);
  if (!checked_nbytes(d.shape, d.ndim, d.dtype, &it.nbytes))
    fail(WT_ERR_INVALID_ARGUMENT,
         "tensor '{}' has a negative shape or more bytes than 64 bits can count", it.meta.name);
  if (d.data == nullptr && it.nbytes > 0)
    fail(WT_ERR_INVALID_ARGUMENT, "tensor '{}' has no data pointer", it.meta.name);
  if (d.device.device_type == kDLCUDA) {
    if (!is_compact(d))
      fail(WT_ERR_INVALID_ARGUMENT,
           "CUDA tensor '{}' is not contiguous; make it contiguous before sending", it.meta.name);
    it.cuda_device = d.device.device_id;
  } else if (d.device.device_type != kDLCPU && d.device.device_type != kDLCUDAHost) {
    fail(WT_ERR_UNSUPPORTED,
         "tensor '{}' lives on DLPack device type {}; ipc moves host (kDLCPU) and "
         "CUDA (kDLCUDA) memory",
         it.meta.name, static_cast<int>(d.device.device_type));
  }
  return it;
}

}  // namespace

IpcTrainer::IpcTrainer(const sdk::TrainerContext& context, const IpcInitInfo& info)
    : log_(context.host, "[ipc] "),
      info_(info),
      client_(context.client),
      source_(context.source),
      group_(context.group),
      sender_(info.is_sender()),
      copy_threads_(info.copy_threads > 0 ? static_cast<unsigned>(info.copy_threads)
                                          : default_copy_threads()) {
  if (!source_.valid())
    fail(WT_ERR_INVALID_ARGUMENT,
         "the ipc backend requires a weight source, and trainer_init got none");
  int swept = sweep_orphaned_segments();
  if (swept > 0) log_.info("removed {} shared-memory segment(s) left by dead processes", swept);
  if (sender_) client_.init_weight_transfer_engine(info_.worker_init_info().dump());
  if (info_.packed) {
    buffer_bytes_ = packed_buffer_bytes();
    prepare_host_buffers();
  }
  log_.debug("trainer ready: rank {} (group rank {} of {}), packed={}", info_.rank_, group_.rank(),
             group_.size(), info_.packed);
}

// A packed buffer holds packed_buffer_size_bytes, or the whole model packed where that is less: a
// 1 MiB model does not map and fault in 2 x 512 MiB of shared memory.
uint64_t IpcTrainer::packed_buffer_bytes() {
  const auto configured = static_cast<uint64_t>(info_.packed_buffer_size_bytes);
  uint64_t packed = 0;
  try {
    for (const auto& p : source_.metadata()) {
      uint64_t n = 0;
      if (!checked_nbytes(p.shape.data(), static_cast<int32_t>(p.shape.size()), p.dtype, &n) ||
          n >= configured)
        return configured;  // the round refuses or reports such a tensor, naming it
      packed = align_up(packed) + n;
      if (packed >= configured) return configured;
    }
  } catch (const sdk::Error&) {  // no metadata up front: the round sizes nothing, so the default
    return configured;
  }
  constexpr uint64_t kPage = 4096;
  return std::max<uint64_t>(kPage, (packed + kPage - 1) / kPage * kPage);
}

// The packed buffers a host model fills, made and faulted in now: the first round then packs as
// fast as later ones (fresh shared memory costs a page fault per 4 KiB written, more than the
// copy). A model in CUDA memory replaces them with device buffers at its first round.
void IpcTrainer::prepare_host_buffers() {
  try {
    uint64_t total = 0;
    for (const auto& p : source_.metadata()) {
      uint64_t n = 0;
      if (!checked_nbytes(p.shape.data(), static_cast<int32_t>(p.shape.size()), p.dtype, &n))
        return;  // the round refuses such metadata, naming it
      total = total > UINT64_MAX - n ? UINT64_MAX : total + n;
    }
    const uint64_t size = buffer_bytes_;
    const auto count = static_cast<std::size_t>(std::min<uint64_t>(
        static_cast<uint64_t>(info_.packed_num_buffers), (total + size - 1) / size));
    // Only where /dev/shm has room to spare: a small one (a container's 64 MiB) is left to the
    // round, which reports what does not fit.
    struct statvfs fs {};
    if (count == 0 || statvfs("/dev/shm", &fs) != 0 ||
        static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize / 2 < count * size)
      return;
    const auto t0 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < count; ++i)
      if (!buffer_for(i, -1).shm->prefault(copy_threads_)) {
        buffers_.clear();  // their pages go: the round makes and fills them as it would have
        log_.debug("packed buffers not faulted in ahead (no MADV_POPULATE_WRITE, or no room)");
        return;
      }
    log_.debug("{} packed buffer(s) of {} bytes faulted in ahead of the first round in {:.3f} s",
               count, size,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const sdk::Error& e) {  // best effort: the first round makes them, and says why not
    buffers_.clear();
    log_.debug("packed buffers not made ahead: {}", e.what());
  }
}

IpcTrainer::~IpcTrainer() {
  in_flight_.clear();
  parked_.clear();  // joins RPC threads left by failed rounds
}

std::string IpcTrainer::key_for(int cuda_device) {
  if (cuda_device < 0) return kHostKey;
  auto it = uuids_.find(cuda_device);  // cudaGetDeviceProperties once per device, not per tensor
  if (it == uuids_.end()) it = uuids_.emplace(cuda_device, cuda::device_uuid(cuda_device)).first;
  return it->second;
}

// Memory CUDA IPC cannot share (cudaMallocAsync pools, expandable segments) is copied into a
// cudaMalloc allocation of this round, after the producer's work, and that is exported instead.
cuda::Exported IpcTrainer::stage_for_export(const void* src, const std::string& name,
                                            int cuda_device, uint64_t nbytes) {
  if (!warned_staging_) {
    log_.info(
        "tensor '{}' is in CUDA memory that IPC cannot share (cudaMallocAsync or VMM); such "
        "tensors are staged through a copy in cudaMalloc memory",
        name);
    warned_staging_ = true;
  }
  cuda::wait_for(stream_, cuda_device);
  auto& copy = staging_.emplace_back(std::make_unique<cuda::DeviceBuffer>(cuda_device, nbytes));
  copy->copy_in(0, src, nbytes);
  copy->synchronize();
  return cuda::export_pointer(copy->data());
}

uint64_t IpcTrainer::align_up(uint64_t offset) const {
  const auto a = static_cast<uint64_t>(info_.packed_alignment);
  return (offset + a - 1) & ~(a - 1);
}

void IpcTrainer::check_not_aborted() const {
  if (aborted_.aborted()) fail(WT_ERR_ABORTED, "the ipc trainer engine was aborted");
}

void IpcTrainer::send_weights(const sdk::SendArgs& args) {
  check_not_aborted();
  if (!args.patches.empty())
    fail(WT_ERR_INVALID_ARGUMENT, "ipc is a full-resync backend: send_weights takes no patches");
  stream_ = args.stream;
  // A failed round never joins an in-flight RPC, and drops every segment: a worker that failed may
  // not hold mappings of the old (already unlinked) ones, so the next round exports fresh ones.
  auto give_up = [this] {
    for (auto& rpc : in_flight_) parked_.push_back(std::move(rpc));
    in_flight_.clear();
    release_all();
  };
  try {
    round(args);
  } catch (const sdk::Error& e) {
    give_up();
    // Reused segments are unlinked after their first round; a worker that was re-initialised
    // since (a new worker engine) cannot open them. Its refusal of the round's first update ends
    // its session, so the round can be sent again, once, from fresh segments.
    if (!(rounds_ok_ > 0 && first_update_failed_)) throw;
    log_.info(
        "the worker refused the first update of the round ({}); re-exporting fresh "
        "segments and sending the round again",
        e.what());
    try {
      round(args);
    } catch (const sdk::Error& again) {
      give_up();
      // Both failures: the first one names the phase that broke.
      fail(again.code(), "{}; sending the round again failed too: {}", e.what(), again.what());
    } catch (...) {
      give_up();
      throw;
    }
  } catch (...) {
    give_up();
    throw;
  }
  ++rounds_ok_;
  end_of_round();  // finish returned: the worker closed what it had opened
}

void IpcTrainer::release_all() {
  buffers_.clear();
  by_name_.clear();
  end_of_round();
}

void IpcTrainer::end_of_round() {
  retired_buffers_.clear();
  staging_.clear();
}

void IpcTrainer::round(const sdk::SendArgs& args) {
  sent_ = completed_ = 0;
  update_failed_ = first_update_failed_ = false;
  pack_s_ = wait_s_ = 0;
  exported_in_place_ = 0;
  started_ = false;
  auto pass = source_.begin();  // source.end() runs when the pass goes: after finish
  try {
    if (info_.packed) {
      if (sender_) client_.start_weight_update();
      started_ = sender_;
      send_packed(pass);
    } else {
      send_unpacked(pass);  // starts the session itself, once every handle is ready
    }
  } catch (const sdk::Error& e) {
    // The inference side's update is ended (the client's end_weight_update), so the next round's
    // start is not refused. Also after a failed update call: the worker ends its round when it
    // refuses an update, but a call that failed on this side (a deadline, a cut connection) may
    // have left it open, and ending a round that is over is not an error. Updates still in
    // flight must land before it, or one could reach the worker's next session and end that one
    // instead: an ipc update never waits on this process, so waiting for it is bounded by the
    // client's deadline. After abort() one may still be blocked: then nothing is ended here, as
    // that update would land after the end (the threads are parked; the inference side's own
    // /end_weight_update or the next trainer_init ends the round).
    if (started_) {
      bool landed = true;
      for (auto& rpc : in_flight_) {
        try {
          rpc->wait(aborted_);
        } catch (...) {
          landed = landed && rpc->done();
        }
      }
      if (landed) {
        in_flight_.clear();  // every call has returned: nothing to wait for in the joins
        client_.end_weight_update(e.what());
      }
    }
    throw;
  }
  if (sender_) client_.finish_weight_update(args.weight_version);
  log_.debug(
      "round: packing {:.3f} s, waiting for the worker {:.3f} s, {} update(s), {} tensor(s) "
      "exported in place",
      pack_s_, wait_s_, sent_, exported_in_place_);
}

void IpcTrainer::send_unpacked(sdk::SourceRef::Pass& pass) {
  std::vector<ParamMeta> params;
  std::vector<nlohmann::json> mine;
  std::map<std::string, ShmSegment> kept;
  std::set<std::string> seen;
  std::optional<SharedMappings> shared;  // read once per round, at the first host tensor
  std::vector<CopyJob> host_copies;      // contiguous tensors into their segments, done together
  std::set<int> devices;
  wt_tensor t{};
  while (pass.next(&t)) {
    check_not_aborted();
    Item it = describe_tensor(t);
    if (!seen.insert(it.meta.name).second)
      fail(WT_ERR_INVALID_ARGUMENT, "the weight source yielded '{}' twice in one pass",
           it.meta.name);
    const auto* src = static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset;
    Handle h;
    if (it.cuda_device >= 0 && it.nbytes == 0) {
      h = Handle{"cuda", "", "", 0, 0};  // nothing to share (its data may well be null)
    } else if (it.cuda_device >= 0) {
      auto e = cuda::try_export_pointer(src);
      if (!e) e = stage_for_export(src, it.meta.name, it.cuda_device, it.nbytes);
      h = Handle{"cuda", "", e->handle_b64, e->allocation_size, e->offset};
      devices.insert(it.cuda_device);
    } else {
      if (!shared) shared = SharedMappings::snapshot();
      auto in_place =
          it.nbytes > 0 && is_compact(t.tensor) ? shared->locate(src, it.nbytes) : std::nullopt;
      if (in_place) {
        // Already in a wt segment of this user: the worker maps that file; nothing is copied here.
        h = Handle{"shm", in_place->name, "", in_place->extent, in_place->offset};
        ++exported_in_place_;
      } else {
        auto found = by_name_.find(it.meta.name);
        ShmSegment seg =
            (found != by_name_.end() && found->second.size() == std::max<uint64_t>(it.nbytes, 1))
                ? std::move(found->second)
                : ShmSegment::create(it.nbytes);
        if (found != by_name_.end()) by_name_.erase(found);
        if (is_compact(t.tensor))
          host_copies.push_back({seg.data(), src, it.nbytes});  // the mapping outlives the move
        else
          copy_to_contiguous(seg.data(), t.tensor, it.nbytes);
        h = Handle{"shm", seg.name(), "", seg.size(), 0};
        kept.emplace(it.meta.name, std::move(seg));
      }
    }
    mine.push_back({{key_for(it.cuda_device), h.to_json()}});
    params.push_back(std::move(it.meta));
  }
  auto c0 = std::chrono::steady_clock::now();
  parallel_copy(host_copies, copy_threads_);
  pack_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  by_name_ = std::move(kept);  // segments of tensors that left the model are dropped here
  // The producer's kernels are done before export: its stream when the host named it, else each
  // device the round's tensors are on, once.
  if (stream_ != nullptr && !devices.empty())
    cuda::wait_for(stream_, *devices.begin());
  else
    for (int d : devices) cuda::synchronize(d);
  auto merged = gather_and_merge(mine, params);
  if (sender_) {
    client_.start_weight_update();
    started_ = true;
    auto update = describe(params);
    update["ipc_handles"] = merged;
    in_flight_.push_back(std::make_unique<AsyncRpc>(
        [this, text = update.dump()] { client_.update_weights(text); }, &aborted_));
  }
  ++sent_;
  sync_one();
}

IpcTrainer::Buffer& IpcTrainer::buffer_for(std::size_t index, int cuda_device) {
  if (buffers_.size() <= index) buffers_.resize(index + 1);
  Buffer& b = buffers_[index];
  bool fits =
      cuda_device < 0 ? b.shm != nullptr : (b.device != nullptr && b.cuda_device == cuda_device);
  if (!fits) {
    // A worker may still hold the old buffer open until this round's finish: it is kept till then.
    if (b.shm || b.device) retired_buffers_.push_back(std::move(b));
    b = Buffer{};
    auto size = static_cast<std::size_t>(buffer_bytes_);
    if (cuda_device < 0)
      b.shm = std::make_unique<ShmSegment>(ShmSegment::create(size));
    else
      b.device = std::make_unique<cuda::DeviceBuffer>(cuda_device, size);
    b.cuda_device = cuda_device;
    log_.debug("allocated packed buffer {} ({} bytes, {})", index, size,
               cuda_device < 0 ? "host" : "cuda");
  }
  return b;
}

void IpcTrainer::send_packed(sdk::SourceRef::Pass& pass) {
  const auto n_buffers = static_cast<int64_t>(info_.packed_num_buffers);
  const uint64_t capacity = buffer_bytes_;
  Chunk chunk;
  std::set<int> producer_waited;  // devices whose producer work was waited for this round
  wt_tensor t{};
  while (pass.next(&t)) {
    check_not_aborted();
    Item it = describe_tensor(t);
    if (it.nbytes > static_cast<uint64_t>(info_.packed_buffer_size_bytes))
      fail(WT_ERR_INVALID_ARGUMENT,
           "tensor '{}' has {} bytes, more than packed_buffer_size_bytes={}; raise "
           "packed_buffer_size_bytes to at least {}",
           it.meta.name, it.nbytes, info_.packed_buffer_size_bytes, it.nbytes);
    if (it.nbytes > capacity)
      fail(WT_ERR_INVALID_ARGUMENT,
           "tensor '{}' has {} bytes, more than the source's metadata gave the model packed ({} "
           "bytes): the source yielded a tensor its metadata does not describe",
           it.meta.name, it.nbytes, capacity);
    if (!chunk.params.empty() &&
        (chunk.cuda_device != it.cuda_device || align_up(chunk.used) + it.nbytes > capacity)) {
      flush(chunk, static_cast<std::size_t>(sent_ % n_buffers));
      chunk = Chunk{};
    }
    if (chunk.params.empty()) {
      // The buffer this chunk reuses must no longer be read by any worker.
      while (sent_ - n_buffers >= completed_) sync_one();
      chunk.cuda_device = it.cuda_device;
    }
    chunk.used = align_up(chunk.used);  // every packed tensor starts aligned (packed_alignment)
    Buffer& b = buffer_for(static_cast<std::size_t>(sent_ % n_buffers), it.cuda_device);
    const auto* src = static_cast<const unsigned char*>(t.tensor.data) + t.tensor.byte_offset;
    auto c0 = std::chrono::steady_clock::now();
    if (it.cuda_device >= 0) {
      // The producer's work is done before its tensors are read: its stream when the host named
      // it, else the tensor's device; once per round and device. The copy itself is queued on the
      // buffer's own stream, and flush() waits for that stream before exporting.
      if (producer_waited.insert(it.cuda_device).second) cuda::wait_for(stream_, it.cuda_device);
      if (it.nbytes > 0) b.device->copy_in(chunk.used, src, it.nbytes);
    } else if (is_compact(t.tensor))
      chunk.host_copies.push_back({b.data() + chunk.used, src, it.nbytes});  // valid until end()
    else
      copy_to_contiguous(b.data() + chunk.used, t.tensor, it.nbytes);
    pack_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    chunk.used += it.nbytes;
    chunk.sizes.push_back(it.nbytes);
    chunk.params.push_back(std::move(it.meta));
  }
  if (!chunk.params.empty()) flush(chunk, static_cast<std::size_t>(sent_ % n_buffers));
  while (completed_ < sent_) sync_one();
}

void IpcTrainer::flush(Chunk& chunk, std::size_t index) {
  Buffer& b = buffers_.at(index);
  auto c0 = std::chrono::steady_clock::now();
  parallel_copy(chunk.host_copies, copy_threads_);
  pack_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  if (b.cuda_device >= 0) b.device->synchronize();  // the packing copies, on the buffer's stream
  // Up to buffers - 1 updates in flight, so the workers never wait for the next request; the
  // count is the same on every rank, so their collectives line up.
  while (sent_ - completed_ >= std::max<int64_t>(1, info_.packed_num_buffers - 1)) sync_one();
  Handle h;
  if (b.shm) {
    h = Handle{"shm", b.shm->name(), "", b.shm->size(), 0};
  } else {
    auto e = cuda::export_pointer(b.device->data());
    h = Handle{"cuda", "", e.handle_b64, e.allocation_size, e.offset};
  }
  auto merged =
      gather_and_merge({nlohmann::json{{key_for(b.cuda_device), h.to_json()}}}, chunk.params);
  if (sender_) {
    auto update = describe(chunk.params);
    update["tensor_sizes"] = chunk.sizes;
    update["ipc_handles"] = merged.at(0);
    in_flight_.push_back(std::make_unique<AsyncRpc>(
        [this, text = update.dump()] { client_.update_weights(text); }, &aborted_));
  }
  ++sent_;
}

void IpcTrainer::sync_one() {
  std::string status = "-";  // non-senders have nothing to report
  std::exception_ptr failure;
  if (sender_) {
    status = "ok";
    try {
      if (!in_flight_.empty()) {
        auto w0 = std::chrono::steady_clock::now();
        in_flight_.front()->wait(aborted_);
        wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
        in_flight_.pop_front();
      }
    } catch (const sdk::Error& e) {
      update_failed_ = e.code() != WT_ERR_ABORTED;
      status = std::string("fail:") + e.what();
      failure = std::current_exception();
    }
  }
  if (group_.size() > 1) {
    for (const auto& s : group_.all_gather(status)) {
      if (s == "-") continue;
      status = s;
    }
  }
  if (status.rfind("fail:", 0) == 0 && completed_ == 0) first_update_failed_ = true;
  if (failure) std::rethrow_exception(failure);
  if (status.rfind("fail:", 0) == 0)
    fail(WT_ERR_REMOTE, "the sending trainer rank's update failed: {}", status.substr(5));
  // Every worker has mapped what that update named: the names can go from /dev/shm now.
  if (info_.packed) {
    auto& b = buffers_.at(static_cast<std::size_t>(completed_ % info_.packed_num_buffers));
    if (b.shm) b.shm->unlink();
  } else {
    for (auto& [name, seg] : by_name_) seg.unlink();
  }
  ++completed_;
}

std::vector<nlohmann::json> IpcTrainer::gather_and_merge(const std::vector<nlohmann::json>& mine,
                                                         const std::vector<ParamMeta>& params) {
  if (group_.size() == 1) return mine;
  nlohmann::json names = nlohmann::json::array();
  for (const auto& p : params) names.push_back(p.name);
  nlohmann::json payload = {{"sender", sender_}, {"names", names}, {"handles", mine}};
  auto all = group_.all_gather(payload.dump());
  if (!sender_) return {};
  std::vector<nlohmann::json> merged = mine;  // the sender's own handles win on shared keys
  for (std::size_t r = 0; r < all.size(); ++r) {
    auto other = nlohmann::json::parse(all[r]);
    if (other["sender"].get<bool>()) continue;
    if (other["names"] != names)
      fail(WT_ERR_STATE,
           "trainer group rank {} iterated different parameters than the sender ({} vs {} tensors "
           "in "
           "this batch); every rank must yield the same names in the same order",
           r, other["names"].size(), names.size());
    const auto& handles = other["handles"];
    for (std::size_t i = 0; i < merged.size(); ++i)
      for (auto it = handles[i].begin(); it != handles[i].end(); ++it)
        if (!merged[i].contains(it.key())) merged[i][it.key()] = it.value();
  }
  return merged;
}

}  // namespace wt::ipc
