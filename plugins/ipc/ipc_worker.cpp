#include "ipc_worker.hpp"

#include "ipc_wire.hpp"

#include <wt/sdk/parallel_copy.hpp>

#include <cstdint>

#include <sys/mman.h>

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace wt::ipc {

using sdk::fail;

namespace {

// The update's tensors over their mapped bytes. They point into `params` (names, shapes), which
// must outlive them.
std::vector<wt_tensor> tensors_over(std::vector<ParamMeta>& params,
                                    const std::vector<unsigned char*>& data, DLDevice device) {
  std::vector<wt_tensor> tensors(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    auto& p = params[i];
    tensors[i].struct_size = sizeof(wt_tensor);
    tensors[i].abi_version = WT_ABI_VERSION;
    tensors[i].name = p.name.c_str();
    tensors[i].tensor = DLTensor{
        data[i], device, static_cast<int32_t>(p.shape.size()), p.dtype, p.shape.data(), nullptr, 0};
  }
  return tensors;
}

// A trainer killed mid-round cannot unlink what it created; the last user does. Its liveness
// file says whether it lives (probed once per creator, not once per segment).
void unlink_orphaned_segments(const std::vector<nlohmann::json>& handle_maps,
                              const std::string& key) {
  std::map<std::string, bool> creator_dead;  // by liveness token
  std::set<std::string> unlinked;
  for (const auto& map : handle_maps)
    if (auto it = map.find(key);
        it != map.end() && it->contains("name") && (*it)["name"].is_string()) {
      const auto& name = (*it)["name"].get_ref<const std::string&>();
      auto parsed = shm::parse_name(name);
      if (parsed.kind != shm::NameKind::segment || unlinked.count(name)) continue;
      auto [dead, fresh] = creator_dead.try_emplace(parsed.token, false);
      if (fresh) dead->second = segment_creator_dead(name);
      if (dead->second && shm_unlink(name.c_str()) == 0) unlinked.insert(name);
    }
}

}  // namespace

IpcWorker::IpcWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info)
    : log_(context.host, "[ipc] "), device_(context.device), stream_(context.stream) {
  sdk::FieldReader r(init_info, "init_info for backend 'ipc' (worker)");
  packed_ = r.opt_bool("packed", false);
  // Sent by a wt trainer whose packed tensors start at multiples of it; absent (vLLM's layout):
  // back to back.
  int64_t alignment = r.opt_int("packed_alignment", 1);
  r.finish();
  if (alignment < 1 || alignment > 4096 || (alignment & (alignment - 1)) != 0)
    sdk::fail_field("packed_alignment", WT_ERR_INVALID_ARGUMENT,
                    "invalid init_info for backend 'ipc' (worker): field 'packed_alignment' must "
                    "be a power of two in 1..4096");
  alignment_ = static_cast<uint64_t>(alignment);
  // Receiver-side options (wt serve --weight-transfer-config): how many threads copy into place.
  sdk::FieldReader o(context.backend_options, "backend options for backend 'ipc' (worker)");
  int64_t threads = o.opt_int("copy_threads", 0);
  o.finish();
  if (threads < 0 || threads > 256)
    sdk::fail_field("copy_threads", WT_ERR_INVALID_ARGUMENT,
                    "invalid backend options for backend 'ipc': field 'copy_threads' must be in "
                    "0..256");
  copy_threads_ = threads > 0 ? static_cast<unsigned>(threads) : default_copy_threads();
  if (device_.device_type == kDLCPU)
    key_ = kHostKey;
  else if (device_.device_type == kDLCUDA)
    key_ = cuda::device_uuid(device_.device_id);
  else
    fail(WT_ERR_UNSUPPORTED,
         "the ipc worker loads into host (kDLCPU) or CUDA (kDLCUDA) memory, not "
         "DLPack device type {}",
         static_cast<int>(device_.device_type));
  sweep_orphaned_segments();
  log_.debug("worker ready: packed={}, handle key {}", packed_, key_);
}

