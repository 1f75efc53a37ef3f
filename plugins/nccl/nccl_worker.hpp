// The nccl worker engine: joins the domain at init (rank_offset, from the worker init info the
// sender shipped): host memory over Gloo (master_address/master_port) for a CPU worker, CUDA
// memory over NCCL (nccl_unique_id_b64) for a CUDA one. Per update it receives every tensor the
// update names, straight into the receiver's memory where the loader offers a destination:
// per tensor (unpacked), or per packed chunk when the destinations of its tensors lie back to back
// (the reference receiver stages them so); otherwise through the rotating packed buffers
// (receiving the next overlaps handing over the previous). Every tensor is handed over before
// receive returns.
#pragma once

#include "../common/communicator.hpp"
#include "../common/device_bytes.hpp"
#include "../common/param_list.hpp"
#include "../common/update_text_cache.hpp"
#include "../common/worker_session.hpp"
#include "packed_chunks.hpp"

#include <wt/sdk/plugin.hpp>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace wt::nccl {

class NcclWorker final : public sdk::WorkerBase {
 public:
  // make_communicator: empty: Gloo or NCCL, by the device and the init info (tests pass a spy).
  NcclWorker(const sdk::WorkerContext& context, const nlohmann::json& init_info,
             plugins::CommunicatorFactory make_communicator = {});
  void start() override;
  void receive(const nlohmann::json& update_info, const sdk::LoaderRef& loader) override;
  // The same text as last round (the same tensors) reuses the list read from it then.
  void receive_text(const char* update_info, const sdk::LoaderRef& loader) override;
  void finish() override;
  void abort() override;

  bool packed() const { return packed_; }
  int64_t buffer_bytes() const { return buffer_bytes_; }
  int64_t num_buffers() const { return num_buffers_; }
  // Packed chunks received straight into the loader's destinations, since creation.
  uint64_t in_place_chunks() const { return in_place_chunks_; }

 private:
  // Where a packed chunk lands: straight into the loader's destinations when every tensor of it
  // has one and they lie back to back (in_place), else into a rotating buffer, from which the
  // tensors with a destination (places, a prefix) are copied and the rest go to load().
  struct ChunkTarget {
    bool in_place = false;
    std::vector<unsigned char*> places;
    unsigned char* buffer = nullptr;  // what the chunk's broadcast was received into
  };
  void receive_list(const plugins::ParamList& list, const sdk::LoaderRef& loader);
  ChunkTarget plan_chunk(const plugins::ParamList& list, const Chunk& chunk,
                         const sdk::LoaderRef& loader);
  void hand_over(const plugins::ParamList& list, const Chunk& chunk, const ChunkTarget& target,
                 const sdk::LoaderRef& loader,
                 const std::function<wt_tensor(std::size_t, void*)>& tensor_of);
  unsigned char* chunk_buffer(std::size_t slot, uint64_t bytes);
  // CUDA: the consumer's copies out of our memory are done (the model's stream).
  void wait_for_consumer();

  sdk::HostLog log_;
  DLDevice device_{kDLCPU, 0};
  void* stream_ = nullptr;  // the model's stream (CUDA)
  bool packed_ = false;
  int64_t buffer_bytes_ = int64_t{1} << 30;
  int64_t num_buffers_ = 2;
  std::unique_ptr<plugins::Communicator> group_;
  std::vector<std::vector<unsigned char>> host_buffers_;
  std::vector<plugins::DeviceBytes> device_buffers_;
  plugins::WorkerSession session_{"nccl"};
  uint64_t in_place_chunks_ = 0;
  plugins::UpdateTextCache update_text_;
};

}  // namespace wt::nccl
