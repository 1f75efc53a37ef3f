#include "sparse_worker.hpp"

#include "../common/device_bytes.hpp"
#include "../common/domains.hpp"
#include "../common/param_list.hpp"
#include "packed_round.hpp"
#include "patch_rules.hpp"

#include <wt/dtype.hpp>

#include <cstring>
#include <vector>

namespace wt::sparse {

using sdk::fail;

namespace {

// A patch of host memory, as the loader takes it; `length` is its element count.
wt_sparse_patch patch_view(const ParamMeta& param, void* indices, void* values, int64_t* length) {
  wt_sparse_patch p{};
  p.struct_size = sizeof p;
  p.abi_version = WT_ABI_VERSION;
  p.name = param.name.c_str();
  p.indices = DLTensor{indices, {kDLCPU, 0}, 1, {kDLInt, 32, 1}, length, nullptr, 0};
  p.values = DLTensor{values, {kDLCPU, 0}, 1, param.dtype, length, nullptr, 0};
  p.full_ndim = static_cast<int32_t>(param.shape.size());
  p.full_shape = param.shape.data();
  return p;
}

// The patches' element counts (num_updates_list) against the parameters they patch. A patch
// changes at most every element once: a larger count (from the wire) is refused before anything
// is allocated for it.
void check_patch_counts(const plugins::ParamList& list, const std::vector<int64_t>& counts) {
  const auto& params = list.params;
  if (counts.empty())
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid update_info for backend 'sparse_nccl': 'num_updates_list' cannot be empty for "
         "sparse updates");
  if (counts.size() != params.size())
    fail(WT_ERR_INVALID_ARGUMENT,
         "invalid update_info for backend 'sparse_nccl': 'num_updates_list' has {} entries but "
         "'names' has {}",
         counts.size(), params.size());
  for (std::size_t i = 0; i < counts.size(); ++i)
    if (counts[i] < 0 || counts[i] > INT32_MAX)
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid update_info for backend 'sparse_nccl': 'num_updates_list[{}]' must be "
           "non-negative (and int32 indices count at most 2^31 - 1), got {}",
           i, counts[i]);
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::size_t es = element_size(params[i].dtype);
    const uint64_t elements = es == 0 ? 0 : list.nbytes[i] / es;
    if (static_cast<uint64_t>(counts[i]) > elements)
      fail(WT_ERR_INVALID_ARGUMENT,
           "invalid update_info for backend 'sparse_nccl': 'num_updates_list[{}]' is {}, but "
           "'{}' has {} elements",
           i, counts[i], params[i].name, elements);
  }
}

}  // namespace

SparseWorker::SparseWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info,
                           plugins::CommunicatorFactory make_communicator, bool pack_host_rounds)
    : log_(context.host, "[sparse_nccl] "),
      device_(context.device),
      pack_host_rounds_(pack_host_rounds) {
  const auto init =
      plugins::read_worker_init(context, init_info, "sparse_nccl", {"host_round_format"});
  // The host round's wire is the trainer's choice, said at init: a format this worker cannot
  // read is refused now, not mid-round (CUDA rounds are vLLM's, two broadcasts per patch).
  if (init.unique_id.empty()) {
    auto it = init.extra.find("host_round_format");
    if (it == init.extra.end())
      sdk::fail_field("host_round_format", WT_ERR_INCOMPATIBLE,
                      "invalid init_info for backend 'sparse_nccl' (worker): the trainer did not "
                      "say its host round format (field 'host_round_format'); it is older than "
                      "this worker, upgrade it");
    if (it->second != "per_patch" && !(it->second == "packed" && pack_host_rounds))
      sdk::fail_field("host_round_format", WT_ERR_INCOMPATIBLE,
                      "invalid init_info for backend 'sparse_nccl' (worker): field "
                      "'host_round_format' is \"{}\", a format this worker cannot read (it reads "
                      "{})",
                      it->second,
                      pack_host_rounds ? "\"packed\" and \"per_patch\"" : "\"per_patch\"");
    pack_host_rounds_ = it->second == "packed";
  }
  group_ = plugins::join_worker_domain(init, device_, std::move(make_communicator));
  session_.expect_digests(init.round_digests);
  log_.debug("worker ready: rank {} of {}", init.options.rank, init.options.world_size);
}