void IpcWorker::start() {
  std::lock_guard<std::mutex> l(abort_mu_);
  if (active_) fail(WT_ERR_STATE, "a weight update is already active; call finish first");
  active_ = true;
  used_this_round_.clear();
  sweep_orphaned_segments();
}

unsigned char* IpcWorker::map_handle(const Handle& h, uint64_t need, const std::string& what) {
  if (h.offset > h.size || need > h.size - h.offset)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: {} bytes at offset {} do not fit in a {}-byte {} allocation", what, need,
         h.offset, h.size, h.kind);
  if (h.kind == "shm") {
    if (device_.device_type != kDLCPU)
      fail(WT_ERR_INCOMPATIBLE, "invalid {}: a host-memory handle was selected for a CUDA worker",
           what);
    auto it = shm_.find(h.name);
    bool first_use = used_this_round_.insert(h.name).second;
    if (it == shm_.end()) {
      it = shm_.emplace(h.name, ShmSegment::open(h.name, h.size)).first;
    } else if (it->second.size() < h.size || (first_use && !it->second.is_current())) {
      // Tensors of this update mapped earlier may point into the old mapping: it stays mapped
      // until the update's load has returned (receive() drops retired_ then).
      ShmSegment fresh = ShmSegment::open(h.name, h.size);
      retired_.push_back(std::exchange(it->second, std::move(fresh)));
    }
    return it->second.data() + h.offset;
  }
  if (device_.device_type != kDLCUDA)
    fail(WT_ERR_INCOMPATIBLE, "invalid {}: a CUDA handle was selected for a host-memory worker",
         what);
  if (need == 0 && h.size == 0) return nullptr;  // a zero-element tensor: nothing was shared
  auto it = cuda_.find(h.cuda_handle);
  if (it == cuda_.end())
    it = cuda_
             .emplace(h.cuda_handle,
                      std::make_unique<cuda::Imported>(h.cuda_handle, device_.device_id))
             .first;
  // The wire's sizes are the trainer's word; the driver's size of what was opened is the fact.
  const uint64_t real = it->second->size();
  if (h.offset > real || need > real - h.offset)
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid {}: {} bytes at offset {} do not fit in the {}-byte CUDA allocation the handle "
         "opened",
         what, need, h.offset, real);
  return it->second->base() + h.offset;
}

void IpcWorker::deliver(const std::vector<wt_tensor>& tensors, const std::vector<uint64_t>& nbytes,
                        const sdk::LoaderRef& loader) {
  std::vector<CopyJob> in_place;
  std::vector<const wt_tensor*> placed;
  std::vector<wt_tensor> rest;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    std::optional<DLTensor> dst;
    if (device_.device_type == kDLCPU) {
      ParamMeta meta{t.name, t.tensor.dtype,
                     std::vector<int64_t>(t.tensor.shape, t.tensor.shape + t.tensor.ndim)};
      dst = loader.destination(meta);
    }
    if (dst && (dst->device.device_type == kDLCPU || dst->device.device_type == kDLCUDAHost) &&
        dst->data != nullptr && dst->strides == nullptr) {
      in_place.push_back(
          {static_cast<unsigned char*>(dst->data) + dst->byte_offset, t.tensor.data, nbytes[i]});
      placed.push_back(&t);
    } else {
      rest.push_back(t);
    }
  }
  // Guarded: the trainer (or anyone who can write the file) may shrink a segment under the copy.
  if (auto fault = guarded_parallel_copy(in_place, copy_threads_)) {
    std::vector<wt_tensor> named;
    for (const auto* t : placed) named.push_back(*t);
    fail(WT_ERR_SYSTEM, "{}", fault->message(named));
  }
  for (const auto* t : placed) loader.written(t->name);
  if (!rest.empty()) loader.load(rest);
}

