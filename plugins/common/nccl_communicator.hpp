// A broadcast domain over NCCL, for CUDA memory, in vLLM's unique-id mode: rank 0 mints the id
// (unique_id_b64), the sender ships it to the workers in their init info, and every rank creates
// its communicator from it, then performs the one-element float32 SUM all-reduce warm-up every
// vLLM worker performs (a peer that skips it deadlocks everyone).
//
// libnccl is resolved at run time (dlopen "libnccl.so.2", or $WT_NCCL_LIBRARY), and CUDA through
// the driver API (wt/sdk/cuda_driver.hpp): a plugin with this code loads, and its host path
// works, on a machine without NCCL or a GPU; the CUDA path then fails with WT_ERR_UNSUPPORTED
// saying which is missing.
//
// No wait is unbounded: the communicator is non-blocking, and each operation is polled against
// its deadline (creation: the rendezvous deadline; a broadcast: the transfer deadline). Past it,
// or on abort() from any thread, the communicator is aborted (ncclCommAbort) and broken for good.
// Creation fails at once when NCCL cannot make its own socket (ncclGetUniqueId, or the init call,
// returns the error), and can be aborted by its owner while it waits for its peers.
#pragma once

#include "communicator.hpp"

#include <wt/sdk/abortable_wait.hpp>

#include <memory>
#include <string>
#include <vector>

namespace wt::plugins {

class NcclCommunicator final : public Communicator {
 public:
  // Mints a unique id: standard base64 of its 128 bytes.
  static std::string unique_id_b64();
  // Decodes and checks one from an init info (standard base64, 128 bytes), naming `field`.
  static std::string decode_unique_id(const std::string& b64, const std::string& field);

  // Joins the domain as `rank` of `world_size` on CUDA device `device`, then the warm-up.
  // `aborted` (optional, outlives the constructor): the owner's abort, which ends a creation or
  // warm-up still waiting on its peers with WT_ERR_ABORTED (the communicator then freed).
  NcclCommunicator(const std::string& unique_id_b64, int rank, int world_size, int device,
                   std::chrono::milliseconds rendezvous_timeout,
                   std::chrono::milliseconds transfer_timeout,
                   const sdk::AbortSignal* aborted = nullptr);
  // Finalizes within a deadline (10 s, or the transfer deadline when shorter), then destroys;
  // aborts instead when finalizing errs or takes longer.
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // `data` is CUDA memory on this communicator's device.
  void broadcast(void* data, std::size_t bytes, DLDataType dtype, int root,
                 const std::string& what) override;
  // Point-to-point: sends and receives (CUDA memory on this communicator's device) as one NCCL
  // group, then waits for all of them within the transfer deadline. Between two ranks, the n-th
  // send of one meets the n-th receive of the other. A failure aborts the communicator (broken).
  struct P2p {
    bool send = false;
    int peer = 0;
    void* data = nullptr;
    std::size_t bytes = 0;
  };
  void exchange(const std::vector<P2p>& ops, const std::string& what);
  void abort() override;
  bool broken() const override;
  bool peers_see_it_close() const override { return false; }
  // The stream every collective runs on (a CUstream): consumers of received bytes order after it.
  void* stream() const override;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace wt::plugins