void SparseWorker::start() {
  session_.start(group_.get());
}

void SparseWorker::receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) {
  plugins::WorkerSession::Receiving receiving(session_);
  if (session_.verified(*group_, update_info)) return;  // the round's digests, not patches
  // vLLM's SparseNCCLWeightTransferUpdateInfo: names, dtype_names, full shapes, num_updates_list.
  sdk::FieldReader r(update_info, "update_info for backend 'sparse_nccl'");
  auto list = plugins::read_param_list(r);
  auto counts = r.get_int_list("num_updates_list");
  r.finish();
  const auto& params = list.params;
  check_patch_counts(list, counts);
  // Every patch arrives before any is applied.
  const bool cuda = device_.device_type == kDLCUDA;
  std::vector<int64_t> lengths(counts);
  if (!cuda && pack_host_rounds_) {  // one broadcast for the round (packed_round.hpp)
    std::vector<std::size_t> sizes;
    for (const auto& p : params) sizes.push_back(element_size(p.dtype));
    unsigned char* packed = packed_.prepare(packed_round_layout(counts, sizes));
    const auto& layout = packed_.layout();
    group_->broadcast(
        packed, layout.bytes, {kDLUInt, 8, 1}, 0,
        "broadcast of the round's " + std::to_string(params.size()) + " patches (packed)");
    std::vector<wt_sparse_patch> batch(params.size());
    for (std::size_t i = 0; i < params.size(); ++i)
      batch[i] = patch_view(params[i], packed + layout.indices_at[i], packed + layout.values_at[i],
                            &lengths[i]);
    load_checked(batch, loader);
    return;
  }
  std::vector<std::vector<int32_t>> indices(params.size());
  std::vector<std::vector<unsigned char>> values(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto n = static_cast<std::size_t>(counts[i]);
    const std::size_t vbytes = n * element_size(params[i].dtype);
    indices[i].resize(n);
    values[i].resize(vbytes);
    const std::string& name = params[i].name;
    if (!cuda) {
      group_->broadcast(indices[i].data(), 4 * n, {kDLInt, 32, 1}, 0,
                        "broadcast of the indices of '" + name + "'");
      group_->broadcast(values[i].data(), vbytes, params[i].dtype, 0,
                        "broadcast of the values of '" + name + "'");
      continue;
    }
    plugins::DeviceBytes di(device_.device_id, 4 * n), dv(device_.device_id, vbytes);
    group_->broadcast(di.data(), 4 * n, {kDLInt, 32, 1}, 0,
                      "broadcast of the indices of '" + name + "'");
    group_->broadcast(dv.data(), vbytes, params[i].dtype, 0,
                      "broadcast of the values of '" + name + "'");
    plugins::copy_async(device_.device_id, indices[i].data(), di.data(), 4 * n, group_->stream());
    plugins::copy_async(device_.device_id, values[i].data(), dv.data(), vbytes, group_->stream());
    plugins::wait_stream(device_.device_id, group_->stream());
  }
  std::vector<wt_sparse_patch> batch(params.size());
  for (std::size_t i = 0; i < params.size(); ++i)
    batch[i] = patch_view(params[i], indices[i].data(), values[i].data(), &lengths[i]);
  load_checked(batch, loader);
}

// The trainer's rules, again on what arrived (host memory by now): indices in range and once,
// values free of NaN (vLLM's loader would read a NaN as "unchanged"). Nothing of a round that
// breaks one is applied.
void SparseWorker::load_checked(std::span<const wt_sparse_patch> batch,
                                const sdk::LoaderRef& loader) {
  check_round(batch, nullptr);
  loader.load_patches(batch);
}

void SparseWorker::finish() {
  session_.finish();
}

void SparseWorker::abort() {
  session_.abort(group_.get());
}

}  // namespace wt::sparse