// Resolves and maps every tensor's bytes before any is delivered: a rejected update loads nothing.
std::vector<unsigned char*> IpcWorker::map_update(const UpdateInfo& u) {
  std::vector<unsigned char*> data(u.params.size());
  if (u.packed) {
    // Offsets as the trainer packed them: each tensor at the next multiple of the alignment.
    std::vector<uint64_t> offsets(u.params.size());
    uint64_t total = 0;
    for (std::size_t i = 0; i < u.nbytes.size(); ++i) {
      const uint64_t n = u.nbytes[i];
      // A sum that wraps would map too little and hand out wild data.
      if (total > UINT64_MAX - (alignment_ - 1) || n > UINT64_MAX - (total + alignment_ - 1))
        fail(WT_ERR_INVALID_ARGUMENT,
             "invalid update_info for backend 'ipc': the tensors' sizes add up to more bytes than "
             "64 bits can count");
      offsets[i] = (total + alignment_ - 1) & ~(alignment_ - 1);
      total = offsets[i] + n;
    }
    Handle h = select_handle(u.handle_maps.at(0), key_, "ipc_handles");
    unsigned char* base = map_handle(h, total, "ipc_handles");
    for (std::size_t i = 0; i < u.params.size(); ++i) data[i] = base + offsets[i];
  } else {
    for (std::size_t i = 0; i < u.params.size(); ++i) {
      std::string what = "ipc_handles[" + std::to_string(i) + "] ('" + u.params[i].name + "')";
      data[i] = map_handle(select_handle(u.handle_maps[i], key_, what), u.nbytes[i], what);
    }
  }
  return data;
}

void IpcWorker::receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) {
  // abort() from another thread while this runs only flags: what the load may be reading is
  // released here, once it has returned.
  {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (!active_) fail(WT_ERR_STATE, "start must be called before receive");
    receiving_ = true;
  }
  struct EndReceive {
    IpcWorker& w;
    ~EndReceive() {
      std::lock_guard<std::mutex> l(w.abort_mu_);
      w.receiving_ = false;
      if (w.release_after_receive_) {
        w.release_after_receive_ = false;
        // A load that failed midway may have queued copies out of the mappings: they finish
        // before any handle is closed.
        if (w.device_.device_type == kDLCUDA) try {
            cuda::wait_for(w.stream_, w.device_.device_id);
          } catch (...) {
          }
        w.cuda_.clear();
      }
    }
  } end_receive{*this};
  // Mappings replaced while this update is mapped go when it is done, loaded or failed.
  struct DropRetired {
    std::vector<ShmSegment>& retired;
    ~DropRetired() { retired.clear(); }
  } drop_retired{retired_};
  UpdateInfo u = parse_update_info(update_info, packed_);
  const std::vector<unsigned char*> data = map_update(u);
  const std::vector<wt_tensor> tensors = tensors_over(u.params, data, device_);
  log_.debug("update: {} tensor(s) mapped ({} host mapping(s) cached, {} replaced); loading",
             tensors.size(), shm_.size(), retired_.size());
  if (!tensors.empty()) deliver(tensors, u.nbytes, loader);
  // The consumer may have queued copies out of the mapped memory on its stream without waiting:
  // they are done before this update is answered (the trainer then reuses or frees the memory)
  // and before any handle is closed.
  if (device_.device_type == kDLCUDA && !tensors.empty())
    cuda::wait_for(stream_, device_.device_id);
  {
    std::lock_guard<std::mutex> l(abort_mu_);
    if (release_after_receive_)
      fail(WT_ERR_ABORTED, "the ipc worker was aborted during this update");
  }
  unlink_orphaned_segments(u.handle_maps, key_);
}

void IpcWorker::finish() {
  std::lock_guard<std::mutex> l(abort_mu_);
  if (!active_) fail(WT_ERR_STATE, "finish called with no active weight update");
  active_ = false;
  for (auto it = shm_.begin(); it != shm_.end();)
    it = used_this_round_.count(it->first) ? std::next(it) : shm_.erase(it);
  cuda_.clear();
}

void IpcWorker::abort() {
  std::lock_guard<std::mutex> l(abort_mu_);
  active_ = false;
  if (receiving_)
    release_after_receive_ = true;  // a load may be reading the mappings: receive releases them
  else
    cuda_.clear();
}

}  // namespace wt::ipc
